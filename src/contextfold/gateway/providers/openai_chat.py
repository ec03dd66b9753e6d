"""OpenAI Chat Completions (``POST /v1/chat/completions``; ``/v1/models`` forwarded).

System and developer messages may stand anywhere in ``messages``: they are stored where they
are and relayed in place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...core.messages import Message
from ...errors import InvalidMessageError
from ...jsontypes import as_list
from ..convert import parse_openai, render_openai, response_message_openai
from ..sse import SSEEvent, encode
from ..streaming import OpenAIAssembler
from ..turn import RequestError, Turn
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
    usage_tokens,
)

PATH = "/v1/chat/completions"


def _tools_allowed(body: Mapping[str, Any]) -> bool:
    choice = body.get("tool_choice")
    return choice is None or choice == "auto"


def _message(answer: JSONDict) -> JSONDict:
    msg: JSONDict = answer["choices"][0]["message"]
    return msg


def _ids(calls: Sequence[JSONDict]) -> set[Any]:
    return {c.get("id") for c in calls}


class ChatCompletionsAdapter(ProviderAdapter):
    name = "openai"
    summary_format = "openai"
    routes = (
        RouteSpec(PATH),
        RouteSpec("/v1/models", methods=("GET",), turn=False),
        RouteSpec("/v1/models/{model:path}", methods=("GET",), turn=False),
    )

    # ------------------------------------------------------------------ request
    def parse(self, request: ClientRequest) -> ParsedRequest:
        body = request.body
        try:
            conv = parse_openai(body.get("messages"))
        except InvalidMessageError as exc:
            raise RequestError(400, f"messages: {exc}") from None
        return self.parsed(request, conv, PATH, _tools_allowed(body))

    def render(self, turn: Turn) -> JSONDict:
        payload = dict(turn.body)
        payload["messages"] = render_openai(turn.prepared.items, turn.conv)
        ours = [t for t in gateway_tools_for(turn, self) if isinstance(t.get("function"), dict)]
        if ours:
            payload["tools"] = [*as_list(turn.body.get("tools")), *ours]  # (parse: a list)
        return payload

    def tool_schemas(self, openai_schemas: Sequence[JSONDict]) -> list[JSONDict]:
        return [dict(s) for s in openai_schemas]

    # ------------------------------------------------------------------ answers
    def read_answer(self, data: Any) -> JSONDict:
        try:
            msg = data["choices"][0]["message"]
        except (KeyError, IndexError, TypeError):
            msg = None
        if not isinstance(data, dict) or not isinstance(msg, dict):
            raise RequestError(502, "the upstream answered with an unreadable completion")
        return data

    def calls(self, answer: JSONDict) -> list[JSONDict]:
        return [c for c in _message(answer).get("tool_calls") or [] if isinstance(c, dict)]

    def neutral_call(self, call: JSONDict) -> JSONDict:
        return call

    def continue_payload(
        self, payload: JSONDict, answer: JSONDict, mine: Calls, results: Sequence[str]
    ) -> None:
        assistant = {k: v for k, v in _message(answer).items() if v is not None}
        assistant["role"] = "assistant"
        payload["messages"] = [
            *payload["messages"],
            assistant,
            *(
                {"role": "tool", "tool_call_id": c.get("id"), "content": a}
                for c, a in zip(mine, results)
            ),
        ]

    def kept(self, answer: JSONDict, mine: Sequence[JSONDict]) -> Any:
        return _message(answer).get("content") or ""

    def merged(self, kept: Sequence[Any], answer: JSONDict) -> JSONDict:
        if not kept:
            return answer
        msg = dict(_message(answer))
        msg["content"] = "".join([*kept, msg.get("content") or ""]) or None
        if not msg.get("tool_calls"):
            msg.pop("tool_calls", None)
        return _with_message(answer, msg)

    def without_calls(self, answer: JSONDict, mine: Sequence[JSONDict], others: bool) -> JSONDict:
        ids = _ids(mine)
        msg = dict(_message(answer))
        theirs = [c for c in msg.get("tool_calls") or [] if c.get("id") not in ids]
        if theirs:
            msg["tool_calls"] = theirs
        else:
            msg.pop("tool_calls", None)
        out = _with_message(answer, msg)
        if not others:
            out["choices"][0]["finish_reason"] = "stop"
        return out

    def recorded(self, answer: JSONDict) -> Message:
        return response_message_openai(_message(answer))

    def input_tokens(self, answer: JSONDict) -> int | None:
        return usage_tokens(answer, "prompt_tokens")

    def stream_round(
        self, turn: Turn, previous: StreamRound | None, kept: Sequence[Any]
    ) -> StreamRound:
        first_id = previous.first_id if isinstance(previous, _Round) else None
        return _Round(first_id, continuing=previous is not None)


def _with_message(answer: JSONDict, msg: JSONDict) -> JSONDict:
    out = dict(answer)
    choice = dict(answer["choices"][0])
    choice["message"] = msg
    out["choices"] = [choice, *answer["choices"][1:]]
    return out


class _Round(StreamRound):
    """One Chat Completions stream: a continuation's chunks carry the first round's id, the
    gateway's tool calls are dropped and the client's re-indexed, ``finish_reason`` fixed."""

    def __init__(self, first_id: str | None, continuing: bool) -> None:
        self.asm = OpenAIAssembler()
        self._first_id = first_id
        self.continuing = continuing

    @property
    def first_id(self) -> str | None:
        return self._first_id if self._first_id is not None else self.asm.id

    def add(self, event: SSEEvent, obj: Any) -> None:
        self.asm.add(obj)

    def holds(self, obj: Any) -> bool:
        if not isinstance(obj, dict):
            return False
        for choice in obj.get("choices") or []:
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if isinstance(delta, dict) and delta.get("tool_calls"):
                return True
        return False

    def relay(self, event: SSEEvent, obj: Any) -> bytes | None:
        if self.continuing and isinstance(obj, dict):
            return encode(_rewrite(obj, self.first_id, None, False))
        return event.raw

    def answer(self) -> JSONDict:
        return {
            "id": self.asm.id,
            "choices": [{"index": 0, "message": self.asm.message()}],
            "usage": self.asm.usage,
        }

    def complete(self) -> bool:
        return self.asm.error is None and self.asm.finish_reason is not None

    def tail(self, held: Sequence[HeldEvent], mine: Sequence[JSONDict], others: bool) -> bytes:
        drop: dict[int, int] | None = None
        if mine:
            ids = _ids(mine)
            theirs = sorted(i for i, c in self.asm.calls.items() if c.get("id") not in ids)
            drop = {old: new for new, old in enumerate(theirs)}
        fix_finish = drop is not None and not drop
        out: list[bytes] = []
        for ev, obj in held:
            if not isinstance(obj, dict) or (drop is None and not self.continuing):
                out.append(ev.raw)
                continue
            first = self.first_id if self.continuing else None
            rewritten = _rewrite(obj, first, drop, fix_finish)
            if rewritten is not None:
                out.append(encode(rewritten))
        return b"".join(out)

    def input_tokens(self) -> int | None:
        return usage_tokens({"usage": self.asm.usage}, "prompt_tokens")


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


__all__ = ["PATH", "ChatCompletionsAdapter"]
