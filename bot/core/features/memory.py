"""An agent's memory: the `memory_write` tool, its notes in the system prompt, and its reminder.

With memory on (`/agent edit name:x memory:on`) an agent's group run offers the
model the built-in tool `memory_write(note)` (`MemoryTools`, a source of the tool loop,
`bot.core.features.tools`), besides the tools it was granted. Its notes are kept per agent (the store)
and shown at the end of its system message under `<memory>`: the newest that
fit `MEMORY_BUDGET` tokens, with a marker line counting the older ones dropped.
A run must write once: when it ends without a note it gets one reminder and one
more step; a run that still does not write is recorded `memory_skipped`.

The pure parts (`memory_section`, `read_note`) are table-tested; `run_agent_tools`
runs the tool loop and, memory on, the reminder.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from bot.core.errors import LLMError
from bot.core.features.tools import LoopResult, ToolLoop
from bot.core.models import Agent, ChatMessage, Note, Tool, ToolCall, ToolOutput, ToolSpec, Usage
from bot.core.ports import HasNotes, TokenCounter, ToolContext

log = logging.getLogger(__name__)

TOOL_NAME = "memory_write"
MEMORY_TOOL = Tool(TOOL_NAME, "Save a short note to remember in later runs", {
    "type": "object",
    "properties": {"note": {"type": "string", "description": "what to remember, in a sentence or two"}},
    "required": ["note"],
})
MEMORY_SPEC = ToolSpec(TOOL_NAME, MEMORY_TOOL.description, MEMORY_TOOL.parameters, builtin=True)
NOTE_MAX = 500  # characters in one note
MEMORY_BUDGET = 800  # tokens of notes in the system prompt
NOTES_READ = 200  # the newest notes read for a prompt (the budget keeps fewer)
MAX_TOOL_STEPS = 4  # model calls of a run with memory only (no granted tool) before its reminder
REMINDER = ("Reminder: memory is on for you. Call memory_write once now with what you want to remember "
            "from this conversation.")
SAVED = "Saved."


def memory_section(notes: Sequence[Note], total: int, counter: TokenCounter, budget: int = MEMORY_BUDGET) -> str:
    """The `<memory>` block: the newest of `notes` (oldest first) whose lines fit `budget` tokens,
    after a marker counting the older ones left out of `total`."""
    kept: list[str] = []
    used = 0
    for note in reversed(notes):
        line = "- " + " ".join(note.text.split())
        cost = counter.count(line) + 1
        if used + cost > budget:
            break
        kept.append(line)
        used += cost
    lines = ["<memory>"]
    if not total:
        lines.append("Memory is on: you have no notes yet. Save what you want to remember with memory_write.")
    else:
        lines.append("Memory is on. Your notes from earlier runs, oldest first (save a new one with memory_write):")
        dropped = total - len(kept)
        if dropped:
            lines.append(f"({dropped} older note{'' if dropped == 1 else 's'} dropped)")
        lines.extend(reversed(kept))
    lines.append("</memory>")
    return "\n".join(lines)


async def load_memory(store: HasNotes, agent: Agent, counter: TokenCounter, budget: int = MEMORY_BUDGET) -> str:
    """The agent's `<memory>` block as its prompts show it ('' when memory is off)."""
    if not agent.memory:
        return ""
    notes = await store.notes.notes(agent.id, limit=NOTES_READ)
    return memory_section(notes, await store.notes.note_count(agent.id), counter, budget)


def read_note(call: ToolCall) -> tuple[str | None, str]:
    """(the note to save, or None; the tool result the model is sent back)."""
    if call.name != TOOL_NAME:
        return None, f"error: there is no tool named {call.name!r}; the only tool is {TOOL_NAME}."
    try:
        arguments = json.loads(call.arguments or "{}")
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict):
        return None, f'error: the arguments must be a JSON object such as {{"note": "..."}}; got {call.arguments!r}.'
    note = arguments.get("note")
    if not isinstance(note, str) or not note.strip():
        return None, "error: the note is empty; call memory_write with a short note in \"note\"."
    note = note.strip()
    if len(note) > NOTE_MAX:
        return None, (f"error: the note is {len(note)} characters long; the limit is {NOTE_MAX}. "
                      "Call memory_write again with a shorter note.")
    return note, SAVED


class MemoryTools:
    """The built-in source of `memory_write` (`bot.core.ports.ToolSource`): saves the agent's note."""

    name = ""

    def __init__(self, store: HasNotes) -> None:
        self.store = store

    def tools(self) -> tuple[ToolSpec, ...]:
        return (MEMORY_SPEC,)

    async def call(self, tool: str, arguments: dict[str, object], context: ToolContext) -> ToolOutput:
        note, result = read_note(ToolCall("", tool, json.dumps(arguments)))
        if note is None:
            log.info("agent_id=%s: memory_write refused: %s", context.agent_id, result)
            return ToolOutput(result, error=True)
        await self.store.notes.add_note(context.agent_id, note)
        log.info("agent_id=%s saved a note (%d characters)", context.agent_id, len(note))
        return ToolOutput(SAVED)


@dataclass(frozen=True)
class Answer:
    """A run's answer: the reply text, the tokens of every call, and (memory on) whether it wrote a note."""

    text: str
    usage: Usage
    model: str
    wrote: bool
    calls: int
    error: LLMError | None = None  # a model call before the reminder failed: the run failed
    provider: str = ""

    @property
    def skipped(self) -> bool:
        return not self.wrote


def _wrote(result: LoopResult) -> bool:
    return any(d.name == TOOL_NAME and d.result == SAVED for d in result.done)


def _answer(result: LoopResult, text: str, *, error: LLMError | None = None) -> Answer:
    return Answer(text, result.usage, result.model, _wrote(result), result.calls, error=error,
                  provider=result.provider)


async def run_agent_tools(loop: ToolLoop, messages: Sequence[ChatMessage], *, memory: bool) -> Answer:
    """The tool loop (`bot.core.features.tools`); with `memory`, a run that wrote no note by its end gets
    one reminder and one more call.

    The reply is the text of the first answer without tool calls; when it was empty, the
    text after the reminder. A failed call before the reminder fails the run; a failed
    reminder step keeps the reply (and the run skipped its note)."""
    result = await loop.run(messages)
    if result.error is not None:
        return _answer(result, "", error=result.error)
    reply = result.reply
    if not memory or _wrote(result):
        return _answer(result, reply or "")
    if reply is not None:
        result.conversation.append(ChatMessage("assistant", reply))
    result.conversation.append(ChatMessage("user", REMINDER))
    log.info("agent=%s wrote no note: reminded, one more step", loop.agent.name)
    try:
        completion = await loop.call(result)
    except LLMError as exc:
        log.warning("agent=%s: the memory reminder step failed: %s", loop.agent.name, exc)
        return _answer(result, reply or "")
    if completion.tool_calls:
        await loop.answer(result, completion)
    return _answer(result, reply or completion.text)
