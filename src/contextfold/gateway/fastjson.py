"""JSON for the request path: orjson writes the bodies sent upstream several times faster
than the standard library (the gateway extra brings it); the standard library reads, and
writes what orjson refuses (integers beyond 64 bits, lone surrogates, non-string keys)."""

from __future__ import annotations

import json
from typing import Any

from ..jsontypes import JSON, JSONLike

_orjson: Any
try:  # optional: part of the gateway extra
    import orjson as _orjson
except ImportError:  # pragma: no cover - exercised only without orjson
    _orjson = None


def loads(data: bytes | str) -> JSON:
    """Parse JSON (raises ValueError on bad input). The standard library: orjson would read
    integers beyond 64 bits as floats, and ruling those out costs more than it saves."""
    parsed: JSON = json.loads(data)
    return parsed


def dumps(value: JSONLike) -> bytes:
    """UTF-8 JSON, non-ASCII kept as is; text UTF-8 cannot carry (a lone surrogate, which
    the gateway refuses from clients but an upstream may send) is written as its ``\\u``
    escape, so this never raises UnicodeEncodeError and the JSON means what it meant."""
    if _orjson is not None:
        try:
            out: bytes = _orjson.dumps(value)
            return out
        except TypeError:
            pass
    text = json.dumps(value, ensure_ascii=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value).encode("ascii")


def dumps_sorted(value: object) -> bytes:
    """Canonical UTF-8 JSON (keys sorted), for keys and fingerprints."""
    if _orjson is not None:
        try:
            canonical: bytes = _orjson.dumps(value, option=_orjson.OPT_SORT_KEYS)
            return canonical
        except TypeError:
            pass
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str).encode(
        "utf-8", "surrogatepass"
    )


__all__ = ["dumps", "dumps_sorted", "loads"]
