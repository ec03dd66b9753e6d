"""What recovery works on: the parts of an open session (the engine's session context
satisfies :class:`RecoveryContext`)."""

from __future__ import annotations

from typing import Protocol

from .config import ContextConfig
from .messages import Message
from .offload import OffloadStore
from .records import OffloadEntry
from .storage import Store
from .storage.session import SessionStore
from .summarizers.base import Summarizer
from .tokens import TokenCounter
from .units import Units
from .view import HistoryView


class RecoveryContext(Protocol):
    """The parts of an open session recovery works on."""

    config: ContextConfig
    agent_id: str
    share_memory: bool
    summarizer: Summarizer | None
    store: Store
    session: SessionStore
    view: HistoryView
    counter: TokenCounter
    window: int
    units: Units

    def message_at(self, index: int) -> Message: ...

    def stores(self) -> list[OffloadStore]: ...

    def offload_entries(self) -> dict[str, OffloadEntry]: ...


__all__ = ["RecoveryContext"]
