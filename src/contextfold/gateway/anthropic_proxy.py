"""POST /v1/messages: Anthropic Messages through the gateway."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
from starlette.responses import Response

from ..errors import InvalidMessageError
from ..usage import extract_input_tokens
from .convert import parse_anthropic, render_anthropic, response_message_anthropic
from .openai_proxy import _upstream_failure
from .pipeline import Pipeline, RequestError, Turn
from .sse import SSEEvent, SSEParser, encode
from .streaming import AnthropicAssembler, GatewayResponse, GatewayStream
from .upstream import UpstreamError, error_body, response_headers

PATH = "/v1/messages"


def _tools_allowed(body: dict[str, Any]) -> bool:
    choice = body.get("tool_choice")
    return choice is None or (isinstance(choice, dict) and choice.get("type") == "auto")


def _payload(turn: Turn) -> dict[str, Any]:
    payload = dict(turn.body)
    payload["messages"] = render_anthropic(turn.prepared.items, turn.conv)
    if turn.gateway_tools:
        ours = [
            t
            for t in turn.prepared.tools
            if t.get("name") in turn.gateway_tools and "input_schema" in t
        ]
        payload["tools"] = list(turn.body.get("tools") or []) + ours
    return payload


def _is_mine(block: Any, ours: tuple[str, ...]) -> bool:
    return isinstance(block, dict) and block.get("type") == "tool_use" and block.get("name") in ours


def _continue(
    payload: dict[str, Any], content: list[Any], calls: list[Any], answers: list[str]
) -> None:
    payload["messages"] = [
        *payload["messages"],
        {"role": "assistant", "content": content},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": c.get("id"), "content": a}
                for c, a in zip(calls, answers)
            ],
        },
    ]


async def handle(
    pipe: Pipeline, body: dict[str, Any], headers: dict[str, str], query: str = ""
) -> Response:
    try:
        conv = parse_anthropic(body.get("messages"), body.get("system"))
    except InvalidMessageError as exc:
        raise RequestError(400, f"messages: {exc}") from None
    tools = body.get("tools") or []
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise RequestError(400, "tools: Input should be a valid list of tool objects")
    turn = await pipe.begin("anthropic", body, conv, headers, tools, _tools_allowed(body), query)
    handed_over = False
    try:
        payload = _payload(turn)
        if body.get("stream") is True:
            response = await _start_stream(pipe, turn, payload)
        else:
            response = await _complete(pipe, turn, payload)
        # these release the lock themselves, once the client has the answer
        handed_over = isinstance(response, GatewayStream | GatewayResponse)
        return response
    finally:
        if not handed_over:
            pipe.release(turn)


# ---------------------------------------------------------------------- non-streaming


async def _complete(pipe: Pipeline, turn: Turn, payload: dict[str, Any]) -> Response:
    try:
        resp = await pipe.post(turn, PATH, payload)
        if resp.status_code >= 400:
            err = UpstreamError(resp.status_code, resp.content, resp.headers)
            if await pipe.recover_overflow(turn, err):
                payload.update(_payload(turn))
                resp = await pipe.post(turn, PATH, payload)
                pipe.note_retry(resp.status_code < 400)
    except httpx.HTTPError as exc:
        raise _upstream_failure(exc) from None
    if resp.status_code >= 400:
        pipe.upstream_error(turn, resp.status_code)
        return Response(resp.content, resp.status_code, headers=response_headers(resp.headers))
    first = resp
    data = _read(resp)
    input_tokens = extract_input_tokens(data)
    sent: list[Any] = []
    changed = False
    while True:
        content = data["content"]
        mine = [b for b in content if _is_mine(b, turn.gateway_tools)]
        if not mine:
            break
        changed = True
        theirs = [
            b
            for b in content
            if isinstance(b, dict) and b.get("type") == "tool_use" and b not in mine
        ]
        if theirs or turn.rounds >= pipe.config.max_tool_rounds:
            data["content"] = [b for b in content if b not in mine]
            if not theirs and data.get("stop_reason") == "tool_use":
                data["stop_reason"] = "end_turn"
            break
        turn.rounds += 1
        answers = await pipe.answer_tools(turn, mine)
        sent.extend(b for b in content if b not in mine)
        _continue(payload, content, mine, answers)
        try:
            resp = await pipe.post(turn, PATH, payload)
        except httpx.HTTPError as exc:
            raise _upstream_failure(exc) from None
        if resp.status_code >= 400:
            pipe.upstream_error(turn, resp.status_code)
            return Response(resp.content, resp.status_code, headers=response_headers(resp.headers))
        data = _read(resp)
    if changed:
        data["content"] = [*sent, *data["content"]]
        content = json.dumps(data, ensure_ascii=False).encode("utf-8")
        headers = response_headers(resp.headers)
    else:
        content = first.content  # byte for byte as the upstream sent it
        headers = response_headers(first.headers)
    try:
        recorded = response_message_anthropic(data["content"])
    except InvalidMessageError as exc:
        raise RequestError(502, f"the upstream answered with an invalid message: {exc}") from None
    headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
    headers.update(pipe.gateway_headers(turn))
    pipe.observe_first_byte(turn)
    state: dict[str, Any] = {"record": (recorded, input_tokens)}
    return GatewayResponse(content, on_close=pipe.closer(turn, state), headers=headers)


def _read(resp: httpx.Response) -> dict[str, Any]:
    try:
        data = resp.json()
        if isinstance(data, dict) and isinstance(data.get("content"), list):
            return data
    except ValueError:
        pass
    raise RequestError(502, "the upstream answered with an unreadable message")


# ---------------------------------------------------------------------- streaming


async def _start_stream(pipe: Pipeline, turn: Turn, payload: dict[str, Any]) -> Response:
    try:
        resp = await pipe.open_stream(turn, PATH, payload)
        if resp.status_code >= 400:
            raw = await resp.aread()
            await resp.aclose()
            err = UpstreamError(resp.status_code, raw, resp.headers)
            retried = await pipe.recover_overflow(turn, err)
            if retried:
                payload.update(_payload(turn))
                resp = await pipe.open_stream(turn, PATH, payload)
                pipe.note_retry(resp.status_code < 400)
                if resp.status_code >= 400:
                    raw = await resp.aread()
                    await resp.aclose()
            if resp.status_code >= 400:
                pipe.upstream_error(turn, resp.status_code)
                return Response(raw, resp.status_code, headers=response_headers(resp.headers))
    except httpx.HTTPError as exc:
        raise _upstream_failure(exc) from None
    state: dict[str, Any] = {"resp": resp}

    return GatewayStream(
        _events(pipe, turn, payload, state),
        on_close=pipe.closer(turn, state),
        headers={**response_headers(resp.headers), **pipe.gateway_headers(turn)},
    )


def _shifted(
    ev: SSEEvent, obj: Any, index_map: Callable[[int], int | None] | None, stop_fix: bool
) -> bytes | None:
    """The event with its block index mapped (None: drop the event) and, with ``stop_fix``,
    ``stop_reason`` "tool_use" turned into "end_turn" (the gateway's calls were removed)."""
    if not isinstance(obj, dict):
        return ev.raw
    if "index" in obj and index_map is not None:
        idx = int(obj["index"])
        new = index_map(idx)
        if new is None:
            return None
        if new == idx:
            return ev.raw
        return encode({**obj, "index": new}, ev.event)
    if stop_fix and obj.get("type") == "message_delta":
        delta = dict(obj.get("delta") or {})
        if delta.get("stop_reason") == "tool_use":
            delta["stop_reason"] = "end_turn"
            return encode({**obj, "delta": delta}, ev.event)
    return ev.raw


async def _events(
    pipe: Pipeline, turn: Turn, payload: dict[str, Any], state: dict[str, Any]
) -> AsyncIterator[bytes]:
    sent: list[Any] = []  # content blocks the client has seen from earlier rounds
    input_tokens: int | None = None
    while True:
        resp: httpx.Response = state["resp"]
        asm = AnthropicAssembler()
        held: list[tuple[SSEEvent, Any]] = []
        parser = SSEParser()
        offset = len(sent)
        continuing = turn.rounds > 0  # a continuation after the gateway answered its tools

        def shift(i: int, offset: int = offset) -> int | None:
            return i + offset

        try:
            async for chunk in resp.aiter_bytes():
                for ev in parser.feed(chunk):
                    obj = ev.json()
                    asm.add(ev.event, obj)
                    kind = obj.get("type") if isinstance(obj, dict) else None
                    if kind == "content_block_start":
                        block = obj.get("content_block")
                        if isinstance(block, dict) and block.get("type") == "tool_use":
                            held.append((ev, obj))
                            continue
                    if held or kind in ("message_delta", "message_stop"):
                        held.append((ev, obj))
                        continue
                    if continuing and kind == "message_start":
                        continue
                    pipe.observe_first_byte(turn)
                    out = _shifted(ev, obj, shift if offset else None, False)
                    if out is not None:
                        yield out
        except httpx.HTTPError as exc:  # the upstream died or went silent mid-stream
            failure = _upstream_failure(exc)
            pipe.upstream_error(turn, failure.status)
            yield encode(error_body("anthropic", failure.status, failure.message), "error")
            return
        for ev in parser.flush():
            asm.add(ev.event, ev.json())
            held.append((ev, ev.json()))
        await resp.aclose()
        if not continuing:
            input_tokens = extract_input_tokens({"usage": asm.usage})
        content = asm.content()
        by_index = dict(zip(sorted(asm.blocks), content))
        mine_idx = [i for i, b in sorted(asm.blocks.items()) if _is_mine(b, turn.gateway_tools)]
        uses = [i for i, b in asm.blocks.items() if b.get("type") == "tool_use"]
        if mine_idx and len(mine_idx) == len(uses) and turn.rounds < pipe.config.max_tool_rounds:
            turn.rounds += 1
            calls = [asm.blocks[i] for i in mine_idx]
            answers = await pipe.answer_tools(turn, calls)
            sent.extend(b for i, b in by_index.items() if i not in mine_idx)
            _continue(payload, content, calls, answers)
            try:
                nxt = await pipe.open_stream(turn, PATH, payload)
            except httpx.HTTPError as exc:
                failure = _upstream_failure(exc)
                body = error_body("anthropic", failure.status, failure.message)
                yield encode(body, "error")
                return
            state["resp"] = nxt
            if nxt.status_code >= 400:
                raw = await nxt.aread()
                pipe.upstream_error(turn, nxt.status_code)
                err = UpstreamError(nxt.status_code, raw, nxt.headers)
                yield encode(
                    err.body or error_body("anthropic", nxt.status_code, err.message), "error"
                )
                return
            continue
        kept = [i for i in sorted(asm.blocks) if i not in mine_idx]
        index_map = {old: offset + new for new, old in enumerate(kept)}
        stop_fix = bool(mine_idx) and len(mine_idx) == len(uses)
        mapper = index_map.get if (mine_idx or offset) else None
        for ev, obj in held:
            out = _shifted(ev, obj, mapper, stop_fix)
            if out is not None:
                yield out
        pipe.observe_first_byte(turn)
        if asm.error is not None or asm.stop_reason is None:
            return  # an error event or a cut stream: the client did not get a whole answer
        final = [*sent, *(by_index[i] for i in kept)]
        try:
            recorded = response_message_anthropic(final)
        except InvalidMessageError:
            return
        state["record"] = (recorded, input_tokens)  # stored once the client has it all
        return


__all__ = ["PATH", "handle"]
