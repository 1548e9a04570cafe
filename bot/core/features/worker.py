"""Worker mode (SPEC §8, seed 002): an agent with `mode:worker` runs privately and speaks only through
the built-in tool `group_post(content)`.

A worker's run is offered `group_post` without a grant (it could never speak otherwise), besides
what it was granted. Each call posts one normal agent message under the agent's name at once
(`bot.core.ports.RunStore.post_from_run`): cleaned as a reply is (`guard_impersonation`), its tags
parsed, in the run's episode and counted toward the consecutive-agent cap. A post the cap refuses
is a tool error the model reads (`waiting_for_a_person`). A post that says TERMINATE ends the
episode when the run ends, as a reply's would. The call is journaled like every tool call and
`group_post` is neither read-only nor idempotent, so a post whose result was recorded is never
posted again after a crash, and one cut mid-call is told "outcome unknown", not repeated. The
run's final text is not posted: it is kept in the run (`Run.private_text`).
"""
from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from bot.core.errors import CapReached, InvalidInput
from bot.core.models import Agent, Message, NewMessage, ToolOutput, ToolSpec
from bot.core.ports import ToolContext
from bot.core.rules.prompts import thread_line
from bot.core.rules.stop import guard_impersonation, strip_terminate, terminates
from bot.core.rules.tags import parse_tags

log = logging.getLogger(__name__)

TOOL_NAME = "group_post"
POST_MAX = 4000  # characters of one post
GROUP_POST_SPEC = ToolSpec(
    TOOL_NAME,
    "Post a message to the group chat under your name. This is the only way your words reach the group: "
    "your final answer is private.",
    {"type": "object",
     "properties": {"content": {"type": "string", "description": "the message to post"}},
     "required": ["content"]},
    builtin=True,
)
POSTED = "Posted."


def waiting_for_a_person(cap: int) -> str:
    """The tool error of a post the consecutive-agent cap refused."""
    return (f"error: waiting for a person: the group has reached its cap of {cap} agent message"
            f"{'' if cap == 1 else 's'}; nothing was posted.")


@dataclass
class Posts:
    """What a worker's run posted: its messages, in order, and whether one said TERMINATE."""

    messages: list[Message] = field(default_factory=list)
    terminated: bool = False

    @property
    def last(self) -> Message | None:
        return self.messages[-1] if self.messages else None


class GroupPost:
    """The per-run source of `group_post` (`bot.core.ports.ToolSource`)."""

    name = ""

    def __init__(self, agent: Agent, others: Sequence[str], posts: Posts, *,
                 post: Callable[[int, NewMessage], Awaitable[Message]],
                 roster: Sequence[Agent], people: Callable[[], Awaitable[Mapping[str, str]]],
                 count: Callable[[str], int], cap: Callable[[], Awaitable[int]]) -> None:
        self.agent, self.others, self.posts = agent, others, posts
        self._post, self._roster, self._people, self._count, self._cap = post, roster, people, count, cap

    def tools(self) -> tuple[ToolSpec, ...]:
        return (GROUP_POST_SPEC,)

    async def call(self, tool: str, arguments: dict[str, object], context: ToolContext) -> ToolOutput:
        content = arguments.get("content")
        if not isinstance(content, str) or not content.strip():
            return ToolOutput('error: the post is empty; call group_post with the message in "content".', error=True)
        if len(content) > POST_MAX:
            return ToolOutput(f"error: the post is {len(content):,} characters long; the limit is {POST_MAX:,}. "
                              "Post it in shorter parts.", error=True)
        cleaned = guard_impersonation(content, self.agent.name, self.others)
        said_terminate = terminates(content, cleaned)
        if not strip_terminate(cleaned):
            if said_terminate:
                self.posts.terminated = True
                return ToolOutput("Nothing posted; TERMINATE: the episode ends when your run does.")
            return ToolOutput("error: nothing is left of the post after cleaning it; nothing was posted.", error=True)
        message = NewMessage(
            author_type="agent", author_name=self.agent.name, text=cleaned,
            tags=parse_tags(cleaned, self._roster, people=await self._people(), author_agent_id=self.agent.id),
            author_agent_id=self.agent.id, source_run_id=context.run_id,
            token_count=self._count(thread_line(self.agent.name, cleaned)),
        )
        cap = await self._cap()
        try:
            posted = await self._post(cap, message)
        except CapReached:
            log.info("agent=%s run=%s: group_post refused by the cap of %d", self.agent.name, context.run_id, cap)
            return ToolOutput(waiting_for_a_person(cap), error=True)
        except InvalidInput as exc:
            return ToolOutput(f"error: not posted: {exc}.", error=True)
        self.posts.messages.append(posted)
        log.info("agent=%s run=%s posted seq=%d through group_post", self.agent.name, context.run_id, posted.seq)
        if said_terminate:
            self.posts.terminated = True
            return ToolOutput(f"{POSTED} TERMINATE: the episode ends when your run does.")
        return ToolOutput(POSTED)
