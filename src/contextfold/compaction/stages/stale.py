"""The stale offload stage: tool outputs the agent moved past leave the view in one batch
when that pays for its cache miss (see :mod:`contextfold.compaction.stale`)."""

from __future__ import annotations

from ..stale import offload_stale
from .base import Changes, CompactionRun


class StaleOffloadStage:
    """Before the tier is decided; with ``after_tier=True``, again once a tier changed the
    view (so the next call with nothing new returns the same view: one cache miss)."""

    def __init__(self, *, after_tier: bool = False) -> None:
        self.after_tier = after_tier
        self.name = "stale_after_tier" if after_tier else "stale"

    def apply(self, run: CompactionRun) -> Changes:
        if run.forced or (self.after_tier and run.stale_only):
            return Changes()
        mark = run.mark()
        count = offload_stale(run.compactor, run.scratch)
        if not self.after_tier:
            run.stale += count
        return run.changes_since(mark)


__all__ = ["StaleOffloadStage"]
