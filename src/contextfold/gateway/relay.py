"""Upstream calls every wire format shares: one retry after a context overflow, upstream
errors passed back, reading an upstream SSE stream a chunk at a time, the client's streamed or
whole response (which releases the session lock once the client has it), and the continuation
stream after the gateway answered its own tools (see :mod:`.providers.rounds`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

import httpx
from starlette.responses import Response

from ..core.messages import Message
from ..jsontypes import JSON, JSONObject  # noqa: F401 (JSON: for the annotations' JSONObject)
from .pipeline import Pipeline, RequestError, Turn
from .pipeline_record import StreamState
from .sse import SSEEvent, SSEParser
from .streaming import GatewayResponse, GatewayStream
from .upstream import UpstreamError, response_headers

if TYPE_CHECKING:
    from .providers.base import ProviderAdapter

#: ``payload(turn)``: the provider's request body for the turn's view
Payload = Callable[[Turn], JSONObject]
#: ``events(pipe, turn, payload, state)``: the client's stream of a streamed turn
Events = Callable[[Pipeline, Turn, JSONObject, StreamState], AsyncIterator[bytes]]


def upstream_failure(exc: httpx.HTTPError) -> RequestError:
    if isinstance(exc, httpx.TimeoutException):
        return RequestError(504, "the upstream did not answer in time", "timeout")
    return RequestError(502, f"the upstream could not be reached ({type(exc).__name__})")


#: responses that release the session lock themselves once the client has them
HANDED_OVER = (GatewayStream, GatewayResponse)


def broken_off(pipe: Pipeline, adapter: ProviderAdapter, turn: Turn, exc: httpx.HTTPError) -> bytes:
    """The error event for an upstream that died or went silent mid-stream."""
    failure = upstream_failure(exc)
    pipe.upstream_error(turn, failure.status)
    return adapter.error_event(failure.status, failure.message, failure.kind)


def passed_back(
    pipe: Pipeline, turn: Turn, status: int, raw: bytes, headers: httpx.Headers
) -> Response:
    """An upstream error answer, given to the client as it came."""
    pipe.upstream_error(turn, status)
    return Response(raw, status, headers=response_headers(headers))


async def post(
    pipe: Pipeline, turn: Turn, path: str, payload: JSONObject, rebuild: Payload
) -> httpx.Response:
    """POST the turn; after a context overflow compact hard, rebuild the payload, retry once."""
    try:
        resp = await pipe.post(turn, path, payload)
        if resp.status_code >= 400:
            err = UpstreamError(resp.status_code, resp.content, resp.headers)
            if await pipe.recover_overflow(turn, err):
                payload.update(rebuild(turn))
                resp = await pipe.post(turn, path, payload)
                pipe.note_retry(resp.status_code < 400)
        return resp
    except httpx.HTTPError as exc:
        raise upstream_failure(exc) from None


async def repost(pipe: Pipeline, turn: Turn, path: str, payload: JSONObject) -> httpx.Response:
    """POST a continuation (after the gateway answered its tools): no overflow retry."""
    try:
        return await pipe.post(turn, path, payload)
    except httpx.HTTPError as exc:
        raise upstream_failure(exc) from None


async def open_stream(
    pipe: Pipeline, turn: Turn, path: str, payload: JSONObject, rebuild: Payload
) -> httpx.Response | Response:
    """Open the upstream stream (one retry after a context overflow); an error status becomes
    a finished response passed back to the client."""
    try:
        resp = await pipe.open_stream(turn, path, payload)
        if resp.status_code >= 400:
            raw = await resp.aread()
            await resp.aclose()
            err = UpstreamError(resp.status_code, raw, resp.headers)
            if await pipe.recover_overflow(turn, err):
                payload.update(rebuild(turn))
                resp = await pipe.open_stream(turn, path, payload)
                pipe.note_retry(resp.status_code < 400)
                if resp.status_code < 400:
                    return resp
                raw = await resp.aread()
                await resp.aclose()
            return passed_back(pipe, turn, resp.status_code, raw, resp.headers)
        return resp
    except httpx.HTTPError as exc:
        raise upstream_failure(exc) from None


async def start_stream(
    pipe: Pipeline,
    turn: Turn,
    path: str,
    payload: JSONObject,
    rebuild: Payload,
    events: Events,
) -> Response:
    """The client's streamed response: ``events`` relays the upstream stream; the session lock
    is released (and the answer recorded) when the stream ends, however it ends."""
    opened = await open_stream(pipe, turn, path, payload, rebuild)
    if isinstance(opened, Response):
        return opened
    state: StreamState = {"resp": opened}
    return GatewayStream(
        events(pipe, turn, payload, state),
        on_close=pipe.closer(turn, state),
        headers={**response_headers(opened.headers), **pipe.gateway_headers(turn)},
    )


def whole_answer(
    pipe: Pipeline,
    turn: Turn,
    content: bytes,
    headers: dict[str, str],
    recorded: Message,
    input_tokens: int | None,
) -> GatewayResponse:
    """The client's whole (non-streamed) answer; it is recorded once the client has it."""
    out = {k: v for k, v in headers.items() if k.lower() != "content-type"}
    out.update(pipe.gateway_headers(turn))
    pipe.observe_first_byte(turn)
    state: StreamState = {"record": (recorded, input_tokens)}
    return GatewayResponse(content, on_close=pipe.closer(turn, state), headers=out)


async def next_round(
    pipe: Pipeline,
    adapter: ProviderAdapter,
    turn: Turn,
    path: str,
    payload: JSONObject,
    state: StreamState,
) -> bytes | None:
    """Open the continuation stream after the gateway answered its tools (``state["resp"]``);
    bytes: the error event that ends the client's stream instead."""
    try:
        nxt = await pipe.open_stream(turn, path, payload)
    except httpx.HTTPError as exc:
        failure = upstream_failure(exc)
        return adapter.error_event(failure.status, failure.message, failure.kind)
    state["resp"] = nxt
    if nxt.status_code >= 400:
        raw = await nxt.aread()
        pipe.upstream_error(turn, nxt.status_code)
        err = UpstreamError(nxt.status_code, raw, nxt.headers)
        return adapter.error_event(nxt.status_code, err.message, body=err.body)
    return None


class SSEReader:
    """An upstream SSE stream, a chunk's complete events at a time (``rest()`` at the end)."""

    def __init__(self, resp: httpx.Response) -> None:
        self._resp = resp
        self._parser = SSEParser()

    async def __aiter__(self) -> AsyncIterator[list[SSEEvent]]:
        async for chunk in self._resp.aiter_bytes():
            events = self._parser.feed(chunk)
            if events:
                yield events

    def rest(self) -> list[SSEEvent]:
        """What is left when the stream ended (an event without its blank line)."""
        return self._parser.flush()


__all__ = [
    "HANDED_OVER",
    "SSEReader",
    "StreamState",
    "broken_off",
    "next_round",
    "passed_back",
    "post",
    "repost",
    "start_stream",
    "upstream_failure",
    "whole_answer",
]
