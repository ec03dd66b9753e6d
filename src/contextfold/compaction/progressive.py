"""ProgressiveCompactor: tiered compaction by window ratio.

Tiers None / Warn / Soft / Full / Emergency. Each run works on a :class:`HistoryView`: it
decides the tier (pure, :func:`determine_tier`), then moves the view's boundary and/or swaps
view forms; the history itself never changes. Every stage fails open: an offload write error
keeps the text, a summarizer error falls back to extractive truncation, and each is recorded.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from ..core import telemetry
from ..core.anchors import (
    Anchor,
)
from ..core.config import SummaryTriggerConfig, TierConfig, TruncateArgsConfig
from ..core.messages import Message, new_uuid
from ..core.records import CompactionRecord, OffloadEntry, RecordStore, Tier
from ..core.view import HistoryView
from ..errors import ContextFoldError
from .artifacts import WrittenFiles, message_writes
from .budget import repair_orphaned_tool_pairs
from .common import (
    EMERGENCY_POLICY,
    BeforeSummarize,
    CompactorState,
    IndexRange,
    _now,
    _Run,
    determine_tier,
)
from .emergency import TIGHT_POLICY, squeeze, squeeze_one, truncate
from .harness import recover_overflow, run_trigger
from .measure import Measure
from .offload import (
    COMPACTION_POLICY,
    OffloadPolicy,
    OffloadStore,
    offloadable_text,
    placeholder,
)
from .pinned import apply_pinned, budget_of
from .pipeline import CompactionPipeline, progressive_stages
from .stages import CompactionRun, Stage
from .stale import OWN_TOOLS
from .summarize import offloaded_refs, set_compaction, summarize
from .summarizers.base import Summarizer, SummaryStyle
from .summarizers.extractive import ExtractiveSummarizer
from .summarizers.transcript import truncate_tool_arguments

log = logging.getLogger("contextfold")

__all__ = ["CompactorState", "ProgressiveCompactor", "determine_tier"]


class ProgressiveCompactor(Measure):
    """Tiered compaction over an incremental view (the tier run is a pipeline of stages)."""

    def __init__(
        self,
        *,
        view: HistoryView,
        window: int,
        config: TierConfig,
        session_id: str,
        count_text: Callable[[str], int],
        summarizer: Summarizer | None = None,
        offload: OffloadStore | None = None,
        record_store: RecordStore | None = None,
        truncate_args: TruncateArgsConfig | None = None,
        summary_style: SummaryStyle = "anchors",
        summary_prompt: str | None = None,
        scale: Callable[[int], int] = lambda t: t,
        scale_fixed: Callable[[int], int] | None = None,
        before_summarize: BeforeSummarize | None = None,
        index_range: IndexRange | None = None,
        active_tasks: Callable[[], list[str]] | None = None,
        policies: dict[str, OffloadPolicy] | None = None,
        stages: Sequence[Stage] | None = None,
    ) -> None:
        self.view = view
        self.window = window
        self.cfg = config
        self.session_id = session_id
        self.count_text = count_text
        self.fallback_summarizer = ExtractiveSummarizer()
        self.summarizer: Summarizer = summarizer or self.fallback_summarizer
        self.offload = offload
        self.record_store = record_store
        self.truncate_args = truncate_args
        self.summary_style: SummaryStyle = summary_style
        self.summary_prompt = summary_prompt
        self.scale = scale
        self.scale_fixed = scale_fixed
        self.before_summarize = before_summarize
        self.index_range = index_range
        self.active_tasks = active_tasks
        self.state = CompactorState()
        #: the stages of a tier run, in order (see :mod:`contextfold.compaction.pipeline`)
        self.pipeline = CompactionPipeline(progressive_stages() if stages is None else stages)
        #: Tokens of the fixed prefix at the latest run (see :meth:`measure_fixed`).
        self.fixed = 0
        self.compaction_policy = replace(
            COMPACTION_POLICY,
            threshold=config.offload_threshold,
            preview_lines=config.preview_lines,
        )
        self.policies: dict[str, OffloadPolicy] = {
            "compaction": self.compaction_policy,
            "emergency": EMERGENCY_POLICY,
            "stale": replace(
                COMPACTION_POLICY,
                name="stale",
                threshold=config.stale_min_chars,
                preview_lines=config.stale_preview_lines,
                exclude_tools=OWN_TOOLS,
            ),
            "tight": TIGHT_POLICY,
            # the placeholder a stale batch leaves of an older preview (see compaction.stale)
            "brief": replace(
                COMPACTION_POLICY, name="brief", threshold=0, preview_lines=2, line_chars=120
            ),
            "squeeze": replace(
                EMERGENCY_POLICY,
                name="squeeze",
                style="head_tail",
                head_chars=self.squeeze_keep,
                tail_chars=self.squeeze_keep,
            ),
            **(policies or {}),
        }
        self.record_errors: list[str] = []
        self.written = WrittenFiles()
        #: Other offload stores whose files count as offloaded references (eviction root).
        self.extra_stores: list[OffloadStore] = []
        #: tokens of the brief placeholder a stale batch may put in place of a preview, by
        #: call id and sha256 (-1: the stored entry is of another output)
        self.brief_tokens: dict[str, int] = {}

    @classmethod
    def standalone(
        cls,
        context_window: int,
        *,
        summarizer: Summarizer | None = None,
        workspace: str | None = None,
        session_id: str = "standalone",
        config: TierConfig | None = None,
        counter: str | None = None,
    ) -> ProgressiveCompactor:
        """A compactor for the list interfaces (:mod:`.protocols`) without a ContextManager. With a
        ``workspace`` it offloads and records there; without one it only summarizes."""
        from ..core.records import StoreRecordStore
        from ..core.tokens import MessageTokenCache, get_counter
        from ..storage import open_store
        from ..storage.session import SessionStore

        tc = get_counter(counter)
        cache = MessageTokenCache(tc)
        ss = (
            SessionStore(open_store(Path(workspace)), session_id, "default")
            if workspace is not None
            else None
        )
        return cls(
            view=HistoryView(cache.count),
            window=context_window,
            config=config or TierConfig(),
            session_id=session_id,
            count_text=tc.count_text,
            summarizer=summarizer,
            offload=OffloadStore(ss) if ss is not None else None,
            record_store=StoreRecordStore(ss) if ss is not None else None,
        )

    # ------------------------------------------------------------------ entry points
    def run(
        self, *, extra_tokens: int = 0, force: Tier | None = None, reason: str = ""
    ) -> CompactionRecord:
        """Decide the tier (or use ``force``) and compact the view. Returns the record.

        Before the tier is decided, oversized pinned messages are shortened and stale tool
        outputs leave in one batch when that pays for its cache miss (:mod:`.stale`)."""
        forced = force.value if force is not None else None
        with telemetry.span("contextfold.compaction", {"contextfold.forced": forced}) as current:
            record = self._run(extra_tokens=extra_tokens, force=force, reason=reason)
            if telemetry.recording(current):
                telemetry.set_attributes(current, telemetry.compaction_attributes(record))
            return record

    def _run(self, *, extra_tokens: int, force: Tier | None, reason: str) -> CompactionRecord:
        record = self.pipeline.run(self, extra_tokens=extra_tokens, force=force, reason=reason)
        if record is None:  # a stage of the caller's called the run off: nothing changed
            run = CompactionRun(self, extra_tokens=extra_tokens, force=force, reason=reason)
            return self._record(run.scratch, run.view_tokens(), extra_tokens, persist=False)
        return record

    @property
    def compaction_budget(self) -> int:
        """Tokens the compaction message may take: 8% of the window (at least 300)."""
        return max(300, int(self.working_window * 0.08))

    @property
    def squeeze_keep(self) -> int:
        """Characters the emergency squeeze keeps of a long text or argument (head and tail
        each): 600, less in a window under 4,800 tokens."""
        return max(100, min(600, self.window // 8))

    @property
    def pinned_budget(self) -> int:
        """Tokens an oversized pinned message keeps in the view: 10% of the window."""
        return max(64, self.window // 10)

    def _estimated_summary_tokens(self) -> int:
        """The next compaction message: about the last one plus 200, never above its budget."""
        if self.view.compaction is not None:
            guess = self.count_text(self.view.compaction.text) + 200
        else:
            guess = 800
        return min(guess, self.compaction_budget + 20)

    def _projected(self, boundary: int, extra: int) -> int:
        raw = self.view.view_tokens(boundary, compaction_tokens=self._estimated_summary_tokens())
        return self.scaled(raw) + extra

    def _ensure_fits(self, run: _Run, extra: int) -> None:
        """Nothing may leave this compactor above the window: fall back to truncation."""
        if self.view_tokens(extra) > self.cfg.emergency_threshold * self.window:
            run.notes.append("still above the emergency line after summarizing: truncating")
            self._truncate(run, extra)

    # ------------------------------------------------------------------ offload
    def _offload_range(self, run: _Run, start: int, end: int, policy: OffloadPolicy) -> None:
        if self.offload is None:
            return
        v = self.view
        gone = v.retracted
        for i in range(start, end):
            if i in gone:  # a client's rewrite took it out (its call id may be used again)
                continue
            form = v.forms[i]
            text = offloadable_text(form.content) if form.role == "tool" else None
            if text is None:
                continue
            if not policy.applies(text, None) or form.metadata.get("cf_offloaded"):
                continue
            original = v.history[i]
            tool_name = self._tool_name(i)
            try:
                entry = self.offload.write(
                    original.tool_call_id or "",
                    original.text,
                    message_uuid=original.uuid,
                    policy=policy.name,
                    tool_name=tool_name,
                )
            except ContextFoldError as exc:
                run.errors.append(f"offload failed for {original.tool_call_id}: {exc}")
                continue
            self.apply_offload(i, entry, policy)
            run.offloaded.append(entry)

    def apply_offload(self, index: int, entry: OffloadEntry, policy: OffloadPolicy) -> None:
        original = self.view.history[index]
        text = placeholder(entry, original.text, policy)
        form = original.with_content(text, cf_offloaded=entry.path, cf_replaced=True)
        self.view.set_form(index, form)
        self.state.offload_policies[entry.tool_call_id] = policy.name

    def _tool_name(self, index: int) -> str | None:
        call_id = self.view.history[index].tool_call_id
        j = index - 1
        while j >= 0:
            m = self.view.history[j]
            if m.role == "assistant":
                for c in m.tool_calls:
                    if c.id == call_id:
                        return c.name
                return None
            j -= 1
        return None

    # ------------------------------------------------------------------ summarize
    def _summarize(self, run: _Run, start: int, end: int, *, use_llm: bool) -> None:
        summarize(self, run, start, end, use_llm=use_llm)

    def _set_compaction(
        self,
        run: _Run,
        end: int,
        anchors: tuple[Anchor, ...],
        summary: str,
        recall: list[str],
        *,
        summarized: int,
        note: str | None = None,
    ) -> None:
        set_compaction(self, run, end, anchors, summary, recall, summarized=summarized, note=note)

    def _offloaded_refs(self, end: int) -> list[tuple[str, str]]:
        return offloaded_refs(self, end)

    # ------------------------------------------------------------------ emergency
    def _truncate(self, run: _Run, extra: int) -> None:
        truncate(self, run, extra)

    def _squeeze(self, run: _Run, extra: int) -> None:
        squeeze(self, run, extra)

    def _squeeze_one(self, run: _Run, index: int, key: str, text: str, policy: str) -> None:
        squeeze_one(self, run, index, key, text, policy)

    def reapply(self, index: int, entry: OffloadEntry, policy_name: str) -> bool:
        """Put an offloaded entry's placeholder back into the view form (also on reopen)."""
        if policy_name == "squeeze_args":
            form = self.view.forms[index]
            writes = message_writes(self.view.history[index])
            named = f"; writes {', '.join(writes)}" if writes else ""
            marker = f"... [truncated: full arguments in {entry.path}{named}] ..."
            short = truncate_tool_arguments(
                [form], tools=("*",), max_length=self.squeeze_keep, text=marker
            )[0]
            meta = dict(short.metadata)
            meta.update(cf_replaced=True, cf_args_offloaded=entry.path)
            self.view.set_form(index, replace(short, metadata=meta))
            self.state.offload_policies[entry.tool_call_id] = policy_name
            return True
        if budget_of(policy_name) is not None:
            return apply_pinned(self, index, entry, policy_name)
        policy = self.policies.get(policy_name)
        if policy is None:
            return False
        self.apply_offload(index, entry, policy)
        return True

    # ------------------------------------------------------------------ list interfaces
    def compact_with_record(
        self, msgs: Sequence[Message]
    ) -> tuple[list[Message], CompactionRecord]:
        """RecordedCompactor on a plain message list (the whole history each call).

        Orphaned tool pairs are repaired first. When ``msgs`` extends the history seen
        before (same uuids), only the new messages are appended and the earlier compaction is
        kept; otherwise the view starts over, keeping the last summary and anchors.
        """
        self._sync(repair_orphaned_tool_pairs(msgs))
        record = self.run()
        return self.view.view_messages(), record

    def compact(self, msgs: Sequence[Message]) -> list[Message]:
        return self.compact_with_record(msgs)[0]

    def compact_force(self, msgs: Sequence[Message]) -> list[Message]:
        """ForceCompactor: CompactForce runs the emergency tier directly."""
        self._sync(repair_orphaned_tool_pairs(msgs))
        self.run(force=Tier.EMERGENCY, reason="CompactForce")
        return self.view.view_messages()

    def _sync(self, msgs: Sequence[Message]) -> None:
        v = self.view
        known = v.history
        same = len(msgs) >= len(known) and all(
            a.uuid == b.uuid for a, b in zip(known, msgs[: len(known)])
        )
        if not same:
            v = self.view = v.fresh()
            known = v.history
        for msg in msgs[len(known) :]:
            v.append(msg)

    # ------------------------------------------------------------------ harness strategies
    def run_trigger(
        self, trig: SummaryTriggerConfig, *, extra_tokens: int = 0
    ) -> CompactionRecord | None:
        """Trigger-based summary compaction (the trigger stage); see :func:`harness.run_trigger`."""
        return run_trigger(self, trig, extra_tokens=extra_tokens)

    def recover_overflow(
        self, *, extra_tokens: int = 0, note: str | None = None, learned: bool = False
    ) -> CompactionRecord:
        """Overflow recovery; see :func:`harness.recover_overflow`."""
        return recover_overflow(self, extra_tokens=extra_tokens, note=note, learned=learned)

    # ------------------------------------------------------------------ records
    def _record(self, run: _Run, after: int, extra: int, *, persist: bool) -> CompactionRecord:
        v = self.view
        msgs_after = len(v.view_messages()) if persist else run.msgs_before
        changed = persist and run.tier is not Tier.NONE
        tail = len(v) - v.boundary
        if run.tier is Tier.WARN and self.cfg.warn_preserved_tail == "tail":
            tail = len(v) - v.tail_start(self.cfg.min_tail_messages)
        record = CompactionRecord(
            id=new_uuid(),
            session_id=self.session_id,
            timestamp=_now(),
            tier=run.tier,
            tokens_before=run.tokens_before,
            tokens_after=after,
            msgs_before=run.msgs_before,
            msgs_after=msgs_after,
            anchors=run.anchors,
            offloaded=tuple(run.offloaded),
            summarized=run.summarized,
            preserved_tail=tail,
            summary_text=run.summary_text,
            compression_ratio=(after / run.tokens_before) if run.tokens_before else 1.0,
            duration_ms=(time.perf_counter() - run.started) * 1000.0,
            error="; ".join(run.errors),
            reason=run.reason,
            strategy=run.strategy,
            forced=run.forced,
            summarizer=run.summarizer_name,
            summarizer_input_tokens=run.summarizer_in,
            summarizer_output_tokens=run.summarizer_out,
            boundary_uuid=self.state.boundary_uuid,
            window=self.window,
            notes=tuple(run.notes),
            changed=changed,
        )
        if persist and self.record_store is not None:
            try:
                self.record_store.append(record)
            except ContextFoldError as exc:  # fail-open, but said: the record is not stored
                self.record_errors.append(str(exc))
                log.warning(
                    "session %r: the %s compaction record %s was not stored: %s",
                    self.session_id,
                    record.tier.value,
                    record.id,
                    exc,
                )
        return record
