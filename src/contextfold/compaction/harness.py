"""The harness strategies on the same view: trigger-based summary compaction (run as the
trigger stage, :mod:`.stages.trigger`) and overflow recovery. They reuse the progressive
compactor's offload and summarize steps."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

from ..core.config import SummaryTriggerConfig
from ..core.records import CompactionRecord, Tier
from .common import EMERGENCY_POLICY, _Run

#: After overflow recovery the newest group is shortened only while the view is above this share
#: of the working window.
RECOVERY_RATIO = 0.30

if TYPE_CHECKING:
    from .progressive import ProgressiveCompactor


def run_trigger(
    comp: ProgressiveCompactor, trig: SummaryTriggerConfig, *, extra_tokens: int = 0
) -> CompactionRecord | None:
    """Summarize everything but the kept tail once a trigger fires (the trigger stage);
    None when it does not fire."""
    from .pipeline import CompactionPipeline, harness_stages

    return CompactionPipeline(harness_stages(trig)).run(comp, extra_tokens=extra_tokens)


def _compact_for_window(
    comp: ProgressiveCompactor, extra: int, note: str | None
) -> CompactionRecord | None:
    """The Full compaction for a window an error stated, or None when it does not apply: the
    estimate must agree with the error (the view counts above that window; else it is
    proven low and no margin is to be trusted), the newest messages must fit below the Warn
    line, and the run must change the view. The kept tail stays verbatim (the tail offload is
    off for this run: the newest outputs are what the next question is about)."""
    v = comp.view
    tail = v.tail_start(comp.cfg.min_tail_messages)
    if tail <= v.boundary or comp.view_tokens(extra) <= comp.window:
        return None
    if comp.tier_for(comp._projected(tail, extra)) is not Tier.NONE:
        return None
    cfg = comp.cfg
    reason = f"context overflow reported by the model: compacted for its {comp.window}-token window"
    comp.cfg = replace(cfg, offload_tail=False)
    try:
        record = comp.run(
            extra_tokens=extra, force=Tier.FULL, reason=f"{reason} ({note})" if note else reason
        )
    finally:
        comp.cfg = cfg
    return record if record.changed else None


def recover_overflow(
    comp: ProgressiveCompactor,
    *,
    extra_tokens: int = 0,
    note: str | None = None,
    learned: bool = False,
) -> CompactionRecord:
    """Overflow recovery: keep only the newest message group verbatim (plus the pinned system
    prompt and user messages) and one compact summary of everything else.

    ``learned``: the error stated a window smaller than the one the view was built for, so the
    view was not compacted too little but for a window the model does not have. When a Full
    compaction for the window now known (the head summarized, the newest messages kept
    verbatim) leaves the view below the Warn line, that runs instead: the newest turns (the
    output a question is about) stay in view and the next turns append to it."""
    v = comp.view
    comp.measure_fixed(extra_tokens)
    if learned:
        record = _compact_for_window(comp, extra_tokens, note)
        if record is not None:
            return record
    before = comp.view_tokens(extra_tokens)
    run = _Run(
        tier=Tier.EMERGENCY,
        tokens_before=before,
        msgs_before=len(v.view_messages()),
        started=time.perf_counter(),
        reason="context overflow reported by the model",
        forced=True,
        strategy="overflow_recovery",
    )
    if note:
        run.notes.append(note)
    n = len(v)
    last = v.legal_cut_at_or_before(n - 1, v.boundary) if n > v.boundary else v.boundary
    if last > v.boundary:
        comp._offload_range(run, v.boundary, last, comp.compaction_policy)
        comp._summarize(run, v.boundary, last, use_llm=True)
    # the newest group stays verbatim unless the view is still large: the bar is 30% of the
    # working window (not the tiers' low target, which is about the bill, not about fitting)
    bar = max(comp.target_tokens, comp.fixed + int(RECOVERY_RATIO * comp.working_window))
    if comp.view_tokens(extra_tokens) > bar:
        comp._offload_range(run, v.boundary, n, EMERGENCY_POLICY)
    if comp.view_tokens(extra_tokens) > bar:
        comp._squeeze(run, extra_tokens)
    return comp._record(run, comp.view_tokens(extra_tokens), extra_tokens, persist=True)
