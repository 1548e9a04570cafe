"""FakeOpenAI whose GET /v1/models behaves like a real provider's: for start-up check tests.

    async with StrictOpenAI(key="sk-right") as srv:        # 401 for any other bearer key
    async with StrictOpenAI(models_status=404) as srv:     # a server without /models
    async with StrictOpenAI(models_delay=30) as srv:       # a server that never answers

A refused key gets OpenAI's 401 body, which quotes the key it was given (the
client must redact it). `model_list_calls` counts the GET /v1/models requests.
"""
from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from aiohttp import web

from tests.fakes.openai_server import FakeOpenAI, ReplyLike, Responder


class StrictOpenAI(FakeOpenAI):
    def __init__(
        self,
        responder: Responder | list[ReplyLike] | None = None,
        *,
        key: str | None = None,
        models_status: int = 200,
        models_delay: float = 0.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(responder, **kwargs)
        self.key = key
        self.models_status = models_status
        self.models_delay = models_delay
        self.model_list_calls = 0

    async def _models(self, request: web.Request) -> web.Response:
        self.model_list_calls += 1
        if self.models_delay:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), self.models_delay)
        given = request.headers.get("Authorization", "").removeprefix("Bearer ")
        if self.key is not None and given != self.key:
            return self._error(401, f"Incorrect API key provided: {given}. You can find your API key at "
                                    "https://platform.openai.com/account/api-keys.")
        if self.models_status != 200:
            return self._error(self.models_status, f"GET /v1/models answers {self.models_status} here")
        return await super()._models(request)
