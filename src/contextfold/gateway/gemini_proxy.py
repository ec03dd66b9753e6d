"""POST /v1beta/models/{model}:generateContent and :streamGenerateContent?alt=sse: the Gemini
API through the gateway (Gemini CLI, the google-genai SDKs).

JSON-mode requests (a response MIME type of ``application/json`` or a response schema) are an
agent's side questions about the conversation (Gemini CLI's model router, its loop and
next-speaker checks): they are relayed as they are and never stored. Everything else is a turn
of a conversation: stored, compacted, answered with the gateway's own tools when the model
calls them.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
from anyio import to_thread
from starlette.responses import Response

from ..errors import InvalidMessageError
from ..limits import stated_limit
from ..overflow import is_context_overflow
from . import fastjson, relay
from .gemini import drop_repeated_responses, field, parse_gemini, render_gemini, response_message
from .gemini_api import (
    declarations,
    fit_side_call,
    input_tokens,
    is_side_call,
    with_declarations,
)
from .gemini_stream import GeminiAssembler, has_calls, merge_parts, without_calls
from .pipeline import Pipeline, RequestError, Turn, log_event
from .sse import SSEEvent, encode
from .upstream import UpstreamError, forward_headers, response_headers

GENERATE = ("generateContent", "streamGenerateContent")


def _tools_allowed(body: Mapping[str, Any]) -> bool:
    config = field(body, "toolConfig")
    calling = field(config, "functionCallingConfig") if isinstance(config, Mapping) else None
    mode = field(calling, "mode") if isinstance(calling, Mapping) else None
    return mode is None or str(mode).upper() in ("AUTO", "MODE_UNSPECIFIED")


def _calls(parts: list[Any], ours: tuple[str, ...]) -> tuple[list[Any], list[Any]]:
    """The function-call parts: the gateway's own, the client's."""
    mine: list[Any] = []
    theirs: list[Any] = []
    for part in parts:
        fc = field(part, "functionCall") if isinstance(part, Mapping) else None
        if isinstance(fc, Mapping):
            (mine if fc.get("name") in ours else theirs).append(part)
    return mine, theirs


def _as_call(part: Mapping[str, Any], k: int) -> dict[str, Any]:
    """A function-call part as the tool-call dict the gateway's tools take."""
    fc = field(part, "functionCall")
    args = fc.get("args") or {}
    name = str(fc.get("name", ""))
    return {
        "id": str(fc.get("id") or f"{name}-{k}"),
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
    }


def _answer_parts(calls: list[Any], answers: list[str]) -> list[dict[str, Any]]:
    out = []
    for part, answer in zip(calls, answers):
        fc = field(part, "functionCall")
        fr: dict[str, Any] = {"name": fc.get("name"), "response": {"output": answer}}
        if fc.get("id"):
            fr["id"] = fc["id"]
        out.append({"functionResponse": fr})
    return out


