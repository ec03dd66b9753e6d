"""The compaction pipeline: a preset's list of stages run in order, one record per run.

``progressive`` (the default) and ``spec`` run the tier stages; the ``harness`` preset's
summary compaction is the trigger stage. Pass your own list to
``ContextManager(stages=[...])`` to add a stage without editing the library, e.g.
``[*progressive_stages(), MyStage()]`` (see :class:`~contextfold.compaction.stages.Stage`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..core.config import SummaryTriggerConfig
from ..core.records import CompactionRecord, Tier
from .stages import (
    CompactionRun,
    EmergencyStage,
    PinnedStage,
    Stage,
    StaleOffloadStage,
    SummarizeStage,
    TierStage,
    TriggerStage,
    WarnStage,
)

if TYPE_CHECKING:  # the compactor runs its pipeline (same folder)
    from .progressive import ProgressiveCompactor


def progressive_stages() -> list[Stage]:
    """The default tier run: shorten oversized pinned messages, offload stale outputs, decide
    the tier, then Warn (offload), Soft/Full (summarize) or Emergency (truncate), and the
    stale batch again on the changed view."""
    return [
        PinnedStage(),
        StaleOffloadStage(),
        TierStage(),
        WarnStage(),
        SummarizeStage(),
        EmergencyStage(),
        StaleOffloadStage(after_tier=True),
    ]


def spec_stages() -> list[Stage]:
    """The design notes' tier run: the progressive stages without the stale batches."""
    return [PinnedStage(), TierStage(), WarnStage(), SummarizeStage(), EmergencyStage()]


def harness_stages(trigger: SummaryTriggerConfig) -> list[Stage]:
    """The harness preset's summary compaction: one trigger stage."""
    return [TriggerStage(trigger)]


def preset_stages(preset: str) -> list[Stage]:
    """The tier run of a preset (``custom`` and ``harness`` use the progressive one)."""
    return spec_stages() if preset == "spec" else progressive_stages()


class CompactionPipeline:
    """Run ``stages`` in order on a compactor's view; one record per run."""

    def __init__(self, stages: Sequence[Stage]) -> None:
        for stage in stages:
            if not isinstance(stage, Stage):
                from ..errors import ConfigError

                raise ConfigError(f"a compaction stage needs a name and apply(run), got {stage!r}")
        self.stages = list(stages)

    def run(
        self,
        compactor: ProgressiveCompactor,
        *,
        extra_tokens: int = 0,
        force: Tier | None = None,
        reason: str = "",
    ) -> CompactionRecord | None:
        """The record of the run (stored when the view changed), or None when a stage called
        the run off."""
        compactor.measure_fixed(extra_tokens)
        run = CompactionRun(compactor, extra_tokens=extra_tokens, force=force, reason=reason)
        for stage in self.stages:
            stage.apply(run)
            if run.finished:
                break
        if run.skipped:
            return None
        scratch = run.scratch
        changed = bool(scratch.offloaded or scratch.briefed or scratch.summarized or scratch.errors)
        persist = run.persist if run.persist is not None else changed
        return compactor._record(scratch, run.view_tokens(), extra_tokens, persist=persist)


__all__ = [
    "CompactionPipeline",
    "harness_stages",
    "preset_stages",
    "progressive_stages",
    "spec_stages",
]
