"""Shared by the evidence tests: index messages as one compaction would, with no summary."""

from __future__ import annotations

from collections.abc import Sequence

from contextfold.core.messages import Message
from contextfold.evidence.model import CompactBlock
from contextfold.evidence.store import EvidenceStore


def index_block(
    store: EvidenceStore,
    messages: Sequence[Message],
    *,
    known_calls: Sequence[Message] = (),
    tier: str = "t",
    strategy: str = "s",
) -> CompactBlock:
    """One compaction's block of ``messages`` (no offloads, no summary items)."""
    return store.index_compaction(
        messages=messages,
        offloaded={},
        summary_items_source=[],
        token_before=0,
        token_after=0,
        boundary_uuid=None,
        natural_summary="",
        tier=tier,
        strategy=strategy,
        known_calls=known_calls,
    )
