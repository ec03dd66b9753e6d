"""The summarize stage: the Soft tier summarizes the oldest half of the head, Full all of it
(growing the range to the target when configured), into the compaction message."""

from __future__ import annotations

from ...core import telemetry
from ...core.records import Tier
from .base import Changes, CompactionRun


def projected(run: CompactionRun, boundary: int) -> int:
    """The view's tokens once everything before ``boundary`` is summarized."""
    return run.compactor._projected(boundary, run.extra_tokens)


def extend_for_target(run: CompactionRun, start: int, end: int, tail: int) -> int:
    """Grow the summarized range (legal cuts only) until the view fits the target."""
    comp = run.compactor
    v = comp.view
    if projected(run, end) <= comp.target_tokens:
        return end
    new_end = end
    while new_end < tail and projected(run, new_end) > comp.target_tokens:
        nxt = v.legal_cut_at_or_after(new_end + 1)
        new_end = min(nxt, tail)
    if new_end != end:
        comp._offload_range(run.scratch, end, new_end, comp.compaction_policy)
        run.notes.append(
            f"summarized {new_end - start} messages instead of {end - start} to leave room "
            f"(target {comp.cfg.target_ratio:.0%} of the window)"
        )
    return new_end


def summarize_tier(run: CompactionRun) -> None:
    comp, extra, scratch = run.compactor, run.extra_tokens, run.scratch
    v, cfg, policy = comp.view, comp.cfg, comp.compaction_policy
    start = v.boundary
    tail = v.tail_start(cfg.min_tail_messages)
    if tail <= start:
        run.notes.append("head is empty: nothing to summarize")
        if cfg.offload_tail:
            run.notes[-1] += "; offloading the tail instead"
            comp._offload_range(scratch, start, len(v), policy)
        comp._ensure_fits(scratch, extra)
        return
    end = tail
    if run.tier is Tier.SOFT:
        mid = v.legal_cut_at_or_before(start + (tail - start) // 2, start)
        end = mid if mid > start else tail
    comp._offload_range(scratch, start, end, policy)
    if cfg.extend_to_target:
        end = extend_for_target(run, start, end, tail)
        if end > start and projected(run, end) >= run.view_tokens():
            # the summary would take about as much as it replaces: wait for a longer head
            run.notes.append("summarizing the head would not make the view smaller: skipped")
            end = start
    if end > start:
        comp._summarize(scratch, start, end, use_llm=True)
    if cfg.offload_tail and run.view_tokens() > comp.target_tokens:
        comp._offload_range(scratch, v.boundary, len(v), policy)
    comp._ensure_fits(scratch, extra)


class SummarizeStage:
    name = "summarize"

    def apply(self, run: CompactionRun) -> Changes:
        if run.tier not in (Tier.SOFT, Tier.FULL):
            return Changes()
        mark = run.mark()
        attrs = {"contextfold.tier": run.tier.value}
        with telemetry.span("contextfold.compaction.summarize", attrs):
            summarize_tier(run)
        return run.changes_since(mark)


__all__ = ["SummarizeStage", "extend_for_target", "projected", "summarize_tier"]
