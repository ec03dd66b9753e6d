"""Conformance to the ProgressiveCompactor design note, sections 5-8 (records, events,
notices, cascade cleanup, fail-open fallbacks, the three interfaces, non-destructive
history, manual /compact), on ``preset="spec"``."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest

from contextfold import ContextManager
from contextfold.compaction.progressive import ProgressiveCompactor
from contextfold.core.anchors import Anchor, AnchorType
from contextfold.core.config import SPEC_TIERS
from contextfold.core.records import CompactionRecord, OffloadEntry, Tier, format_notification
from contextfold.core.wire import from_openai
from contextfold.errors import ContextFoldError, StorageError
from contextfold.testing import ScriptedSummarizer

from .helpers import NEWEST, SYSTEM, TASK, fill_to, spec_manager, turns
from .test_progressive import ANCHORED, at

FIELDS = (
    "id",
    "session_id",
    "timestamp",
    "tier",
    "tokens_before",
    "tokens_after",
    "msgs_before",
    "msgs_after",
    "anchors",
    "offloaded",
    "summarized",
    "preserved_tail",
    "summary_text",
    "compression_ratio",
    "duration_ms",
    "error",
)


def test_record_fields(tmp_path: Path) -> None:
    """Section 5.1: every CompactionRecord field, CompressionRatio = TokensAfter /
    TokensBefore, a UUID id."""
    cm = at(tmp_path, 0.85, summarizer=ScriptedSummarizer([ANCHORED]))
    cm.prepare()
    rec = cm.records()[0]
    data = rec.to_dict()
    assert set(FIELDS) <= set(data)
    uuid.UUID(rec.id)
    assert rec.session_id == "s" and rec.tokens_after < rec.tokens_before
    assert rec.compression_ratio == pytest.approx(rec.tokens_after / rec.tokens_before)
    assert rec.msgs_after < rec.msgs_before and rec.duration >= 0


def test_records_persist_append_only_in_order(tmp_path: Path) -> None:
    """Section 5.2: records are appended and listed in the order written, across reopens."""
    cm = at(tmp_path, 0.85)
    cm.prepare()
    fill_to(cm, 0.85)
    cm.add({"role": "user", "content": "Continue."})
    cm.prepare()
    ids = [r.id for r in cm.records()]
    assert len(ids) == 2
    assert [r.id for r in spec_manager(tmp_path).records()] == ids


class _Broken:
    def append(self, record: CompactionRecord) -> None:
        raise StorageError("read-only disk")

    def list(self, session_id: str) -> list[CompactionRecord]:
        return []


def test_record_store_failure_only_logs_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    """Sections 5.2 and 6.1: a failed persist is only a logged warning; the record is still
    returned and the compaction stands."""
    comp = ProgressiveCompactor.standalone(2_000, config=SPEC_TIERS)
    comp.record_store = _Broken()
    msgs = [from_openai(d, i) for i, d in enumerate([SYSTEM, TASK, *turns(10), NEWEST])]
    with caplog.at_level(logging.WARNING, logger="contextfold"):
        view, record = comp.compact_with_record(msgs)
    assert record.tier is not Tier.NONE and len(view) < len(msgs)
    assert any("read-only disk" in r.getMessage() for r in caplog.records)


def test_compaction_event_carries_the_record(tmp_path: Path) -> None:
    """Sections 5.3 and 8.1: a compaction (tier not None) is announced with its record."""
    seen: list[CompactionRecord] = []
    cm = at(tmp_path, 0.85, on_compaction=seen.append)
    cm.prepare()
    assert [r.id for r in seen] == [r.id for r in cm.records()]
    cm.prepare()  # nothing new: no event
    assert len(seen) == 1


def _rec(tier: Tier, **kw: object) -> CompactionRecord:
    base: dict[str, object] = dict(
        id="x", session_id="s", timestamp="t", tier=tier, msgs_before=40, msgs_after=8
    )
    base.update(kw)
    return CompactionRecord(**base)  # type: ignore[arg-type]


def test_notice_in_chinese_two_lines() -> None:
    """Section 5.4: the two-line notice with tier label, tokens and compression ratio."""
    anchors = tuple(Anchor(type=t, content="- x") for t in AnchorType)
    entries = tuple(
        OffloadEntry(
            tool_call_id=f"c{i}",
            message_uuid=f"u{i}",
            path=f"p{i}",
            chars=14_000,
            bytes=14_336,
            lines=100,
            sha256="0",
            policy="compaction",
        )
        for i in range(3)
    )
    full = _rec(
        Tier.FULL,
        tokens_before=45_200,
        tokens_after=8_100,
        anchors=anchors,
        offloaded=entries,
        summarized=28,
        preserved_tail=6,
    )
    assert format_notification(full, locale="zh") == (
        "⚡ 上下文压缩 [Full] 45.2K→8.1K tokens（82% 压缩率）\n"
        "   5 锚点 | 3 offload(42KB) | 28 条摘要 | 保留尾部 6 条"
    )
    warn = _rec(
        Tier.WARN,
        tokens_before=76_800,
        tokens_after=72_300,
        offloaded=entries[:2],
        preserved_tail=6,
    )
    assert format_notification(warn, locale="zh").endswith(
        "（6% 压缩率）\n   2 offload(28KB) | 无摘要"
    )
    emergency = _rec(Tier.EMERGENCY, tokens_before=98_500, tokens_after=12_000, preserved_tail=1)
    assert format_notification(emergency, locale="zh") == (
        "⚡ 上下文压缩 [Emergency] 98.5K→12.0K tokens（88% 压缩率）\n   ⚠ 紧急截断回退 | 保留尾部 1 条"
    )


def test_spec_manager_notices_in_chinese(tmp_path: Path) -> None:
    """Section 5.4: the spec preset's notices are the Chinese ones."""
    cm = at(tmp_path, 0.85)
    cm.prepare()
    assert cm.notification(cm.records()[0]).startswith("⚡ 上下文压缩 [Full]")


