"""POST /v1/chat/completions: OpenAI Chat Completions through the gateway."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
from starlette.responses import Response

from ..errors import InvalidMessageError
from . import relay
from .convert import parse_openai, render_openai, response_message_openai
from .pipeline import Pipeline, RequestError, Turn
from .sse import SSEEvent, encode
from .streaming import OpenAIAssembler
from .upstream import response_headers

PATH = "/v1/chat/completions"


def _tools_allowed(body: dict[str, Any]) -> bool:
    choice = body.get("tool_choice")
    return choice is None or choice == "auto"


def _payload(turn: Turn) -> dict[str, Any]:
    payload = dict(turn.body)
    payload["messages"] = render_openai(turn.prepared.items, turn.conv)
    if turn.gateway_tools:
        ours = [
            t
            for t in turn.prepared.tools
            if isinstance(t.get("function"), dict)
            and t["function"].get("name") in turn.gateway_tools
        ]
        payload["tools"] = list(turn.body.get("tools") or []) + ours
    return payload


def _split_calls(msg: dict[str, Any], ours: tuple[str, ...]) -> tuple[list[Any], list[Any]]:
    mine: list[Any] = []
    theirs: list[Any] = []
    for call in msg.get("tool_calls") or []:
        name = call.get("function", {}).get("name") if isinstance(call, dict) else None
        (mine if name in ours else theirs).append(call)
    return mine, theirs


def _continue(
    payload: dict[str, Any], msg: dict[str, Any], calls: list[Any], answers: list[str]
) -> None:
    assistant = {k: v for k, v in msg.items() if v is not None}
    assistant["role"] = "assistant"
    payload["messages"] = [
        *payload["messages"],
        assistant,
        *(
            {"role": "tool", "tool_call_id": c.get("id"), "content": a}
            for c, a in zip(calls, answers)
        ),
    ]


async def handle(
    pipe: Pipeline, body: dict[str, Any], headers: dict[str, str], query: str = ""
) -> Response:
    try:
        conv = parse_openai(body.get("messages"))
    except InvalidMessageError as exc:
        raise RequestError(400, f"messages: {exc}") from None
    tools = body.get("tools") or []
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise RequestError(400, "tools must be a list of tool objects")
    args = ("openai", body, conv, headers, tools, _tools_allowed(body), query)
    return await relay.handle_turn(pipe, args, _payload, _start_stream, _complete)


# ---------------------------------------------------------------------- non-streaming


async def _complete(pipe: Pipeline, turn: Turn, payload: dict[str, Any]) -> Response:
    resp = await relay.post(pipe, turn, PATH, payload, _payload)
    if resp.status_code >= 400:
        return relay.passed_back(pipe, turn, resp.status_code, resp.content, resp.headers)
    first_resp = resp
    try:
        data = resp.json()
        msg = data["choices"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise RequestError(502, "the upstream answered with an unreadable completion") from None
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    input_tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    texts: list[str] = []
    changed = False
    while True:
        mine, theirs = _split_calls(msg, turn.gateway_tools)
        if not mine:
            break
        changed = True
        if theirs or turn.rounds >= pipe.config.max_tool_rounds:
            msg = dict(msg)
            msg["tool_calls"] = theirs or None
            if not theirs:
                data["choices"][0]["finish_reason"] = "stop"
            break
        turn.rounds += 1
        answers = await pipe.answer_tools(turn, mine)
        texts.append(msg.get("content") or "")
        _continue(payload, msg, mine, answers)
        resp = await relay.repost(pipe, turn, PATH, payload)
        if resp.status_code >= 400:
            return relay.passed_back(pipe, turn, resp.status_code, resp.content, resp.headers)
        try:
            data = resp.json()
            msg = data["choices"][0]["message"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise RequestError(502, "the upstream answered with an unreadable completion") from None
    if changed:
        msg = dict(msg)
        joined = "".join([*texts, msg.get("content") or ""])
        msg["content"] = joined or None
        if not msg.get("tool_calls"):
            msg.pop("tool_calls", None)
        data["choices"][0]["message"] = msg
        content = json.dumps(data, ensure_ascii=False).encode("utf-8")
        headers = response_headers(resp.headers)
    else:
        content = first_resp.content  # byte for byte as the upstream sent it
        headers = response_headers(first_resp.headers)
    try:
        recorded = response_message_openai(msg)
    except InvalidMessageError as exc:
        raise RequestError(502, f"the upstream answered with an invalid message: {exc}") from None
    tokens = input_tokens if isinstance(input_tokens, int) else None
    return relay.whole_answer(pipe, turn, content, headers, recorded, tokens)


# ---------------------------------------------------------------------- streaming


async def _start_stream(pipe: Pipeline, turn: Turn, payload: dict[str, Any]) -> Response:
    return await relay.start_stream(pipe, turn, PATH, payload, _payload, _events)


def _rewrite(obj: Any, first_id: str | None, drop: dict[int, int] | None, fix_finish: bool) -> Any:
    """A chunk with the first round's id, the gateway's tool calls removed (``drop`` maps the
    client's call indexes to their new ones) and ``finish_reason`` fixed; None to skip it."""
    if not isinstance(obj, dict):
        return obj
    obj = dict(obj)
    if first_id is not None and "id" in obj:
        obj["id"] = first_id
    if drop is None and not fix_finish:
        return obj
    choices = []
    for choice in obj.get("choices") or []:
        choice = dict(choice)
        delta = dict(choice.get("delta") or {})
        if drop is not None and "tool_calls" in delta:
            kept = []
            for tc in delta["tool_calls"] or []:
                idx = int(tc.get("index", 0))
                if idx in drop:
                    kept.append({**tc, "index": drop[idx]})
            if kept:
                delta["tool_calls"] = kept
            else:
                del delta["tool_calls"]
                if not delta and not choice.get("finish_reason"):
                    continue
        if fix_finish and choice.get("finish_reason") == "tool_calls":
            choice["finish_reason"] = "stop"
        choice["delta"] = delta
        choices.append(choice)
    if not choices and obj.get("choices") and not obj.get("usage"):
        return None
    obj["choices"] = choices
    return obj


async def _events(
    pipe: Pipeline, turn: Turn, payload: dict[str, Any], state: dict[str, Any]
) -> AsyncIterator[bytes]:
    texts: list[str] = []
    first_id: str | None = None
    input_tokens: int | None = None
    # tool calls are held back until the stream ends only when some could be the gateway's
    holding = bool(turn.gateway_tools)
    while True:
        resp: httpx.Response = state["resp"]
        asm = OpenAIAssembler()
        held: list[tuple[SSEEvent, Any]] = []
        reader = relay.SSEReader(resp)
        rewrite_id = turn.rounds > 0
        try:
            async for events in reader:
                out: list[bytes] = []
                for ev in events:
                    obj = ev.json()
                    asm.add(obj)
                    if holding and (held or _has_tool_calls(obj)):
                        held.append((ev, obj))
                    elif rewrite_id and isinstance(obj, dict):
                        out.append(encode(_rewrite(obj, first_id, None, False)))
                    else:
                        out.append(ev.raw)
                if out:  # the events of one upstream chunk go to the client in one write
                    pipe.observe_first_byte(turn)
                    yield b"".join(out)
        except httpx.HTTPError as exc:  # the upstream died or went silent mid-stream
            yield relay.broken_off(pipe, turn, exc)
            return
        for ev in reader.rest():
            obj = ev.json()
            asm.add(obj)
            held.append((ev, obj))
        await resp.aclose()
        if first_id is None:
            first_id = asm.id
        if turn.rounds == 0 and asm.usage is not None:
            value = asm.usage.get("prompt_tokens")
            input_tokens = value if isinstance(value, int) else None
        msg = asm.message()
        names = asm.call_indexes()
        mine = [i for i, n in names.items() if n in turn.gateway_tools]
        if mine and len(mine) == len(names) and turn.rounds < pipe.config.max_tool_rounds:
            turn.rounds += 1
            calls = [asm.calls[i] for i in sorted(mine)]
            answers = await pipe.answer_tools(turn, calls)
            texts.append(msg.get("content") or "")
            _continue(payload, msg, calls, answers)
            failed = await relay.next_round(pipe, turn, PATH, payload, state)
            if failed is not None:
                yield failed
                return
            continue
        drop: dict[int, int] | None = None
        if mine:
            theirs = sorted(i for i in names if i not in mine)
            drop = {old: new for new, old in enumerate(theirs)}
            msg["tool_calls"] = [asm.calls[i] for i in theirs] or None
        fix_finish = drop is not None and not drop
        tail: list[bytes] = []
        for ev, obj in held:
            if not isinstance(obj, dict) or (drop is None and not rewrite_id):
                tail.append(ev.raw)
                continue
            rewritten = _rewrite(obj, first_id if rewrite_id else None, drop, fix_finish)
            if rewritten is not None:
                tail.append(encode(rewritten))
        pipe.observe_first_byte(turn)
        if tail:
            yield b"".join(tail)
        if asm.error is not None or asm.finish_reason is None:
            return  # an error event or a cut stream: the client did not get a whole answer
        msg["content"] = "".join([*texts, msg.get("content") or ""]) or None
        if not msg.get("tool_calls"):
            msg.pop("tool_calls", None)
        try:
            recorded = response_message_openai(msg)
        except InvalidMessageError:
            return
        state["record"] = (recorded, input_tokens)  # stored once the client has it all
        return


def _has_tool_calls(obj: Any) -> bool:
    if not isinstance(obj, dict):
        return False
    for choice in obj.get("choices") or []:
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if isinstance(delta, dict) and delta.get("tool_calls"):
            return True
    return False


__all__ = ["PATH", "handle"]