class GeminiTurn:
    """One request: its upstream path and the client's body, and the provider steps the
    shared relay calls."""

    def __init__(self, path: str, body: dict[str, Any]) -> None:
        self.path = path
        self.body = body

    # ------------------------------------------------------------------ payload
    def payload(self, turn: Turn) -> dict[str, Any]:
        payload = dict(self.body)
        payload["contents"] = render_gemini(turn.prepared.items, turn.conv)
        if turn.gateway_tools:
            ours = [t for t in turn.prepared.tools if t.get("name") in turn.gateway_tools]
            payload["tools"] = with_declarations(self.body.get("tools"), ours)
        return payload

    async def _continue(
        self, pipe: Pipeline, turn: Turn, payload: dict[str, Any], content: Any, calls: list[Any]
    ) -> None:
        turn.rounds += 1
        answers = await pipe.answer_tools(turn, [_as_call(p, k) for k, p in enumerate(calls)])
        payload["contents"] = [
            *payload["contents"],
            {"role": "model", "parts": list(content.get("parts") or [])},
            {"role": "user", "parts": _answer_parts(calls, answers)},
        ]

    # ------------------------------------------------------------------ whole answers
    async def complete(self, pipe: Pipeline, turn: Turn, payload: dict[str, Any]) -> Response:
        resp = await relay.post(pipe, turn, self.path, payload, self.payload)
        if resp.status_code >= 400:
            return relay.passed_back(pipe, turn, resp.status_code, resp.content, resp.headers)
        first = resp
        data, content = _answer(resp)
        tokens = input_tokens(field(data, "usageMetadata"))
        earlier: list[Any] = []
        changed = False
        while True:
            parts = list(content.get("parts") or [])
            mine, theirs = _calls(parts, turn.gateway_tools)
            if not mine:
                break
            changed = True
            if theirs or turn.rounds >= pipe.config.max_tool_rounds:
                content = {**content, "parts": [p for p in parts if p not in mine]}
                break
            earlier += [p for p in parts if p not in mine and not p.get("thought")]
            await self._continue(pipe, turn, payload, content, mine)
            resp = await relay.repost(pipe, turn, self.path, payload)
            if resp.status_code >= 400:
                return relay.passed_back(pipe, turn, resp.status_code, resp.content, resp.headers)
            data, content = _answer(resp)
        if changed:
            content = {**content, "parts": merge_parts([*earlier, *(content.get("parts") or [])])}
            data["candidates"][0]["content"] = content
            body = json.dumps(data, ensure_ascii=False).encode("utf-8")
            headers = response_headers(resp.headers)
        else:
            body = first.content  # byte for byte as the upstream sent it
            headers = response_headers(first.headers)
        try:
            recorded = response_message(content, turn.conv)
        except InvalidMessageError as exc:
            raise RequestError(
                502, f"the upstream answered with an invalid message: {exc}"
            ) from None
        return relay.whole_answer(pipe, turn, body, headers, recorded, tokens)

    # ------------------------------------------------------------------ streams
    async def stream(self, pipe: Pipeline, turn: Turn, payload: dict[str, Any]) -> Response:
        return await relay.start_stream(pipe, turn, self.path, payload, self.payload, self.events)

    async def events(
        self, pipe: Pipeline, turn: Turn, payload: dict[str, Any], state: dict[str, Any]
    ) -> AsyncIterator[bytes]:
        earlier: list[Any] = []
        tokens: int | None = None
        # chunks from the first function call on are held back until the stream ends, only
        # when some call could be the gateway's
        holding = bool(turn.gateway_tools)
        while True:
            resp: httpx.Response = state["resp"]
            asm = GeminiAssembler()
            held: list[tuple[SSEEvent, Any]] = []
            reader = relay.SSEReader(resp)
            try:
                async for events in reader:
                    out: list[bytes] = []
                    for ev in events:
                        obj = ev.json()
                        asm.add(obj)
                        if holding and (held or has_calls(obj)):
                            held.append((ev, obj))
                        else:
                            out.append(ev.raw)
                    if out:
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
            if turn.rounds == 0:
                tokens = input_tokens(asm.usage)
            content = asm.content()
            parts = content["parts"]
            mine, theirs = _calls(parts, turn.gateway_tools)
            if mine and not theirs and turn.rounds < pipe.config.max_tool_rounds:
                earlier += [p for p in parts if p not in mine and not p.get("thought")]
                await self._continue(pipe, turn, payload, content, mine)
                failed = await relay.next_round(pipe, turn, self.path, payload, state)
                if failed is not None:
                    yield failed
                    return
                continue
            tail: list[bytes] = []
            for ev, obj in held:
                if not mine or not isinstance(obj, Mapping):
                    tail.append(ev.raw)
                    continue
                rewritten = without_calls(obj, turn.gateway_tools)
                if rewritten is not None:
                    tail.append(encode(rewritten))
            pipe.observe_first_byte(turn)
            if tail:
                yield b"".join(tail)
            if asm.error is not None or asm.finish_reason is None:
                return  # an error chunk or a cut stream: the client did not get a whole answer
            final = [*earlier, *(p for p in parts if p not in mine)]
            try:
                recorded = response_message({"parts": merge_parts(final)}, turn.conv)
            except InvalidMessageError:
                return
            state["record"] = (recorded, tokens)  # stored once the client has it all
            return


