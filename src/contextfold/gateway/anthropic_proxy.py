"""POST /v1/messages: Anthropic Messages through the gateway."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
from starlette.responses import Response

from ..errors import InvalidMessageError
from ..usage import extract_input_tokens
from . import relay
from .convert import parse_anthropic, render_anthropic, response_message_anthropic
from .pipeline import Pipeline, RequestError, Turn
from .sse import SSEEvent, encode
from .streaming import AnthropicAssembler
from .upstream import response_headers

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
    args = ("anthropic", body, conv, headers, tools, _tools_allowed(body), query)
    return await relay.handle_turn(pipe, args, _payload, _start_stream, _complete)


# ---------------------------------------------------------------------- non-streaming


async def _complete(pipe: Pipeline, turn: Turn, payload: dict[str, Any]) -> Response:
    resp = await relay.post(pipe, turn, PATH, payload, _payload)
    if resp.status_code >= 400:
        return relay.passed_back(pipe, turn, resp.status_code, resp.content, resp.headers)
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
        resp = await relay.repost(pipe, turn, PATH, payload)
        if resp.status_code >= 400:
            return relay.passed_back(pipe, turn, resp.status_code, resp.content, resp.headers)
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
    return relay.whole_answer(pipe, turn, content, headers, recorded, input_tokens)


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
    return await relay.start_stream(pipe, turn, PATH, payload, _payload, _events)


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
    # tool_use blocks and the message's end are held back only when some call could be the
    # gateway's (to drop it and fix the stop reason)
    holding = bool(turn.gateway_tools)
    while True:
        resp: httpx.Response = state["resp"]
        asm = AnthropicAssembler()
        held: list[tuple[SSEEvent, Any]] = []
        reader = relay.SSEReader(resp)
        offset = len(sent)
        continuing = turn.rounds > 0  # a continuation after the gateway answered its tools

        def shift(i: int, offset: int = offset) -> int | None:
            return i + offset

        try:
            async for events in reader:
                out: list[bytes] = []
                for ev in events:
                    obj = ev.json()
                    asm.add(ev.event, obj)
                    if holding and (held or _holds(obj)):
                        held.append((ev, obj))
                        continue
                    if continuing and isinstance(obj, dict) and obj.get("type") == "message_start":
                        continue
                    shifted = _shifted(ev, obj, shift if offset else None, False)
                    if shifted is not None:
                        out.append(shifted)
                if out:  # the events of one upstream chunk go to the client in one write
                    pipe.observe_first_byte(turn)
                    yield b"".join(out)
        except httpx.HTTPError as exc:  # the upstream died or went silent mid-stream
            yield relay.broken_off(pipe, turn, exc)
            return
        for ev in reader.rest():
            obj = ev.json()
            asm.add(ev.event, obj)
            held.append((ev, obj))
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
            failed = await relay.next_round(pipe, turn, PATH, payload, state)
            if failed is not None:
                yield failed
                return
            continue
        kept = [i for i in sorted(asm.blocks) if i not in mine_idx]
        index_map = {old: offset + new for new, old in enumerate(kept)}
        stop_fix = bool(mine_idx) and len(mine_idx) == len(uses)
        mapper = index_map.get if (mine_idx or offset) else None
        tail = [b for b in (_shifted(ev, obj, mapper, stop_fix) for ev, obj in held) if b]
        pipe.observe_first_byte(turn)
        if tail:
            yield b"".join(tail)
        if asm.error is not None or asm.stop_reason is None:
            return  # an error event or a cut stream: the client did not get a whole answer
        final = [*sent, *(by_index[i] for i in kept)]
        try:
            recorded = response_message_anthropic(final)
        except InvalidMessageError:
            return
        state["record"] = (recorded, input_tokens)  # stored once the client has it all
        return


def _holds(obj: Any) -> bool:
    """Whether an event starts what is held back: a tool_use block or the message's end."""
    if not isinstance(obj, dict):
        return False
    kind = obj.get("type")
    if kind == "content_block_start":
        block = obj.get("content_block")
        return isinstance(block, dict) and block.get("type") == "tool_use"
    return kind in ("message_delta", "message_stop")


__all__ = ["PATH", "handle"]
