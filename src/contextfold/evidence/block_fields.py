"""What :meth:`.store.EvidenceStore.index_compaction` takes: the keyword arguments of
:meth:`.store.EvidenceStore.build_compaction_block`, as one typed shape."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, TypedDict

from ..core.messages import Message
from .store_restore import OffloadInfo


class _Required(TypedDict):
    messages: Sequence[Message]
    offloaded: Mapping[str, OffloadInfo]
    summary_items_source: Sequence[tuple[str, str]]
    token_before: int
    token_after: int
    boundary_uuid: str | None
    natural_summary: str
    tier: str
    strategy: str


class CompactionFields(_Required, total=False):
    """The range of messages that left the view and what its compaction made of it."""

    source_scope: Literal["main_agent", "sub_agent"]
    agent_run_id: str | None
    parent_message_uuid: str | None
    known_calls: Sequence[Message]


__all__ = ["CompactionFields"]
