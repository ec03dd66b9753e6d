"""The Gemini API: ``POST /v1beta/models/{model}:generateContent`` and
``:streamGenerateContent?alt=sse`` (``/v1/...`` too), as Gemini CLI and the google-genai SDKs
send them; ``:countTokens`` and the other methods, and ``GET /v1beta/models``, forwarded.

The wire conversion is :mod:`contextfold.gateway.gemini` (contents <-> neutral messages),
:mod:`~contextfold.gateway.gemini_api` (tools, side requests, errors) and
:mod:`~contextfold.gateway.gemini_stream` (chunks -> the whole answer).

JSON-mode requests are an agent's side questions about its conversation (Gemini CLI's model
router, its loop and next-speaker checks): relayed and never stored (see :func:`side_call`).

Gemini CLI's ``--resume`` sends every tool result twice and Gemini answers such a request
with a 400: the gateway repairs it, dropping the exact repeats (see
:func:`~contextfold.gateway.gemini_repair.drop_repeated_responses`); a different second answer to the
same call is refused with Gemini's own message. When its loop detection fires between a call
and its answer, Gemini CLI sends its loop feedback after the unanswered call, which Gemini
also refuses: the gateway leaves the abandoned call out of that request (see
:func:`~contextfold.gateway.gemini_api.drop_abandoned_calls`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TypeGuard

import httpx
from anyio import to_thread
from starlette.responses import Response

from ...core.messages import Message
from ...core.overflow import is_context_overflow
from ...errors import InvalidMessageError
from ...jsontypes import JSON, as_list, as_object
from ...providers.limits import stated_limit
from .. import fastjson, relay
from ..gemini import field, parse_gemini, render_gemini, response_message
from ..gemini_api import (
    declaration,
    declarations,
    drop_abandoned_calls,
    error_body,
    fit_side_call,
    input_tokens,
    is_side_call,
    pair_side_call,
    with_declarations,
)
from ..gemini_repair import drop_repeated_responses
from ..gemini_stream import GeminiAssembler, has_calls, merge_parts, without_calls
from ..sse import SSEEvent, encode
from ..turn import RequestError, Turn, log_event
from ..upstream import UpstreamError, forward_headers, response_headers
from .base import (
    Calls,
    ClientRequest,
    HeldEvent,
    JSONDict,
    ParsedRequest,
    ProviderAdapter,
    RouteSpec,
    StreamRound,
    gateway_tools_for,
)

if TYPE_CHECKING:
    from ..pipeline import Pipeline

GENERATE = ("generateContent", "streamGenerateContent")


_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def _target(request: ClientRequest) -> tuple[str, str, str]:
    """(API version, model, method) of a ``/{version}/models/{model}:{method}`` request; a
    model name that is not one (a slash, dot segments: a path that could leave the upstream
    base) is refused."""
    version = request.path.split("/")[1]
    model, _, method = str(request.path_params.get("target", "")).rpartition(":")
    if model and (not _MODEL_NAME.fullmatch(model) or ".." in model):
        raise RequestError(404, f"no such model path: models/{model[:80]}")
    return version, model, method


def _tools_allowed(body: Mapping[str, JSON]) -> bool:
    config = field(body, "toolConfig")
    calling = field(config, "functionCallingConfig") if isinstance(config, Mapping) else None
    mode = field(calling, "mode") if isinstance(calling, Mapping) else None
    return mode is None or str(mode).upper() in ("AUTO", "MODE_UNSPECIFIED")


def _content(answer: JSONDict) -> JSONDict:
    """Candidate 0's content of an answer :meth:`GeminiAdapter.read_answer` checked."""
    return as_object(as_object(as_list(answer.get("candidates"))[0]).get("content"))


def _parts(answer: JSONDict) -> list[JSON]:
    return as_list(_content(answer).get("parts"))


def _with_parts(answer: JSONDict, parts: Sequence[JSON]) -> JSONDict:
    out = dict(answer)
    candidates = as_list(answer.get("candidates"))
    cand = dict(as_object(candidates[0]))
    cand["content"] = {**_content(answer), "parts": [*parts]}
    out["candidates"] = [cand, *candidates[1:]]
    return out


def _call_of(part: Mapping[str, object]) -> JSONDict:
    """A function-call part's ``functionCall`` object."""
    return as_object(field(part, "functionCall"))


def _is_call(part: JSON) -> TypeGuard[JSONDict]:
    return isinstance(part, Mapping) and isinstance(field(part, "functionCall"), Mapping)


