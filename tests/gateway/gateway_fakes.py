"""A scripted OpenAI / Anthropic / Gemini upstream on 127.0.0.1 for the gateway tests and benchmark.

It behaves like the real APIs where the gateway can get things wrong:

* a context limit (``limit`` tokens, counted as characters / 4 of what the model would read)
  answered with the providers' real overflow errors;
* tool pairing checked as the providers do, with their real 400 messages;
* Anthropic thinking blocks must come back with the signature the fake issued;
* streaming as SSE in the providers' event shapes, non-streaming as JSON.

Replies come from a *script*: ``fake.scripts[name] = fn`` where ``fn(request) -> Reply`` and the
client picks the script with the ``x-fake-script`` header (the gateway forwards client headers).
Every request is recorded in ``fake.received`` (path, headers, body, tokens, accepted or the
error returned).

A model's generation time can be simulated: ``latency`` seconds per answer (or the
``x-fake-latency-ms`` request header). A whole answer comes after that time; a streamed one
sends its headers with its first event after ``FIRST_EVENT_SHARE`` of it (providers answer once
the first token is ready) and the other events evenly over the rest, on a fixed schedule (no
drift from late wake-ups).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.gateway import gateway_fake_gemini as fake_gemini
from tests.gateway import gateway_fake_responses as responses_wire
from tests.gateway.gateway_fake_gemini import gemini_tokens
from tests.gateway.gateway_fake_wire import (
    Call,
    Received,
    Reply,
    Script,
    _anthropic_events,
    _anthropic_message,
    _openai_chunks,
    _openai_completion,
    _path,
    _text,
    anthropic_problem,
    count_tokens,
    openai_problem,
    signature_for,
)
from tests.support.waiting import wait_until

__all__ = [
    "FIRST_EVENT_SHARE",
    "LATENCY_HEADER",
    "Call",
    "FakeUpstream",
    "Received",
    "Reply",
    "signature_for",
    "trace_replies",
]

#: the beta under which the Messages API accepts ``{"role": "system"}`` inside ``messages``
MID_SYSTEM_BETA = "mid-conversation-system-2026-04-07"
#: the betas under which ``{"role": "system"}`` may stand inside ``messages``: Claude Code 2.1.332
#: sends its default model's mid-conversation system messages under ``per-turn-control``
MID_SYSTEM_BETAS = (MID_SYSTEM_BETA, "per-turn-control-2026-07-01")
#: request header: the simulated generation time of this answer, milliseconds
LATENCY_HEADER = "x-fake-latency-ms"
#: the part of the generation time before a streamed answer's first event
FIRST_EVENT_SHARE = 0.4

# ----------------------------------------------------------------------------- the server


class FakeUpstream:
    def __init__(
        self, *, limit: int = 1_000_000, port: int = 0, keep: bool = True, latency: float = 0.0
    ) -> None:
        self.limit = limit
        self.keep = keep
        #: seconds of simulated generation per answer (the LATENCY_HEADER overrides it)
        self.latency = latency
        self.scripts: dict[str, Script] = {}
        self.default: Script = lambda call: Reply(text="ok")
        self.received: list[Received] = []
        #: forced answers, used before any script: (status, body, delay seconds)
        self.failures: deque[tuple[int, Any, float]] = deque()
        self._lock = threading.Lock()
        #: whether ``{"role": "system"}`` inside Anthropic ``messages`` needs the
        #: mid-conversation-system beta header. Claude Code 2.1.3xx treats that beta as
        #: generally available and no longer sends the header, so it is not needed by default;
        #: True is the API as earlier Claude Code 2.1 releases met it (beta header required)
        self.mid_system_needs_beta = False
        #: stored responses (``store`` not false): id -> the input items and the output
        self.stored: dict[str, list[Any]] = {}
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._openai, methods=["POST"]),
                Route("/v1/messages", self._anthropic, methods=["POST"]),
                Route("/v1/messages/count_tokens", self._count, methods=["POST"]),
                Route("/v1/responses", self._responses, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/v1beta/models/{target:path}", self._gemini, methods=["POST"]),
                Route("/v1/models/{target:path}", self._gemini, methods=["POST"]),
            ]
        )
        self._server = uvicorn.Server(
            uvicorn.Config(
                self.app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"
            )
        )
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._server.serve()), daemon=True
        )

    def start(self) -> FakeUpstream:
        self._thread.start()
        wait_until(lambda: bool(self._server.started), 20, "the fake upstream started")
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    @property
    def url(self) -> str:
        host, port = self._server.servers[0].sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    def accepted(self, path: str | None = None) -> list[Received]:
        with self._lock:
            return [
                r for r in self.received if r.error is None and (path is None or r.path == path)
            ]

    def _record(self, rec: Received) -> None:
        if not self.keep:
            rec.body = None
        with self._lock:
            self.received.append(rec)

    def _latency(self, request: Request) -> float:
        raw = request.headers.get(LATENCY_HEADER)
        try:
            return max(0.0, float(raw) / 1000) if raw else self.latency
        except ValueError:
            return self.latency

    async def _stream(
        self, request: Request, frames: list[bytes], event_delay: float
    ) -> StreamingResponse:
        """``frames`` as SSE, paced as the model would generate them (see the module doc)."""
        latency = self._latency(request)
        first = latency * FIRST_EVENT_SHARE
        if first and not event_delay:
            await asyncio.sleep(first)  # the headers go out with the first event
        step = (latency - first) / max(1, len(frames) - 1)

        async def gen() -> AsyncIterator[bytes]:
            loop = asyncio.get_running_loop()
            start = loop.time()
            for k, frame in enumerate(frames):
                if event_delay:
                    await asyncio.sleep(event_delay)
                elif step and k:
                    until_due = max(0.0, start + k * step - loop.time())
                    await asyncio.sleep(until_due)
                yield frame

        return StreamingResponse(gen(), media_type="text/event-stream")

    async def _whole(self, request: Request, body: Any) -> Response:
        latency = self._latency(request)
        if latency:
            await asyncio.sleep(latency)
        return JSONResponse(body)

    def _script(self, request: Request) -> Script:
        return self.scripts.get(request.headers.get("x-fake-script", ""), self.default)

    async def _failure(self) -> Response | None:
        with self._lock:
            step = self.failures.popleft() if self.failures else None
        if step is None:
            return None
        status, body, delay = step
        if delay:
            await asyncio.sleep(delay)
        return JSONResponse(body, status_code=status)

    async def _models(self, request: Request) -> Response:
        return JSONResponse(
            {
                "object": "list",
                "data": [{"id": "fake-model", "object": "model", "created": 0, "owned_by": "fake"}],
            }
        )

    async def _count(self, request: Request) -> Response:
        body = await request.json()
        return JSONResponse({"input_tokens": count_tokens(body)})

    async def _openai(self, request: Request) -> Response:
        body = await request.json()
        headers = {k.lower(): v for k, v in request.headers.items()}
        tokens = count_tokens(body)
        forced = await self._failure()
        if forced is not None:
            self._record(
                Received(_path(request), headers, body, tokens, f"forced {forced.status_code}")
            )
            return forced
        problem = openai_problem(body.get("messages") or [])
        if problem is None and tokens > self.limit:
            err = {
                "message": f"This model's maximum context length is {self.limit} tokens. However, "
                f"your messages resulted in {tokens} tokens. Please reduce the length of the messages.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
            self._record(Received(_path(request), headers, body, tokens, "overflow"))
            return JSONResponse({"error": err}, status_code=400)
        if problem is not None:
            self._record(Received(_path(request), headers, body, tokens, problem))
            return JSONResponse(
                {
                    "error": {
                        "message": problem,
                        "type": "invalid_request_error",
                        "param": "messages",
                        "code": None,
                    }
                },
                status_code=400,
            )
        self._record(Received(_path(request), headers, body, tokens, None))
        reply = self._script(request)(Call("openai", body, headers))
        model = str(body.get("model"))
        if body.get("stream"):
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            chunks = _openai_chunks(reply, model, tokens, usage)
            frames = [f"data: {json.dumps(c)}\n\n".encode() for c in chunks]
            frames[-1] += b"data: [DONE]\n\n"
            return await self._stream(request, frames, reply.event_delay)
        return await self._whole(request, _openai_completion(reply, model, tokens))

    async def _anthropic(self, request: Request) -> Response:
        body = await request.json()
        headers = {k.lower(): v for k, v in request.headers.items()}
        tokens = count_tokens(body)
        forced = await self._failure()
        if forced is not None:
            self._record(
                Received(_path(request), headers, body, tokens, f"forced {forced.status_code}")
            )
            return forced
        beta = headers.get("anthropic-beta", "")
        mid_system = not self.mid_system_needs_beta or any(b in beta for b in MID_SYSTEM_BETAS)
        problem = anthropic_problem(body.get("messages") or [], mid_system)
        if problem is None and tokens > self.limit:
            problem = f"prompt is too long: {tokens} tokens > {self.limit} maximum"
            self._record(Received(_path(request), headers, body, tokens, "overflow"))
        else:
            self._record(Received(_path(request), headers, body, tokens, problem))
        if problem is not None:
            return JSONResponse(
                {"type": "error", "error": {"type": "invalid_request_error", "message": problem}},
                status_code=400,
            )
        reply = self._script(request)(Call("anthropic", body, headers))
        model = str(body.get("model"))
        if body.get("stream"):
            events = _anthropic_events(reply, model, tokens)
            frames = [f"event: {n}\ndata: {json.dumps(d)}\n\n".encode() for n, d in events]
            return await self._stream(request, frames, reply.event_delay)
        return await self._whole(request, _anthropic_message(reply, model, tokens))

    async def _gemini(self, request: Request) -> Response:
        """``/v1beta/models/{model}:generateContent | :streamGenerateContent | :countTokens``
        (``/v1/...`` the same)."""
        model, _, method = request.path_params["target"].rpartition(":")
        body = await request.json()
        headers = {k.lower(): v for k, v in request.headers.items()}
        tokens = gemini_tokens(body)
        path = _path(request)
        if not headers.get("x-goog-api-key") and "key" not in request.query_params:
            self._record(Received(path, headers, body, tokens, "no api key"))
            return JSONResponse(
                fake_gemini.error(403, fake_gemini.NO_KEY, "PERMISSION_DENIED"), status_code=403
            )
        if method == "countTokens":
            return JSONResponse({"totalTokens": tokens})
        if method not in ("generateContent", "streamGenerateContent"):
            return JSONResponse(
                fake_gemini.error(404, f"Method {method} not found", "NOT_FOUND"), status_code=404
            )
        forced = await self._failure()
        if forced is not None:
            self._record(Received(path, headers, body, tokens, f"forced {forced.status_code}"))
            return forced
        problem = fake_gemini.gemini_problem(body, model)
        if problem is None and tokens > self.limit:
            self._record(Received(path, headers, body, tokens, "overflow"))
            return JSONResponse(fake_gemini.overflow(tokens, self.limit), status_code=400)
        self._record(Received(path, headers, body, tokens, problem))
        if problem is not None:
            return JSONResponse(
                fake_gemini.error(400, problem, "INVALID_ARGUMENT"), status_code=400
            )
        reply = self._script(request)(Call("gemini", body, headers))
        if method == "streamGenerateContent":
            frames = fake_gemini.sse(fake_gemini.gemini_chunks(reply, model, tokens))
            return await self._stream(request, frames, reply.event_delay)
        return await self._whole(request, fake_gemini.gemini_response(reply, model, tokens))

    async def _responses(self, request: Request) -> Response:
        body = await request.json()
        headers = {k.lower(): v for k, v in request.headers.items()}
        items = responses_wire.items_of(body)
        previous = body.get("previous_response_id")
        if isinstance(previous, str):
            with self._lock:
                earlier = self.stored.get(previous)
            if earlier is None:
                self._record(Received(_path(request), headers, body, 0, "unknown previous"))
                err = responses_wire.error(
                    f"Previous response with id '{previous}' not found.",
                    "previous_response_id",
                    "previous_response_not_found",
                )
                return JSONResponse(err, status_code=400)
            items = [*earlier, *items]
        tokens = responses_wire.count_tokens(body, items)
        forced = await self._failure()
        if forced is not None:
            self._record(
                Received(_path(request), headers, body, tokens, f"forced {forced.status_code}")
            )
            return forced
        err = responses_wire.problem(items)
        if err is None and tokens > self.limit:
            self._record(Received(_path(request), headers, body, tokens, "overflow"))
            overflow = responses_wire.error(
                responses_wire.OVERFLOW_MESSAGE, "input", "context_length_exceeded"
            )
            return JSONResponse(overflow, status_code=400)
        if err is not None:
            self._record(Received(_path(request), headers, body, tokens, err["error"]["message"]))
            return JSONResponse(err, status_code=400)
        self._record(Received(_path(request), headers, body, tokens, None))
        reply = self._script(request)(Call("responses", body, headers))
        include = body.get("include") or []
        output = responses_wire.output_items(reply, include if isinstance(include, list) else [])
        response = responses_wire.response_object(body, output, tokens)
        if body.get("store", True) is not False:
            with self._lock:
                self.stored[response["id"]] = [*items, *output]
        if body.get("stream"):
            frames = responses_wire.frames(responses_wire.stream_events(response))
            return await self._stream(request, frames, reply.event_delay)
        return await self._whole(request, response)


# ----------------------------------------------------------------------------- trace replay


def trace_replies(trace: list[dict[str, Any]], *, thinking: bool = False) -> deque[Reply]:
    """The trace's assistant turns as scripted replies, in order."""
    out: deque[Reply] = deque()
    for n, m in enumerate(trace):
        if m.get("role") != "assistant":
            continue
        calls = []
        for c in m.get("tool_calls") or []:
            try:
                args = json.loads(c["function"].get("arguments") or "{}")
            except ValueError:
                args = {"raw": c["function"].get("arguments")}
            calls.append(
                (
                    c["id"],
                    c["function"]["name"],
                    args if isinstance(args, dict) else {"value": args},
                )
            )
        text = m.get("content") if isinstance(m.get("content"), str) else _text(m.get("content"))
        out.append(
            Reply(
                text=text or "",
                tool_calls=calls,
                thinking=f"step {n}: deciding what to run next" if thinking else None,
            )
        )
    return out


def openai_tool_results(
    trace: list[dict[str, Any]], start: int
) -> tuple[list[dict[str, Any]], int]:
    """The tool messages following the assistant at ``start - 1``; returns them and the next index."""
    out = []
    i = start
    while i < len(trace) and trace[i].get("role") == "tool":
        out.append(
            {
                "role": "tool",
                "tool_call_id": trace[i]["tool_call_id"],
                "content": _text(trace[i].get("content")) or str(trace[i].get("content")),
            }
        )
        i += 1
    return out, i
