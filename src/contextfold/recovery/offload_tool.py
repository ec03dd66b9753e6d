"""The ``read_offloaded`` agent tool: a page of a tool result that was offloaded to a file.

One handler for every place the tool is offered: a live session (the session's store, then a
custom eviction root) and a whole workspace (``WorkspaceTools``, by session id).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ..compaction.offload import OffloadStore
from ..core.tools import Tool
from ..errors import StorageError, ToolArgumentsError
from ..jsontypes import JSON

READ_OFFLOADED_DESCRIPTION = (
    "Read a tool result that was offloaded to a file to save context. Pass the tool "
    "call id (id) or the path shown in the placeholder; page with offset/limit (lines)."
)

READ_OFFLOADED_PROPERTIES: Mapping[str, JSON] = {
    "id": {"type": "string", "description": "tool call id of the offloaded result"},
    "path": {"type": "string", "description": "path shown in the placeholder"},
    "offset": {"type": "integer", "minimum": 0, "description": "first line (0-based)"},
    "limit": {"type": "integer", "minimum": 1, "description": "lines to return"},
}


def read_offloaded(stores: Sequence[OffloadStore], args: Mapping[str, object]) -> str:
    """The ``read_offloaded`` tool's answer: a page of the first store that holds ``id`` or
    ``path`` (the session's store, then a custom eviction root). Raises ToolArgumentsError."""
    ref = args.get("id") or args.get("path")
    if not isinstance(ref, str) or not ref:
        raise ToolArgumentsError("read_offloaded: give id (tool call id) or path")
    offset, limit = _int(args, "offset", 0), _int(args, "limit", 200)
    first: StorageError | None = None
    for store in stores:
        try:
            return store.read_page(ref, offset=offset, limit=limit)
        except StorageError as exc:
            first = first or exc
    raise ToolArgumentsError(str(first or f"read_offloaded: nothing offloaded for {ref!r}"))


def _int(args: Mapping[str, object], key: str, default: int) -> int:
    value = args.get(key, default)
    if not isinstance(value, int | float | str):
        raise ToolArgumentsError(f"read_offloaded: {key} must be an integer")
    return int(value)


def read_offloaded_tool(stores: Callable[[], Sequence[OffloadStore]]) -> Tool:
    """The ``read_offloaded`` agent tool over the stores ``stores()`` returns at call time."""
    return Tool(
        name="read_offloaded",
        description=READ_OFFLOADED_DESCRIPTION,
        parameters={
            "type": "object",
            "properties": dict(READ_OFFLOADED_PROPERTIES),
            "required": [],
        },
        handler=lambda args: read_offloaded(stores(), args),
    )


__all__ = [
    "READ_OFFLOADED_DESCRIPTION",
    "READ_OFFLOADED_PROPERTIES",
    "read_offloaded",
    "read_offloaded_tool",
]
