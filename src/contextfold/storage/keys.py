"""Exact lookup keys in memory: the in-memory backend's key index, and the shape every backend
answers :meth:`~.base.Store.lookup` in (pairs sorted by key, then doc id)."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from .base import prefix_end


class KeyTable:
    """``(key, doc_id)`` pairs of one namespace and session, sorted for prefix lookups."""

    def __init__(self, pairs: Iterable[tuple[str, str]] = ()) -> None:
        self._pairs: list[tuple[str, str]] = sorted(set(pairs))
        self._docs: dict[str, set[str]] = {}
        for key, doc in self._pairs:
            self._docs.setdefault(doc, set()).add(key)

    def __len__(self) -> int:
        return len(self._pairs)

    def add(self, doc_id: str, keys: Iterable[str]) -> None:
        have = self._docs.setdefault(doc_id, set())
        for key in keys:
            if key not in have:
                have.add(key)
                bisect.insort(self._pairs, (key, doc_id))

    def drop(self, doc_id: str) -> None:
        """Forget every key of ``doc_id``."""
        for key in self._docs.pop(doc_id, ()):
            i = bisect.bisect_left(self._pairs, (key, doc_id))
            if i < len(self._pairs) and self._pairs[i] == (key, doc_id):
                del self._pairs[i]

    def lookup(
        self, keys: Sequence[str] = (), prefixes: Sequence[str] = ()
    ) -> list[tuple[str, str]]:
        found: set[tuple[str, str]] = set()
        pairs = self._pairs
        for key in set(keys):
            i = bisect.bisect_left(pairs, (key, ""))
            while i < len(pairs) and pairs[i][0] == key:
                found.add(pairs[i])
                i += 1
        for prefix in set(prefixes):
            end = prefix_end(prefix)
            i = bisect.bisect_left(pairs, (prefix, ""))
            while i < len(pairs) and (end is None or pairs[i][0] < end):
                found.add(pairs[i])
                i += 1
        return sorted(found)


__all__ = ["KeyTable"]