class GeminiAdapter(ProviderAdapter):
    name = "gemini"
    summary_format = "gemini"
    routes = (
        RouteSpec("/v1beta/models/{target:path}"),
        RouteSpec("/v1/models/{target:path}"),
        RouteSpec("/v1beta/models", methods=("GET",), turn=False),
        RouteSpec("/v1beta/models/{model:path}", methods=("GET",), turn=False),
    )

    # ------------------------------------------------------------------ routing
    def owns(self, path: str, headers: Mapping[str, str]) -> bool:
        last = path.rpartition("/")[2]
        return path.startswith("/v1beta/") or (path.startswith("/v1/models/") and ":" in last)

    def wants_turn(self, request: ClientRequest) -> bool:
        """generateContent / streamGenerateContent, unless JSON mode (a side request)."""
        return _target(request)[2] in GENERATE and not is_side_call(request.body)

    async def side_request(self, pipe: Pipeline, request: ClientRequest) -> Response | None:
        version, model, method = _target(request)
        if method not in GENERATE:
            return None  # countTokens and the rest: forwarded unchanged
        path = f"/{version}/models/{model}:{method}"
        return await side_call(
            pipe, path, model, request.body, dict(request.headers), request.query
        )

    # ------------------------------------------------------------------ request
    def parse(self, request: ClientRequest) -> ParsedRequest:
        version, model, method = _target(request)
        if not model:
            raise RequestError(400, "the model name is missing from the path")
        stream = method == "streamGenerateContent"
        if stream and "alt=sse" not in request.query.split("&"):
            raise RequestError(
                400,
                "streamGenerateContent through contextfold needs server-sent events: add ?alt=sse",
            )
        body = request.body
        contents = body.get("contents")
        if isinstance(contents, list):
            contents, dropped = drop_repeated_responses(contents)
            contents, abandoned = drop_abandoned_calls(contents)
            if dropped or abandoned:
                log_event(
                    "repaired_request",
                    repeated_function_responses=dropped,
                    abandoned_function_calls=abandoned,
                    model=model,
                )
                body = {**body, "contents": contents}
        try:
            conv = parse_gemini(contents, field(body, "systemInstruction"))
            tools = declarations(body.get("tools"))
        except InvalidMessageError as exc:
            raise RequestError(400, str(exc)) from None
        return ParsedRequest(
            conversation=conv,
            model=model,
            stream=stream,
            client_tools=tools,
            client_tool_names=frozenset(self.tool_name(t) for t in tools),
            tools_allowed=_tools_allowed(body),
            upstream_path=f"/{version}/models/{model}:{method}",
            body=body,
        )

    def render(self, turn: Turn) -> JSONDict:
        payload: JSONDict = dict(turn.body)
        payload["contents"] = render_gemini(turn.prepared.items, turn.conv)
        ours = gateway_tools_for(turn, self)
        if ours:
            payload["tools"] = with_declarations(turn.body.get("tools"), ours)
        return payload

    def tool_schemas(self, openai_schemas: Sequence[JSONDict]) -> list[JSONDict]:
        return [declaration(s) for s in openai_schemas]

    # ------------------------------------------------------------------ answers
    def read_answer(self, data: JSON) -> JSONDict:
        """The answer with candidate 0's content always present: a blocked prompt (no
        candidates, ``promptFeedback.blockReason``) or a candidate stopped for safety has none,
        and reads as an empty model turn (the client gets the upstream's bytes as they are)."""
        cands = data.get("candidates") if isinstance(data, dict) else None
        if not isinstance(data, dict) or not isinstance(cands, list | None):
            raise RequestError(502, "the upstream answered with an unreadable response")
        first = cands[0] if cands else {}
        if not isinstance(first, dict):
            raise RequestError(502, "the upstream answered with an unreadable candidate")
        content = first.get("content")
        content = dict(content) if isinstance(content, dict) else {"role": "model"}
        if not isinstance(content.get("parts"), list):
            content["parts"] = []
        return {**data, "candidates": [{**first, "content": content}, *(cands or [])[1:]]}

    def calls(self, answer: JSONDict) -> list[JSONDict]:
        return [p for p in _parts(answer) if _is_call(p)]

    def call_name(self, call: Mapping[str, object]) -> str:
        return str(_call_of(call).get("name", ""))

    def neutral_call(self, call: JSONDict) -> JSONDict:
        fc = _call_of(call)
        name = str(fc.get("name", ""))
        args = json.dumps(fc.get("args") or {}, ensure_ascii=False, sort_keys=True)
        digest = hashlib.blake2b(args.encode(), digest_size=6).hexdigest()
        return {
            "id": str(fc.get("id") or f"{name}-{digest}"),
            "type": "function",
            "function": {"name": name, "arguments": args},
        }

    def continue_payload(
        self, payload: JSONDict, answer: JSONDict, mine: Calls, results: Sequence[str]
    ) -> None:
        answers: list[JSON] = []
        for part, result in zip(mine, results):
            fc = _call_of(part)
            fr: JSONDict = {"name": fc.get("name"), "response": {"output": result}}
            if fc.get("id"):
                fr["id"] = fc["id"]
            answers.append({"functionResponse": fr})
        payload["contents"] = [
            *as_list(payload.get("contents")),
            {"role": "model", "parts": [*_parts(answer)]},
            {"role": "user", "parts": answers},
        ]

    def kept(self, answer: JSONDict, mine: Sequence[JSONDict]) -> JSON:
        return [p for p in _parts(answer) if not _is_call(p) and not as_object(p).get("thought")]

    def merged(self, kept: Sequence[JSON], answer: JSONDict) -> JSONDict:
        if not kept:
            return answer
        every = [*(p for parts in kept for p in as_list(parts)), *_parts(answer)]
        return _with_parts(answer, merge_parts([p for p in every if isinstance(p, dict)]))

    def without_calls(self, answer: JSONDict, mine: Sequence[JSONDict], others: bool) -> JSONDict:
        # Gemini's finishReason is STOP with calls too: nothing else changes
        return _with_parts(answer, [p for p in _parts(answer) if p not in mine])

    def recorded(self, answer: JSONDict) -> Message:
        raise InvalidMessageError("a Gemini answer is recorded with its conversation")

    def recorded_in(self, turn: Turn, answer: JSONDict) -> Message:
        """The answer as its conversation names its calls (content-derived call ids)."""
        return response_message(_content(answer), turn.conv)

    def input_tokens(self, answer: JSONDict) -> int | None:
        return input_tokens(field(answer, "usageMetadata"))

    def stream_round(
        self, turn: Turn, previous: StreamRound | None, kept: Sequence[JSON]
    ) -> StreamRound:
        return _Round()

    # ------------------------------------------------------------------ errors
    def error_body(self, status: int, message: str, kind: str | None = None) -> JSONDict:
        return error_body(status, message)


