"""The trigger stage: once a message or token trigger fires, everything but the kept tail is
summarized (the harness preset's summary compaction)."""

from __future__ import annotations

from dataclasses import replace

from ...core.config import SummaryTriggerConfig
from ...core.records import Tier
from ..common import effective_trigger_tokens
from .base import Changes, CompactionRun


def kept_tail(run: CompactionRun, trig: SummaryTriggerConfig) -> int:
    """Where the kept tail starts: ``keep_tokens`` or ``keep_messages`` at a legal cut."""
    v = run.compactor.view
    n = len(v)
    if trig.keep_tokens:
        b = v.legal_cut_at_or_before(n - 1, v.boundary) if n > v.boundary else n
        while b > v.boundary:
            prev = v.legal_cut_at_or_before(b - 1, v.boundary)
            if prev == b or v.range_tokens(prev, n) > trig.keep_tokens:
                break
            b = prev
        return b
    return v.tail_start(trig.keep_messages)  # messages of the view: retracted ones do not count


class TriggerStage:
    name = "trigger"

    def __init__(self, trigger: SummaryTriggerConfig) -> None:
        self.trigger = trigger

    def _why(self, run: CompactionRun) -> str:
        trig = self.trigger
        count = run.scratch.msgs_before
        tokens = run.scratch.tokens_before
        trigger_tokens = effective_trigger_tokens(trig, run.compactor.window)
        if trig.trigger_messages and count >= trig.trigger_messages:
            return f"trigger: {count} messages >= triggerMessages {trig.trigger_messages}"
        if trigger_tokens and tokens >= trigger_tokens:
            return f"trigger: {tokens} tokens >= triggerTokens {trigger_tokens}"
        return ""

    def apply(self, run: CompactionRun) -> Changes:
        comp, trig = run.compactor, self.trigger
        v = comp.view
        why = self._why(run)
        tail = kept_tail(run, trig) if why else v.boundary
        if tail <= v.boundary:
            run.skip()
            return Changes()
        mark = run.mark()
        run.tier = Tier.FULL
        run.strategy = "summary"
        run.reason = why
        hook = comp.before_summarize
        if not trig.flush_before_compact:
            comp.before_summarize = None
        try:
            if trig.offload_before_compact:
                policy = replace(comp.compaction_policy, threshold=trig.offload_chars)
                comp._offload_range(run.scratch, v.boundary, tail, policy)
            comp._summarize(run.scratch, v.boundary, tail, use_llm=True)
        finally:
            comp.before_summarize = hook
        comp._ensure_fits(run.scratch, run.extra_tokens)
        run.finish(persist=True)
        return run.changes_since(mark)


__all__ = ["TriggerStage", "kept_tail"]