def test_delete_session_cleans_results_and_records(tmp_path: Path) -> None:
    """Section 5.5: deleting a session removes its tool results and compaction records."""
    cm = at(tmp_path, 0.85)
    cm.prepare()
    assert cm.records() and cm.offloaded() is not None
    cm.delete_session()
    again = spec_manager(tmp_path)
    assert again.records() == [] and again.offloaded() == {} and again.history == []


class _FailingOffload:
    """An offload store whose writes fail."""

    def __init__(self, inner: object) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def write(self, *a: object, **k: object) -> object:
        raise StorageError("disk full")


def test_offload_write_failure_keeps_the_text(tmp_path: Path) -> None:
    """Section 6.1: a failed offload write keeps the original text, compaction goes on, and
    record.Error says so."""
    cm = spec_manager(tmp_path, window=20_000)
    cm.add_many([SYSTEM, TASK, *turns(2, chars=5_000), *turns(2, chars=500, start=2)])
    fill_to(cm, 0.62, chars=500)
    cm.add(NEWEST)
    cm.compactor.offload = _FailingOffload(cm.compactor.offload)  # type: ignore[assignment]
    view = cm.prepare()
    assert (
        next(d["content"] for d in view if d.get("tool_call_id") == "c0") == cm.history[3].content
    )
    assert "disk full" in cm.last_prepare.error  # type: ignore[union-attr]


class _BadExtractor:
    def extract(self, messages: object) -> list[object]:
        raise RuntimeError("extractor down")


def test_memory_extraction_failure_is_skipped_silently(tmp_path: Path) -> None:
    """Section 6.1: an LTM extraction failure is skipped silently: nothing in the record."""
    cm = at(tmp_path, 0.85, fact_extractor=_BadExtractor())
    cm.prepare()
    rec = cm.records()[0]
    assert rec.tier is Tier.FULL and "extractor" not in rec.error


def test_llm_failure_falls_back_to_token_budget_truncation(tmp_path: Path) -> None:
    """Sections 6.1-6.2: a failed LLM summary falls back to truncation (no summary text),
    record.Error = "LLM summary failed in TierXxx"."""
    llm = ScriptedSummarizer([RuntimeError("model down")])
    cm = at(tmp_path, 0.72, summarizer=llm)
    cm.prepare()
    rec = cm.records()[0]
    assert rec.error.startswith("LLM summary failed in TierSoft")
    assert rec.summary_text == "" and rec.summarized > 0
    assert rec.tokens_after < rec.tokens_before


def test_anchor_parse_problems_go_to_the_record(tmp_path: Path) -> None:
    """Section 6.1: unparsable anchors keep what was recognized, fill N/A, and append to
    record.Error."""
    cm = at(tmp_path, 0.85, summarizer=ScriptedSummarizer(["free text, no sections at all"]))
    cm.prepare()
    rec = cm.records()[0]
    assert len(rec.anchors) == 5 and "summary parse" in rec.error


def test_three_interfaces(tmp_path: Path) -> None:
    """Section 7.1: Compact, CompactForce (runs TierEmergency) and CompactWithRecord."""
    msgs = [from_openai(d, i) for i, d in enumerate([SYSTEM, TASK, *turns(10), NEWEST])]
    comp = ProgressiveCompactor.standalone(2_000, config=SPEC_TIERS, workspace=str(tmp_path))
    view, record = comp.compact_with_record(msgs)
    assert record.tier is not Tier.NONE and len(view) < len(msgs)
    assert len(comp.compact(msgs)) <= len(view)
    forced = ProgressiveCompactor.standalone(100_000, config=SPEC_TIERS)
    forced.compact_force(msgs)
    assert forced.record_store is None
    assert forced.state.compactions == 1  # emergency ran though the ratio is tiny


def test_history_is_never_changed(tmp_path: Path) -> None:
    """Section 8.2: compaction derives a view; the full history is kept as it was."""
    cm = at(tmp_path, 0.97)
    before = [(m.uuid, m.content) for m in cm.history]
    cm.prepare()
    assert [(m.uuid, m.content) for m in cm.history] == before
    assert [(m.uuid, m.content) for m in spec_manager(tmp_path).history] == before


def test_manual_compact_is_compact_force(tmp_path: Path) -> None:
    """Sections 7.1 and 8.3: the manual /compact runs CompactForce, the emergency tier."""
    llm = ScriptedSummarizer([], strict=False)
    cm = at(tmp_path, 0.3, summarizer=llm)
    rec = cm.compact()
    assert rec.tier is Tier.EMERGENCY and rec.error == "emergency fallback: forced truncation"
    assert llm.requests == []


def test_error_root(tmp_path: Path) -> None:
    """Every failure above is a ContextFoldError (no raw OSError escapes)."""
    assert issubclass(StorageError, ContextFoldError)
    assert isinstance(spec_manager(tmp_path), ContextManager)
