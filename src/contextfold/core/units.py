"""The lock and units of work a session's owner hands to the parts working on it.

The :class:`~contextfold.ContextManager` owns one re-entrant lock per session and opens each
atomic unit of work (stored entirely or not at all); the engine, the recovery hooks and the
memory tools receive them through :class:`Units`, never the manager itself.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol


class Units(Protocol):
    """The session lock and atomic units of work of a session's owner."""

    @property
    def lock(self) -> AbstractContextManager[bool]:
        """The session's re-entrant lock."""
        ...

    def unit(self) -> AbstractContextManager[None]:
        """One atomic unit: stored entirely or not at all (then the session is reloaded)."""
        ...

    def reload_after_failure(self) -> None:
        """Reload what is stored after a failure that left the in-memory state changed."""
        ...


__all__ = ["Units"]
