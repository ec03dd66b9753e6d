"""What recovery works on: the parts of an open session (the engine's session context
satisfies :class:`RecoveryContext`)."""

from __future__ import annotations

from typing import Protocol

from ..compaction.offload import OffloadStore
from ..compaction.summarizers.base import Summarizer
from ..core.config import ContextConfig
from ..core.messages import Message
from ..core.records import OffloadEntry
from ..core.tokens import TokenCounter
from ..core.units import Units
from ..core.view import HistoryView
from ..storage import Store
from ..storage.session import SessionStore


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
