"""JSON for the request path: orjson when installed (the gateway extra brings it; it parses
and writes the resent histories several times faster), the standard library otherwise or for
what orjson refuses or would change (NaN, lone surrogates, integers beyond 64 bits)."""

from __future__ import annotations

import json
import re
from typing import Any

_orjson: Any
try:  # optional: part of the gateway extra
    import orjson as _orjson
except ImportError:  # pragma: no cover - exercised only without orjson
    _orjson = None


#: orjson reads integers beyond 64 bits as floats; a run of 20 digits anywhere (even inside a
#: string: harmless, only slower) sends the text to the standard library, which keeps them exact
_LONG_DIGITS = re.compile(rb"[0-9]{20}")


def loads(data: bytes | str) -> Any:
    """Parse JSON (raises ValueError on bad input, as :func:`json.loads`)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if _orjson is not None and _LONG_DIGITS.search(raw) is None:
        try:
            return _orjson.loads(raw)
        except _orjson.JSONDecodeError:
            pass  # the standard library accepts a few more things (NaN); it decides
    return json.loads(data)


def dumps(value: Any) -> bytes:
    """UTF-8 JSON, non-ASCII kept as is."""
    if _orjson is not None:
        try:
            out: bytes = _orjson.dumps(value)
            return out
        except TypeError:
            pass
    return json.dumps(value, ensure_ascii=False).encode("utf-8")


def dumps_sorted(value: Any) -> bytes:
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
