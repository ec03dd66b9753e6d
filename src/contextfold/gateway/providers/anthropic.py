"""Anthropic Messages (``POST /v1/messages``, ``count_tokens`` forwarded unchanged).

Every field the client sends (``thinking``, ``context_management``, ``output_config``,
``metadata``, ...) goes upstream as it came, and so do its headers (``anthropic-beta``) and
query string (``?beta=true``). Mid-conversation ``{"role": "system"}`` messages (the
``mid-conversation-system-2026-04-07`` beta) are kept and relayed in place; whether they are
allowed is the upstream's to say, so a client's own fallback sees the upstream's answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...core.messages import Message
from ...core.usage import extract_input_tokens
from ...errors import InvalidMessageError
from ...jsontypes import as_list
from ..convert import parse_anthropic, render_anthropic, response_message_anthropic
from ..sse import SSEEvent, encode
from ..streaming import AnthropicAssembler
from ..turn import RequestError, Turn
from ..upstream import error_body
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

PATH = "/v1/messages"


def _tools_allowed(body: Mapping[str, Any]) -> bool:
    choice = body.get("tool_choice")
    return choice is None or (isinstance(choice, dict) and choice.get("type") == "auto")


def _is_tool_use(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "tool_use"


class AnthropicAdapter(ProviderAdapter):
    name = "anthropic"
    summary_format = "anthropic"
    routes = (
        RouteSpec(PATH),
        RouteSpec(PATH + "/count_tokens", turn=False),
    )

    def owns(self, path: str, headers: Mapping[str, str]) -> bool:
        return path.startswith(PATH) or "anthropic-version" in headers

    # ------------------------------------------------------------------ request
    def parse(self, request: ClientRequest) -> ParsedRequest:
        body = request.body
        try:
            conv = parse_anthropic(body.get("messages"), body.get("system"))
        except InvalidMessageError as exc:
            raise RequestError(400, _problem(exc)) from None
        return self.parsed(request, conv, PATH, _tools_allowed(body))

    def render(self, turn: Turn) -> JSONDict:
        payload = dict(turn.body)
        payload["messages"] = render_anthropic(turn.prepared.items, turn.conv)
        ours = [t for t in gateway_tools_for(turn, self) if "input_schema" in t]
        if ours:
            payload["tools"] = [*as_list(turn.body.get("tools")), *ours]  # (parse: a list)
        return payload

    def tool_schemas(self, openai_schemas: Sequence[JSONDict]) -> list[JSONDict]:
        out = []
        for schema in openai_schemas:
            fn = schema.get("function") or {}
            out.append(
                {
                    "name": fn.get("name", ""),
                    "description": fn.get("description", ""),
                    "input_schema": fn.get("parameters") or {"type": "object"},
                }
            )
        return out

    # ------------------------------------------------------------------ answers
    def read_answer(self, data: Any) -> JSONDict:
        if isinstance(data, dict) and isinstance(data.get("content"), list):
            return data
        raise RequestError(502, "the upstream answered with an unreadable message")

    def calls(self, answer: JSONDict) -> list[JSONDict]:
        return [b for b in answer.get("content") or [] if _is_tool_use(b)]

    def neutral_call(self, call: JSONDict) -> JSONDict:
        return call  # the toolbox reads tool_use blocks as they are

    def continue_payload(
        self, payload: JSONDict, answer: JSONDict, mine: Calls, results: Sequence[str]
    ) -> None:
        payload["messages"] = [
            *payload["messages"],
            {"role": "assistant", "content": answer["content"]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": c.get("id"), "content": a}
                    for c, a in zip(mine, results)
                ],
            },
        ]

    def kept(self, answer: JSONDict, mine: Sequence[JSONDict]) -> Any:
        ids = _ids(mine)
        return [b for b in answer["content"] if not _mine(b, ids)]

    def merged(self, kept: Sequence[Any], answer: JSONDict) -> JSONDict:
        if not kept:
            return answer
        out = dict(answer)
        out["content"] = [*(b for part in kept for b in part), *answer["content"]]
        return out

    def without_calls(self, answer: JSONDict, mine: Sequence[JSONDict], others: bool) -> JSONDict:
        out = dict(answer)
        ids = _ids(mine)
        out["content"] = [b for b in answer["content"] if not _mine(b, ids)]
        if not others and out.get("stop_reason") == "tool_use":
            out["stop_reason"] = "end_turn"
        return out

    def recorded(self, answer: JSONDict) -> Message:
        return response_message_anthropic(answer.get("content"))

    def input_tokens(self, answer: JSONDict) -> int | None:
        return extract_input_tokens(answer)

    def stream_round(
        self, turn: Turn, previous: StreamRound | None, kept: Sequence[Any]
    ) -> StreamRound:
        return _Round(offset=sum(len(k) for k in kept), continuing=previous is not None)

    # ------------------------------------------------------------------ errors
    def error_body(self, status: int, message: str, kind: str | None = None) -> Any:
        return error_body("anthropic", status, message, kind)

    def error_event(
        self, status: int, message: str, kind: str | None = None, body: Any = None
    ) -> bytes:
        return encode(body or self.error_body(status, message, kind), "error")

    def overflow_body(self, need: int | None, window: int | None, detail: str) -> Any:
        # exactly the Messages API's words: clients match them to run their own compaction
        message = f"prompt is too long: {need or 0} tokens > {window or 0} maximum"
        return error_body("anthropic", 400, message, "invalid_request_error")


def _problem(exc: InvalidMessageError) -> str:
    """The gateway's own 400 for a bad message, worded as the Messages API words it
    (``messages.3.content: ...``) so clients that read the index keep working."""
    where = f"messages.{exc.index}" if exc.index is not None else "messages"
    return f"{where}: {exc.problem}"


class _Round(StreamRound):
    """One Messages stream: blocks re-indexed after earlier rounds' blocks, the gateway's
    ``tool_use`` blocks dropped, ``stop_reason`` fixed when no call is left."""

    def __init__(self, offset: int, continuing: bool) -> None:
        self.asm = AnthropicAssembler()
        self.offset = offset
        self.continuing = continuing  # a continuation: its message_start is not sent again

    def add(self, event: SSEEvent, obj: Any) -> None:
        self.asm.add(event.event, obj)

    def holds(self, obj: Any) -> bool:
        """A tool_use block or the message's end."""
        if not isinstance(obj, dict):
            return False
        kind = obj.get("type")
        if kind == "content_block_start":
            return _is_tool_use(obj.get("content_block"))
        return kind in ("message_delta", "message_stop")

    def relay(self, event: SSEEvent, obj: Any) -> bytes | None:
        if self.continuing and isinstance(obj, dict) and obj.get("type") == "message_start":
            return None
        offset = self.offset
        return _shifted(event, obj, (lambda i: i + offset) if offset else None, False)

    def answer(self) -> JSONDict:
        return {
            "content": self.asm.content(),
            "stop_reason": self.asm.stop_reason,
            "usage": self.asm.usage,
        }

    def complete(self) -> bool:
        return self.asm.error is None and self.asm.stop_reason is not None

    def tail(self, held: Sequence[HeldEvent], mine: Sequence[JSONDict], others: bool) -> bytes:
        ids = _ids(mine)
        blocks = sorted(self.asm.blocks)
        mine_idx = {i for i in blocks if _mine(self.asm.blocks[i], ids)}
        kept = [i for i in blocks if i not in mine_idx]
        index_map = {old: self.offset + new for new, old in enumerate(kept)}
        mapper = index_map.get if (mine_idx or self.offset) else None
        stop_fix = bool(mine_idx) and not others
        out = [_shifted(ev, obj, mapper, stop_fix) for ev, obj in held]
        return b"".join(b for b in out if b)

    def input_tokens(self) -> int | None:
        return extract_input_tokens({"usage": self.asm.usage})


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


def _ids(calls: Sequence[JSONDict]) -> set[Any]:
    return {c.get("id") for c in calls}


def _mine(block: Any, ids: set[Any]) -> bool:
    return _is_tool_use(block) and block.get("id") in ids


__all__ = ["PATH", "AnthropicAdapter"]
