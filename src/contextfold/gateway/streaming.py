"""Streaming pieces: a response that always cleans up, and assemblers that rebuild the
assistant message from a provider's SSE events (to record it and to continue a tool round)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

OnClose = Callable[[bool], Awaitable[None]]


class GatewayStream(StreamingResponse):
    """A StreamingResponse whose ``on_close(completed)`` runs however the response ends:
    completed, client disconnected (even before the first byte), or failed. It records the
    answer (only when the client got all of it), closes the upstream stream and releases the
    session lock."""

    def __init__(
        self,
        content: AsyncIterator[bytes],
        *,
        on_close: OnClose,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(content, status_code=200, headers=headers, media_type="text/event-stream")
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        completed = False
        try:
            await super().__call__(scope, receive, send)
            completed = True
        finally:
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                await aclose()
            await self._on_close(completed)


class GatewayResponse(Response):
    """A whole response whose ``on_close(completed)`` runs after it was sent (or failed to
    be): the answer is recorded off the client's critical path, then the lock is released."""

    def __init__(
        self,
        content: bytes,
        *,
        on_close: OnClose,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(content, status_code=200, headers=headers, media_type="application/json")
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        completed = False
        try:
            await super().__call__(scope, receive, send)
            completed = True
        finally:
            await self._on_close(completed)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


class OpenAIAssembler:
    """Chat Completions chunks -> one assistant message dict (choice 0)."""

    def __init__(self) -> None:
        self.id: str | None = None
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.refusal: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.error: Any = None

    def add(self, obj: Any) -> None:
        if not isinstance(obj, dict):
            return
        if "error" in obj:
            self.error = obj["error"]
        if self.id is None and isinstance(obj.get("id"), str):
            self.id = obj["id"]
        if isinstance(obj.get("usage"), dict):
            self.usage = obj["usage"]
        for choice in obj.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
            delta = _dict(choice.get("delta"))
            if isinstance(delta.get("content"), str):
                self.text.append(delta["content"])
            for key, into in (("reasoning_content", self.reasoning), ("refusal", self.refusal)):
                if isinstance(delta.get(key), str):
                    into.append(delta[key])
            for tc in delta.get("tool_calls") or []:
                if isinstance(tc, dict):
                    self._add_call(tc)

    def _add_call(self, tc: dict[str, Any]) -> None:
        """One tool call's chunk: its id, type and name, and the next piece of arguments."""
        slot = self.calls.setdefault(
            int(tc.get("index", 0)),
            {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
        )
        if tc.get("id"):
            slot["id"] = tc["id"]
        if tc.get("type"):
            slot["type"] = tc["type"]
        fn = _dict(tc.get("function"))
        if fn.get("name"):
            slot["function"]["name"] += fn["name"]
        if isinstance(fn.get("arguments"), str):
            slot["function"]["arguments"] += fn["arguments"]

    def message(self) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": "".join(self.text) or None}
        if self.reasoning:
            msg["reasoning_content"] = "".join(self.reasoning)
        if self.refusal:
            msg["refusal"] = "".join(self.refusal)
        if self.calls:
            msg["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        return msg

    def call_indexes(self) -> dict[int, str]:
        return {i: c["function"]["name"] for i, c in self.calls.items()}


#: delta type -> the block field its text is appended to
_TEXT_DELTAS = {"text_delta": "text", "thinking_delta": "thinking", "signature_delta": "signature"}


class AnthropicAssembler:
    """Messages stream events -> the message's content blocks, stop reason and usage."""

    def __init__(self) -> None:
        self.message: dict[str, Any] = {}
        self.blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}
        self.stop_reason: str | None = None
        self.usage: dict[str, Any] = {}
        self.error: Any = None

    def add(self, event: str | None, obj: Any) -> None:
        if not isinstance(obj, dict):
            return
        kind = obj.get("type", event)
        if kind == "error":
            self.error = obj.get("error", obj)
        elif kind == "message_start":
            self.message = _dict(obj.get("message"))
            self.usage.update(_dict(self.message.get("usage")))
        elif kind == "content_block_start":
            idx = int(obj.get("index", 0))
            self.blocks[idx] = dict(_dict(obj.get("content_block")))
            if self.blocks[idx].get("type") in ("tool_use", "server_tool_use"):
                self._json[idx] = []
        elif kind == "content_block_delta":
            self._add_delta(int(obj.get("index", 0)), _dict(obj.get("delta")))
        elif kind == "content_block_stop":
            idx = int(obj.get("index", 0))
            parts = self._json.pop(idx, None)
            if parts is not None:
                text = "".join(parts)
                try:
                    self.blocks[idx]["input"] = json.loads(text) if text.strip() else {}
                except ValueError:
                    self.blocks[idx]["input"] = {}
        elif kind == "message_delta":
            delta = _dict(obj.get("delta"))
            if delta.get("stop_reason"):
                self.stop_reason = delta["stop_reason"]
            self.usage.update(_dict(obj.get("usage")))

    def _add_delta(self, idx: int, delta: dict[str, Any]) -> None:
        """A content block's next piece: text, tool input JSON, thinking, signature, citation."""
        block = self.blocks.setdefault(idx, {"type": "text", "text": ""})
        dt = delta.get("type")
        if dt == "input_json_delta":
            self._json.setdefault(idx, []).append(str(delta.get("partial_json", "")))
        elif dt == "citations_delta":
            block.setdefault("citations", []).append(delta.get("citation"))
        elif dt in _TEXT_DELTAS:
            key = _TEXT_DELTAS[dt]
            block[key] = block.get(key, "") + str(delta.get(key, ""))

    def content(self) -> list[dict[str, Any]]:
        out = []
        for i in sorted(self.blocks):
            block = dict(self.blocks[i])
            if block.get("type") == "text" and block.get("citations") is None:
                block.pop("citations", None)
            out.append(block)
        return out


__all__ = ["AnthropicAssembler", "GatewayResponse", "GatewayStream", "OpenAIAssembler"]
