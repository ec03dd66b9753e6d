"""The parts of the open session read (and set) on the facade as attributes (a mixin of
:class:`~contextfold.ContextManager`): each one is the :class:`SessionContext`'s attribute of
the same name, so a reload (which rebuilds the context in place) is seen at once."""

from __future__ import annotations

from typing import Generic, TypeVar, overload

from ..compaction.offload import OffloadStore
from ..compaction.progressive import ProgressiveCompactor
from ..compaction.summarizers.base import Summarizer
from ..core.config import ContextConfig
from ..core.records import CompactionRecord, StoreRecordStore
from ..core.tokens import Calibration, TokenCounter
from ..core.view import HistoryView
from ..providers.limits import LearnedWindow
from ..recovery.hooks import Recovery
from ..recovery.sessions.log import SessionLog
from ..storage import Store
from ..storage.session import SessionStore
from .context import SessionContext
from .state import SessionState

V = TypeVar("V")


class _Part(Generic[V]):
    """A part of the open session, read (and set) on its owner as an attribute."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> _Part[V]: ...
    @overload
    def __get__(self, obj: SessionParts, owner: type) -> V: ...
    def __get__(self, obj: SessionParts | None, owner: type) -> _Part[V] | V:
        if obj is None:
            return self
        value: V = getattr(obj._ctx, self.name)
        return value

    def __set__(self, obj: SessionParts, value: V) -> None:
        setattr(obj._ctx, self.name, value)


class SessionParts:
    """The open session's parts (``_ctx``'s) as attributes of the facade."""

    _ctx: SessionContext
    config: _Part[ContextConfig] = _Part()
    session_id: _Part[str] = _Part()
    agent_id: _Part[str] = _Part()
    store: _Part[Store] = _Part()
    counter: _Part[TokenCounter] = _Part()
    summarizer: _Part[Summarizer | None] = _Part()
    share_memory: _Part[bool] = _Part()
    configured_window: _Part[int] = _Part()
    #: The window in use: ``context_window``, or lower once a provider's overflow error stated
    #: a smaller one (see ``learned_window``).
    window: _Part[int] = _Part()
    learned_window: _Part[LearnedWindow | None] = _Part()
    session: _Part[SessionStore] = _Part()
    log: _Part[SessionLog] = _Part()
    calibration: _Part[Calibration] = _Part()
    offload: _Part[OffloadStore] = _Part()
    eviction_store: _Part[OffloadStore] = _Part()
    record_store: _Part[StoreRecordStore] = _Part()
    view: _Part[HistoryView] = _Part()
    compactor: _Part[ProgressiveCompactor] = _Part()
    recovery: _Part[Recovery] = _Part()
    session_state: _Part[SessionState] = _Part()
    #: The last compaction that changed the view (None until one did).
    last_record: _Part[CompactionRecord | None] = _Part()
    #: The record of the last prepare()/compact(), including "no compaction needed".
    last_prepare: _Part[CompactionRecord | None] = _Part()


__all__ = ["SessionParts"]
