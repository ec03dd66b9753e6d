"""JSON shapes, typed without ``Any``.

``JSON`` is what :func:`json.loads` returns and what a store, a wire format or a log line holds.
Reading a field of it means narrowing first (``isinstance(value, dict)``); the helpers below do
the common cases. Inputs that are only passed on or encoded take ``JSONLike`` (read-only and
covariant, so a ``dict[str, str]`` is accepted).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

#: a JSON value as decoded: None, bool, int, float, str, a list or an object
JSON: TypeAlias = bool | int | float | str | list["JSON"] | dict[str, "JSON"] | None
#: a decoded JSON object
JSONObject: TypeAlias = dict[str, JSON]
#: any value that encodes as JSON, read-only (accepts ``dict[str, str]``, tuples ...)
JSONLike: TypeAlias = (
    bool | int | float | str | Sequence["JSONLike"] | Mapping[str, "JSONLike"] | None
)


def as_object(value: object) -> JSONObject:
    """``value`` if it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def as_list(value: object) -> list[JSON]:
    """``value`` if it is a JSON array, else an empty one."""
    return value if isinstance(value, list) else []
