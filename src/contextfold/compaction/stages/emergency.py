"""The emergency stage: truncation without an LLM (see :mod:`contextfold.compaction.emergency`)."""

from __future__ import annotations

from ...core import telemetry
from ...core.records import Tier
from .base import Changes, CompactionRun


class EmergencyStage:
    name = "emergency"

    def apply(self, run: CompactionRun) -> Changes:
        if run.tier is not Tier.EMERGENCY:
            return Changes()
        mark = run.mark()
        run.errors.append("emergency fallback: forced truncation")
        with telemetry.span("contextfold.compaction.truncate", {"contextfold.tier": "emergency"}):
            run.compactor._truncate(run.scratch, run.extra_tokens)
        return run.changes_since(mark)


__all__ = ["EmergencyStage"]
