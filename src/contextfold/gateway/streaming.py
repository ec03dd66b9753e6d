"""Streaming pieces: a response that always cleans up, and assemblers that rebuild the
assistant message from a provider's SSE events (to record it and to continue a tool round)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping

from starlette.responses import Response, StreamingResponse

from ..jsontypes import JSON, JSONObject, as_list, as_object

OnClose = Callable[[bool], Awaitable[None]]
#: an ASGI connection scope, and the messages of its ``receive`` and ``send`` (as Starlette
#: types them, with ``object`` for the values)
ASGIScope = MutableMapping[str, object]
ASGIMessage = MutableMapping[str, object]
ASGIReceive = Callable[[], Awaitable[ASGIMessage]]
ASGISend = Callable[[ASGIMessage], Awaitable[None]]


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

    async def __call__(self, scope: ASGIScope, receive: ASGIReceive, send: ASGISend) -> None:
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

    async def __call__(self, scope: ASGIScope, receive: ASGIReceive, send: ASGISend) -> None:
        completed = False
        try:
            await super().__call__(scope, receive, send)
            completed = True
        finally:
            await self._on_close(completed)


def _index(value: JSON) -> int:
    """An event's ``index`` (0 when it has none a number can be read from)."""
    if isinstance(value, int | float | str):
        try:
            return int(value)
        except ValueError:
            return 0
    return 0


class OpenAIAssembler:
    """Chat Completions chunks -> one assistant message dict (choice 0)."""

    def __init__(self) -> None:
        self.id: str | None = None
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.refusal: list[str] = []
        self.calls: dict[int, JSONObject] = {}
        self.finish_reason: str | None = None
        self.usage: JSONObject | None = None
        self.error: JSON = None

    def add(self, obj: JSON) -> None:
        if not isinstance(obj, dict):
            return
        if "error" in obj:
            self.error = obj["error"]
        rid, usage = obj.get("id"), obj.get("usage")
        if self.id is None and isinstance(rid, str):
            self.id = rid
        if isinstance(usage, dict):
            self.usage = usage
        for choice in as_list(obj.get("choices")):
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            reason = choice.get("finish_reason")
            if reason and isinstance(reason, str):
                self.finish_reason = reason
            delta = as_object(choice.get("delta"))
            content = delta.get("content")
            if isinstance(content, str):
                self.text.append(content)
            for key, into in (("reasoning_content", self.reasoning), ("refusal", self.refusal)):
                piece = delta.get(key)
                if isinstance(piece, str):
                    into.append(piece)
            for tc in as_list(delta.get("tool_calls")):
                if isinstance(tc, dict):
                    self._add_call(tc)

    def _add_call(self, tc: JSONObject) -> None:
        """One tool call's chunk: its id, type and name, and the next piece of arguments."""
        slot = self.calls.setdefault(
            _index(tc.get("index", 0)),
            {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
        )
        if tc.get("id"):
            slot["id"] = tc["id"]
        if tc.get("type"):
            slot["type"] = tc["type"]
        fn = as_object(tc.get("function"))
        into = as_object(slot.get("function"))  # the slot's own (made above)
        name, arguments = fn.get("name"), fn.get("arguments")
        if name and isinstance(name, str):
            into["name"] = str(into.get("name", "")) + name
        if isinstance(arguments, str):
            into["arguments"] = str(into.get("arguments", "")) + arguments

    def message(self) -> JSONObject:
        msg: JSONObject = {"role": "assistant", "content": "".join(self.text) or None}
        if self.reasoning:
            msg["reasoning_content"] = "".join(self.reasoning)
        if self.refusal:
            msg["refusal"] = "".join(self.refusal)
        if self.calls:
            msg["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        return msg

    def call_indexes(self) -> dict[int, str]:
        return {i: str(as_object(c.get("function")).get("name", "")) for i, c in self.calls.items()}


#: delta type -> the block field its text is appended to
_TEXT_DELTAS = {"text_delta": "text", "thinking_delta": "thinking", "signature_delta": "signature"}


class AnthropicAssembler:
    """Messages stream events -> the message's content blocks, stop reason and usage."""

    def __init__(self) -> None:
        self.message: JSONObject = {}
        self.blocks: dict[int, JSONObject] = {}
        self._json: dict[int, list[str]] = {}
        self.stop_reason: str | None = None
        self.usage: JSONObject = {}
        self.error: JSON = None

    def add(self, event: str | None, obj: JSON) -> None:
        if not isinstance(obj, dict):
            return
        kind = obj.get("type", event)
        if kind == "error":
            self.error = obj.get("error", obj)
        elif kind == "message_start":
            self.message = as_object(obj.get("message"))
            self.usage.update(as_object(self.message.get("usage")))
        elif kind == "content_block_start":
            idx = _index(obj.get("index", 0))
            self.blocks[idx] = dict(as_object(obj.get("content_block")))
            if self.blocks[idx].get("type") in ("tool_use", "server_tool_use"):
                self._json[idx] = []
        elif kind == "content_block_delta":
            self._add_delta(_index(obj.get("index", 0)), as_object(obj.get("delta")))
        elif kind == "content_block_stop":
            idx = _index(obj.get("index", 0))
            parts = self._json.pop(idx, None)
            if parts is not None:
                text = "".join(parts)
                try:
                    self.blocks[idx]["input"] = json.loads(text) if text.strip() else {}
                except ValueError:
                    self.blocks[idx]["input"] = {}
        elif kind == "message_delta":
            delta = as_object(obj.get("delta"))
            reason = delta.get("stop_reason")
            if reason and isinstance(reason, str):
                self.stop_reason = reason
            self.usage.update(as_object(obj.get("usage")))

    def _add_delta(self, idx: int, delta: JSONObject) -> None:
        """A content block's next piece: text, tool input JSON, thinking, signature, citation."""
        block = self.blocks.setdefault(idx, {"type": "text", "text": ""})
        dt = delta.get("type")
        if dt == "input_json_delta":
            self._json.setdefault(idx, []).append(str(delta.get("partial_json", "")))
        elif dt == "citations_delta":
            citations = block.get("citations")
            if not isinstance(citations, list):
                citations = block["citations"] = []
            citations.append(delta.get("citation"))
        elif isinstance(dt, str) and dt in _TEXT_DELTAS:
            key = _TEXT_DELTAS[dt]
            before = block.get(key, "")
            block[key] = (before if isinstance(before, str) else "") + str(delta.get(key, ""))

    def content(self) -> list[JSON]:
        out: list[JSON] = []
        for i in sorted(self.blocks):
            block = dict(self.blocks[i])
            if block.get("type") == "text" and block.get("citations") is None:
                block.pop("citations", None)
            out.append(block)
        return out


__all__ = ["AnthropicAssembler", "GatewayResponse", "GatewayStream", "OpenAIAssembler"]
