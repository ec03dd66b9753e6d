"""JSON shapes, typed without ``Any``.

``JSON`` is what :func:`json.loads` returns and what a store, a wire format or a log line holds.
Reading a field of it means narrowing first (``isinstance(value, dict)``); the helpers below do
the common cases. Inputs that are only passed on or encoded take ``JSONLike`` (read-only and
covariant, so a ``dict[str, str]`` is accepted).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, ForwardRef, SupportsIndex, SupportsInt, TypeAlias, Union

if TYPE_CHECKING:
    #: a JSON value as decoded: None, bool, int, float, str, a list or an object
    JSON: TypeAlias = bool | int | float | str | list["JSON"] | dict[str, "JSON"] | None
    #: any value that encodes as JSON, read-only (accepts ``dict[str, str]``, tuples ...)
    JSONLike: TypeAlias = (
        bool | int | float | str | Sequence["JSONLike"] | Mapping[str, "JSONLike"] | None
    )
else:
    # The same aliases at run time, their recursive references bound to this module: a
    # signature naming them (or JSONObject) resolves with ``typing.get_type_hints`` in any
    # module, without that module importing the names the aliases refer to.
    _JSON = ForwardRef("JSON", module=__name__)
    _JSON_LIKE = ForwardRef("JSONLike", module=__name__)
    JSON = Union[bool, int, float, str, list[_JSON], dict[str, _JSON], None]  # noqa: UP007
    JSONLike = Union[  # noqa: UP007
        bool, int, float, str, Sequence[_JSON_LIKE], Mapping[str, _JSON_LIKE], None
    ]

#: a decoded JSON object
JSONObject: TypeAlias = dict[str, JSON]


def as_object(value: object) -> JSONObject:
    """``value`` if it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def as_list(value: object) -> list[JSON]:
    """``value`` if it is a JSON array, else an empty one."""
    return value if isinstance(value, list) else []


def need_object(value: object, what: str = "value") -> JSONObject:
    """``value`` if it is a JSON object; TypeError naming ``what`` if not."""
    if not isinstance(value, dict):
        raise TypeError(f"{what} is not an object")
    return value


def to_int(value: object) -> int:
    """``int(value)`` for a decoded value (JSON, or a database column): a number or numeric
    text (ValueError if the text is not a number); TypeError for anything else (a list, an
    object, null), as ``int()`` raises."""
    if isinstance(value, int):  # (the common case first: the checks below are slower)
        return int(value)
    if isinstance(value, float | str | SupportsInt | SupportsIndex):  # (a Decimal column)
        return int(value)
    raise TypeError(
        f"int() argument must be a string or a real number, not {type(value).__name__!r}"
    )


def to_json(value: JSONLike) -> JSON:
    """A ``JSONLike`` value as decoded JSON: mappings copied to dicts, sequences (tuples
    included) to lists, recursively; scalars as they are."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    return [to_json(item) for item in value]
