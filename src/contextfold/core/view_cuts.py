"""Legal cut points of the history (part of :mod:`contextfold.core.view`).

Tool results must follow their assistant message (only other tool results in between), which
makes every non-tool position a legal cut point: a cut there never separates a call from its
result. Every strategy cuts only at :meth:`CutPoints.legal_cut_at_or_before`.
"""

from __future__ import annotations

from .messages import Message


class CutPoints:
    """The cut-point queries of :class:`~contextfold.core.view.HistoryView` (a mixin: the view's
    state is declared here and set by the view's constructor)."""

    history: list[Message]
    prefix_len: int
    boundary: int
    tool_ids: list[str | None]
    retracted: set[int]
    _open_calls: dict[str, int]
    _call_index: dict[str, int]
    _results: dict[str, int]

    def is_legal_cut(self, index: int) -> bool:
        n = len(self.history)
        if index < self.prefix_len or index > n:
            return False
        if self._open_calls and min(self._open_calls.values()) < index:
            return False  # the results of that call are still to come: keep the call in view
        return index == n or self.history[index].role != "tool"

    def legal_cut_at_or_before(self, index: int, floor: int) -> int:
        """The largest legal cut in [floor, index]; ``floor`` if none."""
        i = min(index, len(self.history))
        while i > floor and not self.is_legal_cut(i):
            i -= 1
        return max(i, floor)

    def legal_cut_at_or_after(self, index: int) -> int:
        i = max(index, self.prefix_len)
        n = len(self.history)
        while i < n and not self.is_legal_cut(i):
            i += 1
        return i

    def tail_start(self, min_tail: int) -> int:
        """Start of the kept tail: at least ``min_tail`` messages of the view (messages the
        client retracted do not count), never splitting a tool pair."""
        i = len(self.history)
        if not self.retracted:
            return self.legal_cut_at_or_before(i - min_tail, self.boundary)
        kept = 0
        while i > self.boundary and kept < min_tail:
            i -= 1
            kept += i not in self.retracted
        return self.legal_cut_at_or_before(i, self.boundary)

    def call_positions(self) -> dict[str, int]:
        """Every tool call id of the history -> its 0-based number in call order (ids are
        unique; a reopened view knows them from the heads, nothing is loaded)."""
        return {c: n for n, c in enumerate(self._call_index)}

    def call_owner(self, call_id: str) -> int | None:
        """History index of the assistant message that issued ``call_id``."""
        return self._call_index.get(call_id)

    def result_index(self, call_id: str) -> int | None:
        """History index of the result of ``call_id``."""
        return self._results.get(call_id)

    def tool_ids_between(self, start: int, end: int) -> list[str]:
        """Tool call ids of the results in history[start:end] (no message is loaded)."""
        return [t for t in self.tool_ids[start:end] if t]

    def has_open_calls(self) -> bool:
        return bool(self._open_calls)
