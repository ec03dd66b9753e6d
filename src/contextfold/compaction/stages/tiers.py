"""The tier stages: decide the tier from the window ratio, and the Warn tier's offload.

:class:`TierStage` picks None / Warn / Soft / Full / Emergency (or the forced tier) and ends
a run that needs nothing; :class:`WarnStage` offloads large tool outputs of the head and
escalates to Soft when offloading alone would leave the view near the warn line again.
"""

from __future__ import annotations

from ...core import telemetry
from ...core.records import Tier
from .base import Changes, CompactionRun


def tier_reason(run: CompactionRun, tier: Tier, tokens: int) -> str:
    comp = run.compactor
    ratio = tokens / comp.window if comp.window else 0.0
    text = f"view at {ratio:.0%} of the {comp.window}-token window"
    if comp.fixed:
        movable = max(0, tokens - comp.fixed) / comp.working_window
        text += (
            f" (messages at {movable:.0%} of the {comp.working_window} tokens left after "
            f"the {comp.fixed}-token fixed prefix)"
        )
    return f"{text} -> {tier.label}"


class TierStage:
    name = "tier"

    def apply(self, run: CompactionRun) -> Changes:
        comp = run.compactor
        before = run.view_tokens()
        tier = run.force or comp.tier_for(before)
        # outputs the stages before moved out or shortened (stale batches, a stage of the
        # caller's): a run that did only that is a Warn run
        moved = len(run.offloaded) - run.shortened + run.scratch.briefed
        run.stale_only = tier is Tier.NONE and moved > 0
        if run.stale_only:
            tier = Tier.WARN
            first = run.scratch.tokens_before
            what = (
                f"{run.stale} stale tool outputs"
                if run.stale == moved
                else (f"{moved} tool outputs")
            )
            run.reason = run.reason or (
                f"{what} offloaded (view at {first / comp.window:.0%} "
                f"of the {comp.window}-token window)"
            )
        run.tier = tier
        run.reason = run.reason or tier_reason(run, tier, before)
        if tier is Tier.NONE:
            run.finish(persist=bool(run.shortened))
        return Changes()


class WarnStage:
    name = "warn"

    def apply(self, run: CompactionRun) -> Changes:
        if run.tier is not Tier.WARN:
            return Changes()
        comp = run.compactor
        mark = run.mark()
        if not run.stale_only:
            with telemetry.span("contextfold.compaction.offload", {"contextfold.tier": "warn"}):
                v = comp.view
                tail = v.tail_start(comp.cfg.min_tail_messages)
                comp._offload_range(run.scratch, v.boundary, tail, comp.compaction_policy)
        if not run.forced and comp.cfg.warn_escalates and comp._warn_falls_short(run.extra_tokens):
            # the view would be back at the warn line within a few turns: summarize now
            # rather than rewrite it again and again (each rewrite is a cache miss)
            run.notes.append(
                "offloading alone left the view above the middle of target and warn: Soft"
            )
            run.tier = Tier.SOFT
            run.stale_only = False
        return run.changes_since(mark)


__all__ = ["TierStage", "WarnStage", "tier_reason"]
