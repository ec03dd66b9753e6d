"""Server-sent events: split an upstream byte stream into events without re-encoding them.

Each :class:`SSEEvent` keeps the exact bytes it arrived as (its lines and the blank line that
ends it), so an event the gateway does not need to change is forwarded byte for byte.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ..jsontypes import JSON, JSONLike

_SEPARATOR = re.compile(rb"\r\n\r\n|\n\n|\r\r")
_LINE = re.compile(rb"\r\n|\n|\r")


@dataclass(frozen=True, slots=True)
class SSEEvent:
    raw: bytes
    event: str | None
    data: str | None

    def json(self) -> JSON:
        """The data parsed as JSON; None when there is none or it is not JSON ("[DONE]")."""
        if self.data is None:
            return None
        try:
            parsed: JSON = json.loads(self.data)
        except ValueError:
            return None
        return parsed


def _parse(raw: bytes) -> SSEEvent:
    event: str | None = None
    data: list[str] = []
    for line in _LINE.split(raw):
        if not line or line.startswith(b":"):
            continue
        name, _, value = line.partition(b":")
        if value.startswith(b" "):
            value = value[1:]
        text = value.decode("utf-8", "replace")
        if name == b"event":
            event = text
        elif name == b"data":
            data.append(text)
    return SSEEvent(raw=raw, event=event, data="\n".join(data) if data else None)


class SSEParser:
    """Incremental parser: ``feed(chunk)`` returns the events completed by that chunk."""

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        self._buf += chunk
        out: list[SSEEvent] = []
        start = 0
        while True:
            m = _SEPARATOR.search(self._buf, start)
            if m is None:
                break
            # "\r\n\r\n" split across chunks would otherwise match "\r\r" or "\n\n" early
            if m.group() == b"\r\r" and m.end() == len(self._buf):
                break
            out.append(_parse(self._buf[start : m.end()]))
            start = m.end()
        self._buf = self._buf[start:]
        return out

    def flush(self) -> list[SSEEvent]:
        """Whatever is left when the stream ends (an event without its blank line)."""
        rest, self._buf = self._buf, b""
        if not rest.strip():
            return []
        return [_parse(rest)]


def encode(data: JSONLike, event: str | None = None) -> bytes:
    """One event as bytes (``data`` is dumped as compact JSON unless it is a string)."""
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    head = f"event: {event}\n" if event is not None else ""
    return f"{head}data: {text}\n\n".encode()


__all__ = ["SSEEvent", "SSEParser", "encode"]
