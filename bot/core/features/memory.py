"""An agent's memory: the `memory_write` tool, its notes in the system prompt, and the run's tool loop.

With memory on (`/agent edit name:x memory:on`) an agent's group run offers the
model one tool, `memory_write(note)`. Its notes are kept per agent (the store)
and shown at the end of its system message under `<memory>`: the newest that
fit `MEMORY_BUDGET` tokens, with a marker line counting the older ones dropped.
A run must write once: when it ends without a note it gets one reminder and one
more step; a run that still does not write is recorded `memory_skipped`.

The pure parts (`memory_section`, `read_note`) are table-tested; `run_with_memory`
is the loop over the LLM and Store ports.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from bot.core.errors import LLMError
from bot.core.models import Agent, ChatMessage, Completion, Note, Tool, ToolCall, Usage
from bot.core.ports import LLM, NoteStore, TokenCounter

log = logging.getLogger(__name__)

TOOL_NAME = "memory_write"
MEMORY_TOOL = Tool(TOOL_NAME, "Save a short note to remember in later runs", {
    "type": "object",
    "properties": {"note": {"type": "string", "description": "what to remember, in a sentence or two"}},
    "required": ["note"],
})
NOTE_MAX = 500  # characters in one note
MEMORY_BUDGET = 800  # tokens of notes in the system prompt
NOTES_READ = 200  # the newest notes read for a prompt (the budget keeps fewer)
MAX_TOOL_STEPS = 4  # model calls of a run before its reminder
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


async def load_memory(store: NoteStore, agent: Agent, counter: TokenCounter, budget: int = MEMORY_BUDGET) -> str:
    """The agent's `<memory>` block as its prompts show it ('' when memory is off)."""
    if not agent.memory:
        return ""
    notes = await store.notes(agent.id, limit=NOTES_READ)
    return memory_section(notes, await store.note_count(agent.id), counter, budget)


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


async def run_with_memory(llm: LLM, store: NoteStore, agent: Agent, messages: Sequence[ChatMessage], *,
                          cache_key: str | None = None) -> Answer:
    """Call the model with `memory_write` until it answers without tool calls (at most
    `MAX_TOOL_STEPS` calls); no note by then: one reminder and one more call.

    The reply is the text of the first answer without tool calls; when it was empty, the
    text after the reminder. A failed call before the reminder fails the run; a failed
    reminder step keeps the reply (and the run skipped its note)."""
    conversation = list(messages)
    usage, model, calls, wrote, provider = Usage(), "", 0, False, ""
    reply: str | None = None

    async def step() -> Completion:
        nonlocal usage, model, calls, provider
        calls += 1  # a call that fails is a call made
        completion = await llm.complete(conversation, model=agent.model, cache_key=cache_key, tools=(MEMORY_TOOL,))
        usage, model = usage + completion.usage, completion.model or model
        provider = completion.provider or provider
        return completion

    for _ in range(MAX_TOOL_STEPS):
        try:
            completion = await step()
        except LLMError as exc:
            return Answer("", usage, model, wrote, calls, error=exc, provider=provider)
        if not completion.tool_calls:
            reply = completion.text
            break
        wrote = await _answer(store, agent, completion, conversation) or wrote
    if wrote:
        return Answer(reply or "", usage, model, True, calls, provider=provider)
    if reply is not None:
        conversation.append(ChatMessage("assistant", reply))
    conversation.append(ChatMessage("user", REMINDER))
    log.info("agent=%s wrote no note: reminded, one more step", agent.name)
    try:
        completion = await step()
    except LLMError as exc:
        log.warning("agent=%s: the memory reminder step failed: %s", agent.name, exc)
        return Answer(reply or "", usage, model, False, calls, provider=provider)
    if completion.tool_calls:
        wrote = await _answer(store, agent, completion, conversation)
    return Answer(reply or completion.text, usage, model, wrote, calls, provider=provider)


async def _answer(store: NoteStore, agent: Agent, completion: Completion, conversation: list[ChatMessage]) -> bool:
    """Run the completion's tool calls, appending them and their results to the conversation.
    True when a note was saved."""
    conversation.append(ChatMessage("assistant", completion.text, tool_calls=completion.tool_calls))
    saved = False
    for call in completion.tool_calls:
        note, result = read_note(call)
        if note is not None:
            await store.add_note(agent.id, note)
            saved = True
            log.info("agent=%s saved a note (%d characters)", agent.name, len(note))
        else:
            log.info("agent=%s: tool call %s refused: %s", agent.name, call.name, result)
        conversation.append(ChatMessage("tool", result, tool_call_id=call.id))
    return saved
