"""The two prompts of seed 000, verbatim, and how they are filled; and the shared layout.

`prompt_layout: seed` sends seed 000's templates as they are. `prompt_layout: shared` (the
default, SPEC §6) gives every caller of a group the same first bytes: a system message with
the group's brief, the roster and the rules every participant's message follows (the
Participant prompt's own sentences, the same for every agent: `PARTICIPANT_RULES`)
(`shared_header`), then a user message that opens with the task chain and the thread window
(`conversation`); each caller's own part comes last in it (`participant_part`,
`selector_part`, and the rolling summary's `summary_part`). So the provider's prompt cache
reads a new reply once for the whole group, not once per caller, and the part each caller
reads anew on every call (after the newest reply) holds only what is its own.

Filling uses plain `{{key}}` replacement (never `str.format`), so braces in
people's messages are safe.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence

from bot.core.models import Agent, ChatMessage, Message, NewMessage
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

# The shared layout (SPEC §6): the same words as seed 000's, split into what every caller shares
# (the header and the conversation) and each caller's own part, which comes last. The Participant
# prompt's closing instructions are the same for every agent: past "Write your next message." they sit
# in the header (PARTICIPANT_RULES, cut from the seed's template so they stay its words), which every
# call reads cached, instead of in each agent's own part, which each call reads uncached (issue 31:
# 12k uncached tokens at the bench's 200 turns).
WRITE = "Write your next message."
PARTICIPANT_RULES = PARTICIPANT_PROMPT.split("</conversation>\n\n", 1)[1].removeprefix(WRITE).strip()

SHARED_HEADER = """\
{{brief}}This is a group chat between people and AI participants.

<roles>
{{roles}}
</roles>

When an AI participant writes its next message:
{{rules}}"""

SELECTOR_PART = """\
You are coordinating a group chat. Choose who speaks next.
Read the conversation, then pick the one participant from {{participants}}
whose role best fits what the conversation needs next.
If the latest messages fully answer the task, reply TERMINATE instead.
Reply with only the participant's name, or TERMINATE."""

PARTICIPANT_PART = """\
{{system}}

You are {{name}}, the {{role}} in a group chat working on the task above.
The other participants are: {{others}}.

{{write}}"""

SYSTEM_AUTHOR = "roundtable"


_SLOT = re.compile(r"\{\{(\w+)\}\}")


def fill(template: str, **values: str) -> str:
    """One pass over the template, so text put in a slot is never filled again."""
    return _SLOT.sub(lambda m: values.get(m.group(1), m.group(0)), template)


def thread_line(author_name: str, text: str) -> str:
    """How one message appears in a prompt's thread: tagged with its speaker."""
    return f"[{author_name}] {text}"


def bot_notice(count: Callable[[str], int], text: str) -> NewMessage:
    """A notice from the bot, ready to append (`count`: the token counter's, for its row's tokens)."""
    return NewMessage(author_type="system", author_name=SYSTEM_AUTHOR, text=text,
                      token_count=count(thread_line(SYSTEM_AUTHOR, text)))


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


def shared_header(agents: Sequence[Agent], brief: str) -> str:
    """The shared layout's system message: the group's brief (when set), the roster and the participants' rules."""
    brief = brief.strip()
    return fill(SHARED_HEADER, brief=f"<brief>\n{brief}\n</brief>\n\n" if brief else "", roles=roles_block(agents),
                rules=PARTICIPANT_RULES)


def conversation(task: str, thread: str) -> str:
    """The task (chain) and the thread window as every caller of the shared layout sends them (its own part follows)."""
    return f"<task>{task}</task>\n\n<conversation>\n{thread}\n</conversation>"


def shared_messages(header: str, task: str, thread: str, own: str) -> list[ChatMessage]:
    """The shared layout's messages: what every caller sends alike (the header as the system message;
    the task and the thread window), then `own` (the caller's part) last."""
    return [ChatMessage("system", header), ChatMessage("user", f"{conversation(task, thread)}\n\n{own}")]


def selector_part(eligible: Sequence[str]) -> str:
    return fill(SELECTOR_PART, participants=name_list(eligible))


def participant_part(agent: Agent, others: Sequence[str], memory: str = "") -> str:
    """An agent's own part under the shared layout: its system prompt (and memory), then seed 000's
    Participant instructions that are its own (who it is, its role, the others) and "Write your next
    message." (the rest of them, the same for every agent, are in the header: `PARTICIPANT_RULES`)."""
    system = "\n\n".join(part for part in (agent.system_prompt.strip(), memory.strip()) if part)
    return fill(PARTICIPANT_PART, system=system, name=agent.name, role=agent.role, others=name_list(others),
                write=WRITE).lstrip()
