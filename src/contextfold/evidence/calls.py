"""The calls of a session in order, and which calls a file path names (pure data).

Ordinals in recall questions ("the second run", 第二次) count over :class:`CallLog`, which holds
every tool call of the session, also those whose output is still in the view.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .fields import CallFields, call_key, path_suffixes


def path_strength(query_paths: Sequence[str], pointer_paths: Iterable[str]) -> int:
    """Components in common when one path is a suffix of the other (0: no match)."""
    best = 0
    for pp in pointer_paths:
        sufs = path_suffixes(pp)
        if not sufs:
            continue
        full = sufs[0]
        for qp in query_paths:
            if qp in sufs:
                best = max(best, qp.count("/") + 1)
            elif full in path_suffixes(qp):
                best = max(best, full.count("/") + 1)
    return best


class CallLog:
    """Every tool call of a session in order (also those whose output is still in view):
    what ordinals count over. Grown with :meth:`add`; positions are 0-based call numbers."""

    def __init__(self) -> None:
        self.positions: dict[str, int] = {}
        self._keys: dict[str, list[int]] = {}
        self._reads: list[tuple[int, tuple[str, ...]]] = []
        self.edits: list[int] = []

    def __len__(self) -> int:
        return len(self.positions)

    def add(self, call_id: str, fields: CallFields) -> None:
        if call_id in self.positions:
            return
        pos = len(self.positions)
        self.positions[call_id] = pos
        self._keys.setdefault("call:" + call_key(fields.tool, fields.command, fields.shell), [])
        self._keys["call:" + call_key(fields.tool, fields.command, fields.shell)].append(pos)
        if fields.action == "read":
            self._reads.append((pos, fields.paths))
        elif fields.action in ("edit", "write"):
            self.edits.append(pos)

    def runs(self, key: str) -> list[int]:
        """Positions of the calls under ``key`` (``call:...`` or ``read:<path>``)."""
        if key.startswith("read:"):
            qp = key[5:]
            return [pos for pos, paths in self._reads if path_strength([qp], paths)]
        return list(self._keys.get(key, ()))


__all__ = ["CallLog", "path_strength"]
