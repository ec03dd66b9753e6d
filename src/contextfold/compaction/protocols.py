"""The three list-in, list-out compactor interfaces, as Protocols."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ..core.messages import Message
from ..core.records import CompactionRecord


@runtime_checkable
class Compactor(Protocol):
    def compact(self, msgs: Sequence[Message]) -> list[Message]: ...


@runtime_checkable
class ForceCompactor(Compactor, Protocol):
    def compact_force(self, msgs: Sequence[Message]) -> list[Message]: ...


@runtime_checkable
class RecordedCompactor(Compactor, Protocol):
    def compact_with_record(
        self, msgs: Sequence[Message]
    ) -> tuple[list[Message], CompactionRecord]: ...


def apply_compaction(
    comp: Compactor | None, msgs: Sequence[Message]
) -> tuple[list[Message], CompactionRecord | None]:
    """Compact ``msgs`` with the richest interface the compactor offers."""
    if comp is None:
        return list(msgs), None
    if isinstance(comp, RecordedCompactor):
        return comp.compact_with_record(msgs)
    return comp.compact(msgs), None
