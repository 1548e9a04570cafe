"""The Tokyo task: its agents, their replies, the selector's rotation and how calls are told apart.

Shared by the token runs (`bench.tokyo`, over HTTP) and the engine figures
(`bench.engine_figures`, in-process). Deterministic: replies depend only on
(agent, k), the agent's k-th reply.
"""
from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

TASK = "Plan a 3-day trip to Tokyo for two people under $1,500, flights excluded."
FOLLOW_UP = "keep going: refine the plan"  # the person's message between two episodes of a long run
PERSON = "alice"
EPISODE_TURNS = 100  # the most agent turns one episode may have (max_turns is 1..100)


def episodes(turns: int) -> list[int]:
    """A run of `turns` agent turns as the product allows it: episodes of at most EPISODE_TURNS,
    the first opened by TASK, each later one by a person's FOLLOW_UP (200 -> [100, 100])."""
    return [min(EPISODE_TURNS, turns - start) for start in range(0, turns, EPISODE_TURNS)]


@dataclass(frozen=True)
class AgentSpec:
    name: str
    role: str
    system_prompt: str


AGENTS: tuple[AgentSpec, ...] = (
    AgentSpec("planner", "drafts the day-by-day itinerary",
              "You are the trip planner: you draft the day-by-day itinerary, one day at a time."),
    AgentSpec("budget", "keeps the total under the limit",
              "You are the budget keeper: you price every item and keep the total under the limit."),
    AgentSpec("local", "knows neighbourhoods, food and transit",
              "You are the local guide: you know Tokyo's neighbourhoods, food and transit."),
)
ROTATION: tuple[str, ...] = tuple(a.name for a in AGENTS)
REPLY_TOKENS = 150

# Roundtable's selector prompt opens with this line (bot.core.rules.prompts.SPEAKER_SELECTOR_PROMPT); AutoGen's
# default SelectorGroupChat prompt with the second.
try:
    from bot.core.rules.prompts import SPEAKER_SELECTOR_PROMPT as _ROUNDTABLE_SELECTOR
except ImportError:  # the engine renamed it: the seed's wording
    _ROUNDTABLE_SELECTOR = "You are coordinating a group chat. Choose who speaks next."
SELECTOR_OPENINGS: tuple[str, ...] = (
    _ROUNDTABLE_SELECTOR.strip().splitlines()[0],
    "You are in a role play game. The following roles are available:",
)
# Roundtable's rolling summary of the rows a window cut (bot.core.features.summary.SUMMARY_PROMPT) opens with this.
try:
    from bot.core.features.summary import SUMMARY_PROMPT as _ROUNDTABLE_SUMMARY
except ImportError:  # an engine without rolling summaries: no call is one
    _ROUNDTABLE_SUMMARY = "\0no summary prompt"
SUMMARY_OPENING = _ROUNDTABLE_SUMMARY.strip().splitlines()[0]
_SUMMARY_WORDS = re.compile(r"at most (\d+) words")
SUMMARY_WORDS = 120  # when the prompt does not say
_OFFERED = (
    re.compile(r"select the next role from \[([^\]]*)\]"),  # AutoGen: ['budget', 'local']
    re.compile(r"participant from ([^\n]*)"),  # Roundtable: budget, local
)

_WORDS = """
shrine temple garden market alley station ramen sushi tempura izakaya bento noodles tea matcha
sake museum gallery tower skyline river ferry cruise park lantern festival bridge crossing street
district hostel ryokan hotel capsule room night morning afternoon evening breakfast lunch dinner
snack dessert ticket pass metro subway train line transfer walk bicycle taxi bus airport budget
yen dollars total estimate price cost saving discount coupon reservation booking queue crowd
weekday weekend sunrise sunset view photo souvenir shopping arcade bookstore vintage fashion
electronics anime manga karaoke jazz bar cafe bakery vendor stall skewer dumpling curry rice
udon soba miso tofu seafood grill barbecue tasting course counter chef neighbourhood quiet busy
historic modern canal harbor island hill forest bamboo path stairs gate pagoda palace moat
plaza fountain library theatre stadium aquarium zoo observatory deck rooftop lounge terrace
locker luggage map guide app signal wifi umbrella rain sun breeze spring autumn maple blossom
schedule slot plan option alternative backup detour shortcut route timing distance minutes hours
comfortable compact central cheap fair reasonable premium value splurge modest careful flexible
""".split()


