"""What the view holds right after a compaction, recorded compactly (a ``view`` event in the
same unit as the compaction): which history messages it sends as they are, which in another
form (an offload or eviction placeholder, a shortened message), and where the summary block
stands. Between two compactions the view is that layout plus every message appended since,
so the view of any model call can be shown as it was sent, not guessed again."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..jsontypes import JSONLike

if TYPE_CHECKING:
    from .view import HistoryView

#: a history message sent as it is / in another form; the compaction's summary block
KEPT, CHANGED, SUMMARY = "k", "c", "s"
VIEW_EVENT = "view"


def layout(view: HistoryView) -> dict[str, JSONLike]:
    """The view's layout: ``items`` as ``[code, position]`` runs (``[KEPT, start, end]`` for
    consecutive kept positions, ``[CHANGED, position]``, ``[SUMMARY]``) and the history
    length it was taken at."""
    items: list[list[str | int]] = []
    for m in view.view_messages():
        pos = view.uuids.get(m.uuid) if m.uuid else None
        if pos is None or pos >= len(view.history):
            items.append([SUMMARY])
        elif view.history[pos] is m:
            last = items[-1] if items else None
            if last is not None and last[0] == KEPT and last[2] == pos:
                last[2] = pos + 1
            else:
                items.append([KEPT, pos, pos + 1])
        else:
            items.append([CHANGED, pos])
    return {"items": items, "history": len(view.history)}


def positions(recorded: dict[str, object]) -> tuple[dict[int, str], bool, int]:
    """A layout read back: history position -> KEPT or CHANGED, whether the summary block was
    in it, and the history length it was taken at. Raises ValueError when malformed."""
    out: dict[int, str] = {}
    summary = False
    items = recorded.get("items")
    length = recorded.get("history")
    if not isinstance(items, list) or type(length) is not int:
        raise ValueError("not a view layout")
    for item in items:
        if not isinstance(item, list) or not item:
            raise ValueError("not a view layout item")
        if item[0] == SUMMARY:
            summary = True
        elif item[0] == KEPT and len(item) == 3:
            out.update((p, KEPT) for p in range(int(item[1]), int(item[2])))
        elif item[0] == CHANGED and len(item) == 2:
            out[int(item[1])] = CHANGED
        else:
            raise ValueError(f"unknown view layout item {item!r}")
    return out, summary, length


__all__ = ["CHANGED", "KEPT", "SUMMARY", "VIEW_EVENT", "layout", "positions"]
