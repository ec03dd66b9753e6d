"""Fake OpenAI and Anthropic HTTP servers for your own tests (see :mod:`contextfold.testing`).

A real HTTP server on 127.0.0.1 (a free port) that speaks OpenAI Chat Completions
(``/v1/chat/completions``), OpenAI Responses (``/v1/responses``) and Anthropic Messages
(``/v1/messages``), whole or streamed, and refuses what the providers refuse, with their own
400 errors: a request over ``context_window`` tokens (counted as characters / 4), a tool result
without its call or a call without its result, a changed Anthropic thinking block. Point the
official SDKs (or contextfold's gateway) at ``base_url``::

    from contextfold.testing import FakeReply, fake_openai_server

    with fake_openai_server(context_window=8_000, replies=["hello"]) as fake:
        client = OpenAI(base_url=fake.base_url, api_key="test")
        ...
        assert fake.requests[-1].body["model"] == "gpt-4.1"

Needs Starlette and uvicorn, which the ``gateway`` extra installs (``pip install '.[gateway]'``
from the contextfold checkout); without them it raises :class:`~contextfold.errors.ConfigError`.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError
from .extras import needs_extra
from .jsontypes import JSONObject
from .testing_wire import (
    FakeReply,
    anthropic_error,
    anthropic_events,
    anthropic_message,
    anthropic_overflow,
    anthropic_problem,
    chat_chunks,
    chat_completion,
    chat_overflow,
    chat_problem,
    count_tokens,
    openai_error,
    response_events,
    response_object,
    responses_overflow,
    responses_problem,
)


@dataclass
class FakeRequest:
    """One request the fake received: its path, headers (lower-case), JSON body, the tokens
    it counted, and the error it answered with (None when it answered)."""

    path: str
    headers: dict[str, str]
    body: JSONObject
    tokens: int
    error: str | None


#: a script: the request in, the model's answer out (a FakeReply, or its text)
Script = Callable[[FakeRequest], "FakeReply | str"]


def _require_web() -> tuple[Any, Any]:
    try:
        import uvicorn
        from starlette.applications import Starlette
    except ImportError as exc:
        raise ConfigError(
            needs_extra("a fake provider server (Starlette and uvicorn)", "gateway", exc)
        ) from None
    return uvicorn, Starlette


class FakeProviderServer:
    """A running fake provider. Answers come from ``replies`` (queued, first), then
    ``script``, then ``default``; ``fail(status, body)`` queues an error answer instead."""

    def __init__(
        self,
        provider: str,
        *,
        context_window: int = 128_000,
        replies: Iterable[FakeReply | str] = (),
        script: Script | None = None,
        default: FakeReply | str = "ok",
    ) -> None:
        if provider not in ("openai", "anthropic"):
            raise ConfigError(f"provider must be 'openai' or 'anthropic', got {provider!r}")
        self.provider = provider
        self.context_window = context_window
        self.script = script
        self.default = default
        self.requests: list[FakeRequest] = []
        self._replies: deque[FakeReply | str] = deque(replies)
        self._failures: deque[tuple[int, JSONObject]] = deque()
        self._lock = threading.Lock()
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._port = 0

    # ------------------------------------------------------------------ for the test
    @property
    def base_url(self) -> str:
        """What to give the SDK: ``http://127.0.0.1:PORT/v1`` (OpenAI) or
        ``http://127.0.0.1:PORT`` (Anthropic)."""
        root = f"http://127.0.0.1:{self._port}"
        return root + "/v1" if self.provider == "openai" else root

    def reply(self, *replies: FakeReply | str) -> None:
        """Queue answers (used before the script)."""
        with self._lock:
            self._replies.extend(replies)

    def fail(self, status: int, body: JSONObject) -> None:
        """Answer the next request with ``status`` and ``body`` (a 429, a 500 ...)."""
        with self._lock:
            self._failures.append((status, body))

    def start(self) -> FakeProviderServer:
        uvicorn, starlette_app = _require_web()
        from starlette.routing import Route

        app = starlette_app(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/responses", self._responses, methods=["POST"]),
                Route("/v1/messages", self._messages, methods=["POST"]),
                Route("/v1/messages/count_tokens", self._count, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
            ]
        )
        # bound and listening before the thread runs: a request made at once waits in the
        # backlog instead of being refused
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        self._port = sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._server.serve(sockets=[sock])),
            name="contextfold-fake-provider",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)

    # ------------------------------------------------------------------ serving
    def _next_reply(self, request: FakeRequest) -> FakeReply:
        with self._lock:
            queued = self._replies.popleft() if self._replies else None
        answer = (
            queued if queued is not None else (self.script or (lambda _: self.default))(request)
        )
        return FakeReply(text=answer) if isinstance(answer, str) else answer

    async def _read(self, request: Any, error: Callable[[str], dict[str, Any]]) -> Any:
        """(FakeRequest, None), or (None, the provider's 400 answer) for a body that is not a
        JSON object; a queued failure is answered first."""
        from starlette.responses import JSONResponse

        headers = {k.lower(): v for k, v in request.headers.items()}
        with self._lock:
            failure = self._failures.popleft() if self._failures else None
        try:
            body = json.loads(await request.body())
        except ValueError:
            body = None
        path = request.url.path
        if failure is not None:
            self._record(FakeRequest(path, headers, body or {}, 0, f"forced {failure[0]}"))
            return None, JSONResponse(failure[1], status_code=failure[0])
        if not isinstance(body, dict):
            problem = "We could not parse the JSON body of your request."
            self._record(FakeRequest(path, headers, {}, 0, problem))
            return None, JSONResponse(error(problem), status_code=400)
        return FakeRequest(path, headers, body, count_tokens(body), None), None

    def _record(self, rec: FakeRequest) -> None:
        with self._lock:
            self.requests.append(rec)

    def _refuse(self, rec: FakeRequest, problem: str, body: dict[str, Any]) -> Any:
        from starlette.responses import JSONResponse

        rec.error = problem
        self._record(rec)
        return JSONResponse(body, status_code=400)

    @staticmethod
    def _sse(frames: list[bytes]) -> Any:
        from starlette.responses import StreamingResponse

        async def gen() -> Any:
            for frame in frames:
                yield frame

        return StreamingResponse(gen(), media_type="text/event-stream")

    async def _chat(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        def err(m: str) -> dict[str, Any]:
            return openai_error(m, param=None, code=None)

        rec, answer = await self._read(request, err)
        if rec is None:
            return answer
        problem = chat_problem(rec.body.get("messages") or [])
        if problem is not None:
            return self._refuse(rec, problem, openai_error(problem, param="messages", code=None))
        if rec.tokens > self.context_window:
            return self._refuse(rec, "overflow", chat_overflow(self.context_window, rec.tokens))
        self._record(rec)
        reply, model = self._next_reply(rec), str(rec.body.get("model"))
        if rec.body.get("stream"):
            usage = bool((rec.body.get("stream_options") or {}).get("include_usage"))
            chunks = chat_chunks(reply, model, rec.tokens, usage)
            frames = [f"data: {json.dumps(c)}\n\n".encode() for c in chunks]
            return self._sse([*frames, b"data: [DONE]\n\n"])
        return JSONResponse(chat_completion(reply, model, rec.tokens))

    async def _responses(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        def err(m: str) -> dict[str, Any]:
            return openai_error(m, param=None, code=None)

        rec, answer = await self._read(request, err)
        if rec is None:
            return answer
        previous = rec.body.get("previous_response_id")
        if previous:  # nothing is stored here (as with store=false)
            problem = f"Previous response with id '{previous}' not found."
            body = openai_error(
                problem, param="previous_response_id", code="previous_response_not_found"
            )
            return self._refuse(rec, problem, body)
        unpaired = responses_problem(rec.body.get("input"))
        if unpaired is not None:
            return self._refuse(rec, unpaired, openai_error(unpaired, param="input", code=None))
        if rec.tokens > self.context_window:
            return self._refuse(rec, "overflow", responses_overflow())
        self._record(rec)
        reply, model = self._next_reply(rec), str(rec.body.get("model"))
        if rec.body.get("stream"):
            events = response_events(reply, model, rec.tokens)
            return self._sse(
                [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events]
            )
        return JSONResponse(response_object(reply, model, rec.tokens))

    async def _messages(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        rec, answer = await self._read(request, anthropic_error)
        if rec is None:
            return answer
        problem = anthropic_problem(rec.body.get("messages") or [])
        if problem is not None:
            return self._refuse(rec, problem, anthropic_error(problem))
        if rec.tokens > self.context_window:
            return self._refuse(
                rec, "overflow", anthropic_overflow(self.context_window, rec.tokens)
            )
        self._record(rec)
        reply, model = self._next_reply(rec), str(rec.body.get("model"))
        if rec.body.get("stream"):
            events = anthropic_events(reply, model, rec.tokens)
            return self._sse(
                [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events]
            )
        return JSONResponse(anthropic_message(reply, model, rec.tokens))

    async def _count(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        rec, answer = await self._read(request, anthropic_error)
        if rec is None:
            return answer
        return JSONResponse({"input_tokens": rec.tokens})

    async def _models(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        model = {"id": "fake-model", "object": "model", "created": 0, "owned_by": "contextfold"}
        return JSONResponse({"object": "list", "data": [model]})


@contextmanager
def _serving(server: FakeProviderServer) -> Iterator[FakeProviderServer]:
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def fake_openai_server(
    *,
    context_window: int = 128_000,
    replies: Iterable[FakeReply | str] = (),
    script: Script | None = None,
    default: FakeReply | str = "ok",
) -> Iterator[FakeProviderServer]:
    """A fake OpenAI (Chat Completions and Responses) on 127.0.0.1 for the ``with`` block;
    ``base_url`` ends in ``/v1``. Needs the gateway extra (Starlette, uvicorn)."""
    with _serving(
        FakeProviderServer(
            "openai", context_window=context_window, replies=replies, script=script, default=default
        )
    ) as server:
        yield server


@contextmanager
def fake_anthropic_server(
    *,
    context_window: int = 200_000,
    replies: Iterable[FakeReply | str] = (),
    script: Script | None = None,
    default: FakeReply | str = "ok",
) -> Iterator[FakeProviderServer]:
    """A fake Anthropic Messages API on 127.0.0.1 for the ``with`` block. Needs the gateway
    extra (Starlette, uvicorn)."""
    with _serving(
        FakeProviderServer(
            "anthropic",
            context_window=context_window,
            replies=replies,
            script=script,
            default=default,
        )
    ) as server:
        yield server


__all__ = [
    "FakeProviderServer",
    "FakeReply",
    "FakeRequest",
    "Script",
    "fake_anthropic_server",
    "fake_openai_server",
]