def reply_text(agent: str, k: int, count: Callable[[str], int], tokens: int = REPLY_TOKENS) -> str:
    """The agent's k-th reply: seeded sentences until about `tokens` tokens; no TERMINATE, no @tags."""
    rng = random.Random(f"{agent}/{k}")
    sentences: list[str] = []
    while count(" ".join(sentences)) < tokens - 10:
        words = rng.sample(_WORDS, rng.randint(7, 13))
        number = f"{rng.randint(2, 480) * 5:,}"
        words.insert(rng.randrange(1, len(words)), number)
        sentences.append(" ".join(words).capitalize() + ".")
    return " ".join(sentences)


def _system_prompts() -> dict[str, str]:
    return {a.system_prompt: a.name for a in AGENTS}


def summary_text(words: int, k: int, count: Callable[[str], int]) -> str:
    """The k-th scripted rolling summary: about as long as a model asked for `words` words writes
    (~1.3 tokens a word), seeded sentences like the replies'."""
    return reply_text("summary", k, count, tokens=max(20, words * 13 // 10))


def classify(texts: Sequence[str]) -> tuple[str, str | None]:
    """A call's kind from its messages' contents: a selector call holds a selector prompt's
    opening; a summary call the rolling summary prompt's; a participant call holds one agent's
    system prompt; anything else is 'other'."""
    for text in texts:
        if any(opening in text for opening in SELECTOR_OPENINGS):
            return "selector", None
        if SUMMARY_OPENING in text:
            return "summary", None
    prompts = _system_prompts()
    for text in texts:
        for prompt, name in prompts.items():
            if prompt in text:
                return "participant", name
    return "other", None


def offered(texts: Sequence[str]) -> list[str]:
    """The participants a selector prompt offers (all agents when it names none we can read)."""
    joined = "\n".join(texts)
    for pattern in _OFFERED:
        match = pattern.search(joined)
        if match:
            names = [n for n in ROTATION if re.search(rf"\b{re.escape(n)}\b", match.group(1))]
            if names:
                return names
    return list(ROTATION)


class Script:
    """Both sides of the model: the selector answers the next agent of the rotation among those
    offered; participants answer `reply_text(agent, k)`. Remembers who spoke last."""

    def __init__(self, count: Callable[[str], int]) -> None:
        self.count = count
        self.last: str | None = None
        self.replies: dict[str, int] = {}
        self.spoken: list[tuple[str, str]] = []  # (agent, reply) in order
        self.summaries = 0

    def select(self, texts: Sequence[str]) -> str:
        offer = offered(texts)
        start = ROTATION.index(self.last) + 1 if self.last in ROTATION else 0
        for i in range(len(ROTATION)):
            name = ROTATION[(start + i) % len(ROTATION)]
            if name in offer:
                return name
        return offer[0]

    def reply(self, agent: str) -> str:
        k = self.replies[agent] = self.replies.get(agent, 0) + 1
        text = reply_text(agent, k, self.count)
        self.last = agent
        self.spoken.append((agent, text))
        return text

    def answer(self, kind: str, agent: str | None, texts: Sequence[str]) -> str:
        if kind == "selector":
            return self.select(texts)
        if kind == "participant" and agent is not None:
            return self.reply(agent)
        if kind == "summary":
            self.summaries += 1
            asked = _SUMMARY_WORDS.search("\n".join(texts))
            return summary_text(int(asked.group(1)) if asked else SUMMARY_WORDS, self.summaries, self.count)
        return "Summary: the group is planning the Tokyo trip."