class _Round(StreamRound):
    """One ``streamGenerateContent`` stream: chunks relayed byte for byte; from the first
    function call on they are held (when the gateway's tools are offered) and, when the
    client's calls stand beside the gateway's, relayed without the gateway's."""

    def __init__(self) -> None:
        self.asm = GeminiAssembler()

    def add(self, event: SSEEvent, obj: JSON) -> None:
        self.asm.add(obj)

    def holds(self, obj: JSON) -> bool:
        return has_calls(obj)

    def relay(self, event: SSEEvent, obj: JSON) -> bytes | None:
        return event.raw

    def answer(self) -> JSONDict:
        candidate: JSONDict = {"content": self.asm.content(), "index": 0}
        if self.asm.finish_reason is not None:
            candidate["finishReason"] = self.asm.finish_reason
        answer: JSONDict = {"candidates": [candidate]}
        if self.asm.usage is not None:
            answer["usageMetadata"] = dict(self.asm.usage)
        return answer

    def complete(self) -> bool:
        return self.asm.error is None and self.asm.finish_reason is not None

    def tail(self, held: Sequence[HeldEvent], mine: Sequence[JSONDict], others: bool) -> bytes:
        names = tuple(sorted({str(_call_of(p).get("name")) for p in mine}))
        out: list[bytes] = []
        for ev, obj in held:
            if not mine or not isinstance(obj, Mapping):
                out.append(ev.raw)
                continue
            rewritten = without_calls(obj, names)
            if rewritten is not None:
                out.append(encode(rewritten))
        return b"".join(out)

    def input_tokens(self) -> int | None:
        return input_tokens(self.asm.usage)


# ---------------------------------------------------------------------- side requests


async def _relay(
    pipe: Pipeline, url: str, body: JSONDict, headers: dict[str, str]
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


def side_window(pipe: Pipeline, model: str) -> int:
    """The window a side request is fitted into: its model's, but no more than the smallest
    limit the gateway has learned (a side question about a conversation needs no more room
    than the conversation it asks about, whose model may be another one: Gemini CLI's loop
    check and router use other models than the conversation's)."""
    window = pipe.registry.window_for(model)
    learned = [w for w in pipe.registry.learned.values() if w]
    return min([window, *learned])


async def side_call(
    pipe: Pipeline,
    path: str,
    model: str,
    body: JSONDict,
    headers: dict[str, str],
    query: str,
) -> Response:
    """A JSON-mode request relayed, never stored: as it is when it fits the model's window and
    its calls and responses pair up; else with unpaired calls and responses taken out (see
    :func:`~contextfold.gateway.gemini_api.pair_side_call`) and the middles of its longest
    outputs cut (the conversation itself keeps them). After a context overflow the stated
    limit is learned and it is sent once more, fitted."""
    url = pipe.upstream.url(path) + (f"?{query}" if query else "")
    forwarded = forward_headers(headers, token=pipe.config.auth_token)
    forwarded["content-type"] = "application/json"
    repeats = 0
    contents = body.get("contents")
    if isinstance(contents, list):  # --resume repeats the tool results in side requests too
        contents, repeats = drop_repeated_responses(contents)
        if repeats:
            body = {**body, "contents": contents}
    body, unpaired = pair_side_call(body)
    sent, cut = fit_side_call(body, side_window(pipe, model))
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
    log_event(
        "side_call",
        path=path,
        status=resp.status_code,
        chars_left_out=cut,
        unpaired_turns_fixed=unpaired,
        repeated_function_responses=repeats,
    )
    return Response(raw, resp.status_code, headers=response_headers(resp.headers))


__all__ = ["GENERATE", "GeminiAdapter", "side_call", "side_window"]
