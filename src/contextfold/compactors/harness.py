"""Seed 002's strategies on the same view: trigger-based summary compaction (2.1) and
overflow recovery (2.4). They reuse the progressive compactor's offload and summarize steps."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

from ..config import SummaryTriggerConfig
from ..records import CompactionRecord, Tier
from .common import EMERGENCY_POLICY, _Run, effective_trigger_tokens

#: After overflow recovery the newest group is shortened only while the view is above this share
#: of the working window.
RECOVERY_RATIO = 0.30

if TYPE_CHECKING:
    from .progressive import ProgressiveCompactor


def run_trigger(
    comp: ProgressiveCompactor, trig: SummaryTriggerConfig, *, extra_tokens: int = 0
) -> CompactionRecord | None:
    """Seed 002 2.1: summarize everything but the kept tail once a trigger fires."""
    v = comp.view
    comp.measure_fixed(extra_tokens)
    count = len(v.view_messages())
    tokens = comp.view_tokens(extra_tokens)
    trigger_tokens = effective_trigger_tokens(trig, comp.window)
    why = ""
    if trig.trigger_messages and count >= trig.trigger_messages:
        why = f"trigger: {count} messages >= triggerMessages {trig.trigger_messages}"
    elif trigger_tokens and tokens >= trigger_tokens:
        why = f"trigger: {tokens} tokens >= triggerTokens {trigger_tokens}"
    if not why:
        return None
    tail = kept_tail(comp, trig)
    if tail <= v.boundary:
        return None
    run = _Run(
        tier=Tier.FULL,
        tokens_before=tokens,
        msgs_before=count,
        started=time.perf_counter(),
        reason=why,
        strategy="summary",
    )
    hook = comp.before_summarize
    if not trig.flush_before_compact:
        comp.before_summarize = None
    try:
        if trig.offload_before_compact:
            policy = replace(comp.compaction_policy, threshold=trig.offload_chars)
            comp._offload_range(run, v.boundary, tail, policy)
        comp._summarize(run, v.boundary, tail, use_llm=True)
    finally:
        comp.before_summarize = hook
    comp._ensure_fits(run, extra_tokens)
    return comp._record(run, comp.view_tokens(extra_tokens), extra_tokens, persist=True)


def kept_tail(comp: ProgressiveCompactor, trig: SummaryTriggerConfig) -> int:
    v = comp.view
    n = len(v)
    if trig.keep_tokens:
        b = v.legal_cut_at_or_before(n - 1, v.boundary) if n > v.boundary else n
        while b > v.boundary:
            prev = v.legal_cut_at_or_before(b - 1, v.boundary)
            if prev == b or v.range_tokens(prev, n) > trig.keep_tokens:
                break
            b = prev
        return b
    return v.legal_cut_at_or_before(n - trig.keep_messages, v.boundary)


def recover_overflow(
    comp: ProgressiveCompactor, *, extra_tokens: int = 0, note: str | None = None
) -> CompactionRecord:
    """Seed 002 2.4: keep only the newest message group verbatim (plus the pinned system
    prompt and user messages) and one compact summary of everything else."""
    v = comp.view
    comp.measure_fixed(extra_tokens)
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