def _answer(resp: httpx.Response) -> tuple[dict[str, Any], dict[str, Any]]:
    try:
        data = resp.json()
        content = data["candidates"][0]["content"]
        if not isinstance(data, dict) or not isinstance(content, dict):
            raise TypeError
    except (ValueError, KeyError, IndexError, TypeError):
        raise RequestError(502, "the upstream answered with an unreadable response") from None
    content.setdefault("parts", [])
    return data, content


async def _relay(
    pipe: Pipeline, url: str, body: dict[str, Any], headers: dict[str, str]
) -> tuple[httpx.Response, bytes]:
    try:
        resp = await pipe.upstream.send("gemini-side-calls", url, fastjson.dumps(body), headers)
        try:
            raw = await resp.aread()
        finally:
            await resp.aclose()
    except httpx.HTTPError as exc:
        raise relay.upstream_failure(exc) from None
    return resp, raw


async def side_call(
    pipe: Pipeline,
    path: str,
    model: str,
    body: dict[str, Any],
    headers: dict[str, str],
    query: str,
) -> Response:
    """A JSON-mode request relayed, never stored: as it is when it fits the model's window,
    else with the middles of its longest outputs cut (the conversation itself keeps them);
    after a context overflow the stated limit is learned and it is sent once more, fitted."""
    url = pipe.upstream.url(path) + (f"?{query}" if query else "")
    token = pipe.config.auth_token
    gateway_auth = token is not None and headers.get("authorization", "") == f"Bearer {token}"
    forwarded = forward_headers(headers, drop_authorization=gateway_auth)
    forwarded["content-type"] = "application/json"
    sent, cut = fit_side_call(body, pipe.registry.window_for(model))
    resp, raw = await _relay(pipe, url, sent, forwarded)
    if resp.status_code >= 400:
        err = UpstreamError(resp.status_code, raw, resp.headers)
        stated = stated_limit(err) if is_context_overflow(err) else None
        if stated is not None:
            window = stated.prompt_window()
            await to_thread.run_sync(pipe.registry.learn, model, window)
            log_event("learned_limit", model=model, window=window, side_call=True)
            sent, cut = fit_side_call(body, window)
            resp, raw = await _relay(pipe, url, sent, forwarded)
            pipe.note_retry(resp.status_code < 400)
    log_event("side_call", path=path, status=resp.status_code, chars_left_out=cut)
    return Response(raw, resp.status_code, headers=response_headers(resp.headers))


async def handle(
    pipe: Pipeline,
    body: dict[str, Any],
    headers: dict[str, str],
    query: str,
    *,
    version: str,
    model: str,
    method: str,
) -> Response:
    """One ``generateContent`` / ``streamGenerateContent`` request for ``model``."""
    path = f"/{version}/models/{model}:{method}"
    if not model:
        raise RequestError(400, "the model name is missing from the path")
    if is_side_call(body):
        return await side_call(pipe, path, model, body, headers, query)
    stream = method == "streamGenerateContent"
    if stream and "alt=sse" not in query.split("&"):
        raise RequestError(
            400, "streamGenerateContent through contextfold needs server-sent events: add ?alt=sse"
        )
    contents = body.get("contents")
    if isinstance(contents, list):
        # Gemini CLI's --resume repeats every tool result: repaired (see drop_repeated_responses)
        contents, dropped = drop_repeated_responses(contents)
        if dropped:
            log_event("repaired_request", repeated_function_responses=dropped, model=model)
            body = {**body, "contents": contents}
    try:
        conv = parse_gemini(contents, field(body, "systemInstruction"))
        tools = declarations(field(body, "tools"))
    except InvalidMessageError as exc:
        raise RequestError(400, str(exc)) from None
    gem = GeminiTurn(path, body)
    turn_body = {**body, "model": model, "stream": stream}
    args = ("gemini", turn_body, conv, headers, tools, _tools_allowed(body), query)
    return await relay.handle_turn(pipe, args, gem.payload, gem.stream, gem.complete)


__all__ = ["GENERATE", "handle", "side_call"]
