"""The two prompts of seed 000, verbatim, and how they are filled.

Filling uses plain `{{key}}` replacement (never `str.format`), so braces in
people's messages are safe.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence

from bot.core.models import Agent, Message
from bot.core.rules.attachments import brief_text

SPEAKER_SELECTOR_PROMPT = """\
You are coordinating a group chat. Choose who speaks next.

<roles>
{{roles}}
</roles>

<conversation>
{{thread}}
</conversation>

Read the conversation, then pick the one participant from {{participants}}
whose role best fits what the conversation needs next.
If the latest messages fully answer the task, reply TERMINATE instead.
Reply with only the participant's name, or TERMINATE."""

PARTICIPANT_PROMPT = """\
You are {{name}}, the {{role}} in a group chat working on the task below.
The other participants are: {{others}}.

<task>{{task}}</task>
<conversation>{{thread}}</conversation>

Write your next message. Speak only for your own role: build on or correct
what others said, and name who you are answering. Keep it under 150 words.
Never write messages for other participants.
If the task is complete and nothing is left for anyone to do, end with TERMINATE."""

SYSTEM_AUTHOR = "roundtable"


_SLOT = re.compile(r"\{\{(\w+)\}\}")


def fill(template: str, **values: str) -> str:
    """One pass over the template, so text put in a slot is never filled again."""
    return _SLOT.sub(lambda m: values.get(m.group(1), m.group(0)), template)


def thread_line(author_name: str, text: str) -> str:
    """How one message appears in a prompt's thread: tagged with its speaker."""
    return f"[{author_name}] {text}"


def render_thread(
    messages: Sequence[Message], omitted: int = 0, first: Sequence[Message] = (), *,
    references: Collection[int] = (), reference_text: str = "", show: Callable[[Message], str] = brief_text,
) -> str:
    """Thread lines: `first` (tasks shown first), the omitted rows' marker, `messages`; the rows whose
    seq is in `references` show `reference_text` (their text is elsewhere). `show` gives a row's text
    with its files (default: a short line per file)."""
    lines = [thread_line(m.author_name, show(m)) for m in first]
    if omitted:
        lines.append(thread_line(SYSTEM_AUTHOR, f"({omitted} earlier messages omitted)"))
    lines.extend(thread_line(m.author_name, reference_text if m.seq in references else show(m)) for m in messages)
    return "\n".join(lines)


def roles_block(agents: Sequence[Agent]) -> str:
    return "\n".join(f"{a.name}: {a.role}" for a in agents)


def name_list(names: Sequence[str]) -> str:
    return ", ".join(names) if names else "(nobody)"


def selector_prompt(agents: Sequence[Agent], thread: str, eligible: Sequence[str]) -> str:
    return fill(
        SPEAKER_SELECTOR_PROMPT,
        roles=roles_block(agents),
        thread=thread,
        participants=name_list(eligible),
    )


def participant_prompt(agent: Agent, others: Sequence[str], task: str, thread: str) -> str:
    return fill(
        PARTICIPANT_PROMPT,
        name=agent.name,
        role=agent.role,
        others=name_list(others),
        task=task,
        thread=thread,
    )


def system_message(agent: Agent, brief: str, memory: str = "") -> str:
    """The agent's own system prompt, followed by the group's brief when set, then its
    `<memory>` block when memory is on (`bot.core.features.memory`)."""
    return "\n\n".join([agent.system_prompt, *(part for part in (brief.strip(), memory.strip()) if part)])
