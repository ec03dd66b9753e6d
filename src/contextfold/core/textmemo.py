"""Results of pure functions of long texts, remembered by content.

An agent's history repeats itself: the same file read twice, the same test run after every
edit, a tool result seen when it arrives, again as evidence when it leaves the view, and again
in the summary. Classifying, anchoring and counting such a text costs regular-expression scans
over all of it; :func:`by_text` remembers the result under the text itself (a dict keyed by
the string: the lookup hashes it once, a string caches its hash). Only for texts of at least
``min_chars`` (shorter ones are cheaper to redo than to hold), bounded by the characters held,
forgotten whole when full. The wrapped function must be pure and return an immutable value.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Hashable
from typing import ParamSpec, TypeVar, cast

P = ParamSpec("P")
R = TypeVar("R")

#: characters every memo together may hold (the texts are shared with the messages that hold
#: them, so this bounds what a memo keeps alive after those are gone)
MAX_CHARS = 32_000_000
_lock = threading.Lock()
_memos: list[_Memo] = []


class _Memo:
    __slots__ = ("chars", "table")

    def __init__(self) -> None:
        self.table: dict[tuple[Hashable, ...], object] = {}
        self.chars = 0


def _held() -> int:
    return sum(m.chars for m in _memos)


def clear() -> None:
    """Forget every remembered result."""
    with _lock:
        for m in _memos:
            m.table.clear()
            m.chars = 0


def by_text(min_chars: int = 256) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Remember ``fn(text, *rest)`` for texts of at least ``min_chars`` characters (``rest``
    hashable, no keyword arguments; anything else is computed as usual)."""

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        memo = _Memo()
        with _lock:
            _memos.append(memo)

        @functools.wraps(fn)
        def memoized(*args: P.args, **kwargs: P.kwargs) -> R:
            text = args[0] if args else None
            if kwargs or type(text) is not str or len(text) < min_chars:
                return fn(*args, **kwargs)
            try:
                found = memo.table.get(args)
            except TypeError:  # an unhashable argument
                return fn(*args, **kwargs)
            if found is not None or args in memo.table:
                return cast(R, found)
            value = fn(*args, **kwargs)
            size = len(text)
            with _lock:
                if _held() + size > MAX_CHARS:
                    for m in _memos:
                        m.table.clear()
                        m.chars = 0
                if size <= MAX_CHARS // 8:
                    memo.table[args] = value
                    memo.chars += size
            return value

        return memoized

    return wrap


__all__ = ["MAX_CHARS", "by_text", "clear"]
