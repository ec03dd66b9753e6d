"""One turn of any wire format: begin it, forward it (whole or streamed), answer the gateway's
own tool calls in as many rounds as the model makes them, and hand the client its answer.
Everything format-specific is asked of the :class:`~.base.ProviderAdapter`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence

import httpx
from starlette.responses import Response

from ...core.messages import Message
from ...errors import InvalidMessageError
from ...jsontypes import JSON
from .. import relay
from ..pipeline import Pipeline, RequestError, Turn
from ..upstream import response_headers
from .base import ClientRequest, HeldEvent, JSONDict, ProviderAdapter, StreamRound


async def handle(pipe: Pipeline, adapter: ProviderAdapter, request: ClientRequest) -> Response:
    """Serve one turn; a streamed or whole answer releases the session lock itself once the
    client has it, anything else releases it here."""
    parsed = adapter.parse(request)
    turn = await pipe.begin(adapter, parsed, dict(request.headers), request.query)
    handed_over = False
    try:
        payload = adapter.render(turn)
        if parsed.stream:
            response = await _start_stream(pipe, adapter, turn, payload)
        else:
            response = await _complete(pipe, adapter, turn, payload)
        handed_over = isinstance(response, relay.HANDED_OVER)
        return response
    finally:
        if not handed_over:  # an error answer too goes out once the append is settled
            await pipe.finish(turn)


def _split(
    adapter: ProviderAdapter, turn: Turn, answer: JSONDict
) -> tuple[list[JSONDict], list[JSONDict]]:
    mine: list[JSONDict] = []
    theirs: list[JSONDict] = []
    for call in adapter.calls(answer):
        (mine if adapter.call_name(call) in turn.gateway_tools else theirs).append(call)
    return mine, theirs


async def _answer(
    pipe: Pipeline, adapter: ProviderAdapter, turn: Turn, mine: Sequence[JSONDict]
) -> list[str]:
    turn.rounds += 1
    return await pipe.answer_tools(turn, [adapter.neutral_call(c) for c in mine])


def _recorded(adapter: ProviderAdapter, turn: Turn, answer: JSONDict) -> Message:
    try:
        return adapter.recorded_in(turn, answer)
    except InvalidMessageError as exc:
        raise RequestError(502, f"the upstream answered with an invalid message: {exc}") from None


# ---------------------------------------------------------------------- whole answers


def _read(adapter: ProviderAdapter, resp: httpx.Response) -> JSONDict:
    try:
        data = resp.json()
    except ValueError:
        raise RequestError(502, "the upstream answered with an unreadable message") from None
    return adapter.read_answer(data)


async def _complete(
    pipe: Pipeline, adapter: ProviderAdapter, turn: Turn, payload: JSONDict
) -> Response:
    path = turn.path
    resp = await relay.post(pipe, turn, path, payload, adapter.render)
    if resp.status_code >= 400:
        return relay.passed_back(pipe, turn, resp.status_code, resp.content, resp.headers)
    first = resp
    answer = _read(adapter, resp)
    input_tokens = adapter.input_tokens(answer)
    kept: list[JSON] = []
    changed = False
    while True:
        mine, theirs = _split(adapter, turn, answer)
        if not mine:
            break
        changed = True
        if theirs or turn.rounds >= pipe.config.max_tool_rounds:
            answer = adapter.without_calls(answer, mine, bool(theirs))
            break
        results = await _answer(pipe, adapter, turn, mine)
        kept.append(adapter.kept(answer, mine))
        adapter.continue_payload(payload, answer, mine, results)
        resp = await relay.repost(pipe, turn, path, payload)
        if resp.status_code >= 400:
            return relay.passed_back(pipe, turn, resp.status_code, resp.content, resp.headers)
        answer = _read(adapter, resp)
    if changed:
        answer = adapter.merged(kept, answer)
        content = json.dumps(answer, ensure_ascii=False).encode("utf-8")
        headers = response_headers(resp.headers)
    else:
        content = first.content  # byte for byte as the upstream sent it
        headers = response_headers(first.headers)
    recorded = _recorded(adapter, turn, answer)
    adapter.remember(turn, answer)
    return relay.whole_answer(pipe, turn, content, headers, recorded, input_tokens)


# ---------------------------------------------------------------------- streaming


async def _start_stream(
    pipe: Pipeline, adapter: ProviderAdapter, turn: Turn, payload: JSONDict
) -> Response:
    async def events(
        pipe: Pipeline, turn: Turn, payload: JSONDict, state: relay.StreamState
    ) -> AsyncIterator[bytes]:
        async for chunk in _events(pipe, adapter, turn, payload, state):
            yield chunk

    return await relay.start_stream(pipe, turn, turn.path, payload, adapter.render, events)


async def _relay_round(
    pipe: Pipeline,
    turn: Turn,
    rnd: StreamRound,
    reader: relay.SSEReader,
    held: list[HeldEvent],
) -> AsyncIterator[bytes]:
    """The upstream stream of one round to the client, a chunk's events in one write; what
    may be the gateway's own tool calls (and all after them) is held in ``held``."""
    holding = bool(turn.gateway_tools)
    async for events in reader:
        out: list[bytes] = []
        for ev in events:
            obj = ev.json()
            rnd.add(ev, obj)
            if holding and (held or rnd.holds(obj)):
                held.append((ev, obj))
                continue
            data = rnd.relay(ev, obj)
            if data:
                out.append(data)
        if out:
            pipe.observe_first_byte(turn)
            yield b"".join(out)


async def _events(
    pipe: Pipeline,
    adapter: ProviderAdapter,
    turn: Turn,
    payload: JSONDict,
    state: relay.StreamState,
) -> AsyncIterator[bytes]:
    kept: list[JSON] = []
    previous: StreamRound | None = None
    input_tokens: int | None = None
    while True:
        resp: httpx.Response = state["resp"]
        rnd = adapter.stream_round(turn, previous, kept)
        held: list[HeldEvent] = []
        reader = relay.SSEReader(resp)
        try:
            async for chunk in _relay_round(pipe, turn, rnd, reader, held):
                yield chunk
        except httpx.HTTPError as exc:  # the upstream died or went silent mid-stream
            yield relay.broken_off(pipe, adapter, turn, exc)
            return
        for ev in reader.rest():
            obj = ev.json()
            rnd.add(ev, obj)
            held.append((ev, obj))
        await resp.aclose()
        if previous is None:
            input_tokens = rnd.input_tokens()
        answer = rnd.answer()
        mine, theirs = _split(adapter, turn, answer)
        if mine and not theirs and turn.rounds < pipe.config.max_tool_rounds:
            results = await _answer(pipe, adapter, turn, mine)
            kept.append(adapter.kept(answer, mine))
            adapter.continue_payload(payload, answer, mine, results)
            failed = await relay.next_round(pipe, adapter, turn, turn.path, payload, state)
            if failed is not None:
                yield failed
                return
            previous = rnd
            continue
        tail = rnd.tail(held, mine, bool(theirs))
        pipe.observe_first_byte(turn)
        if tail:
            yield tail
        if not rnd.complete():
            return  # an error event or a cut stream: the client did not get a whole answer
        if mine:
            answer = adapter.without_calls(answer, mine, bool(theirs))
        final = adapter.merged(kept, answer)
        try:
            recorded = adapter.recorded_in(turn, final)
        except InvalidMessageError:
            return
        adapter.remember(turn, final)
        state["record"] = (recorded, input_tokens)  # stored once the client has it all
        return


__all__ = ["handle"]
