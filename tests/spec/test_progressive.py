"""Conformance to the ProgressiveCompactor design note (tiers, offload, anchors, records,
notices, fallbacks, interfaces), on ``preset="spec"``."""

from __future__ import annotations

from pathlib import Path

import pytest

from contextfold import ContextManager
from contextfold.compaction.progressive import ProgressiveCompactor
from contextfold.core.anchors import ALL_ANCHOR_TYPES, parse_summary
from contextfold.core.config import SPEC_TIERS, spec
from contextfold.core.records import Tier
from contextfold.testing import ScriptedSummarizer

from .helpers import NEWEST, SYSTEM, TASK, fill_to, spec_manager, turns

ANCHORED = """## Anchors

### User Intent
Fix the failing test in src/app.py

### Execution Progress
- Read the files

### Key Decisions
- Keep the parser: rewriting costs too much

### Tried Solutions
- Pinned the version: no change

### Next Steps
- Run the tests

## Summary
Work on src/app.py."""


def at(tmp_path: Path, ratio: float, **kw: object) -> ContextManager:
    cm = spec_manager(tmp_path, **kw)  # type: ignore[arg-type]
    cm.add_many([SYSTEM, TASK])
    fill_to(cm, ratio)
    cm.add(NEWEST)
    return cm


def test_thresholds_defaults() -> None:
    """Section 2.2 (and 1.1): Warn 0.60, Soft 0.70, Full 0.80, Emergency 0.95, OffloadThreshold
    4000 characters, MinTailMessages 6."""
    t = SPEC_TIERS
    assert (t.warn_threshold, t.soft_threshold, t.full_threshold, t.emergency_threshold) == (
        0.60,
        0.70,
        0.80,
        0.95,
    )
    assert t.offload_threshold == 4_000 and t.min_tail_messages == 6
    assert spec().tiers is SPEC_TIERS


@pytest.mark.parametrize(
    ("ratio", "tier"),
    [
        (0.59, Tier.NONE),
        (0.60, Tier.WARN),
        (0.69, Tier.WARN),
        (0.70, Tier.SOFT),
        (0.80, Tier.FULL),
        (0.949, Tier.FULL),
        (0.95, Tier.EMERGENCY),
    ],
)
def test_determine_tier_ratio_of_the_whole_window(ratio: float, tier: Tier) -> None:
    """Section 2.2: ratio = EstimateTokens(msgs) / ContextWindow, with the four boundaries."""
    comp = ProgressiveCompactor.standalone(100_000, config=SPEC_TIERS)
    comp.fixed = 30_000  # a big fixed prefix changes nothing: the ratio is of the whole window
    assert comp.tier_for(int(ratio * 100_000)) is tier


def test_token_estimate_is_chars_over_4(tmp_path: Path) -> None:
    """Section 2.2: EstimateTokens = characters / 4."""
    cm = spec_manager(tmp_path)
    assert cm.counter.name == "chars4"
    assert cm.counter.count_text("x" * 400) == 100


def test_tier_none_returns_the_messages_unchanged(tmp_path: Path) -> None:
    """Section 2.3 TierNone: returned as they are, no side effects (no record stored)."""
    cm = at(tmp_path, 0.5)
    before = [m.content for m in cm.history]
    view = cm.prepare()
    assert len(view) == len(before) and [d["content"] for d in view] == before
    assert cm.records() == []


def test_tier_warn_offloads_large_head_results_only(tmp_path: Path) -> None:
    """Section 2.3 TierWarn: only head tool results above OffloadThreshold go to files; no
    summary, no anchors; the tail is kept; PreservedTail = len(tail)."""
    cm = spec_manager(tmp_path, window=20_000)
    cm.add_many([SYSTEM, TASK, *turns(2, chars=5_000), *turns(2, chars=500, start=2)])
    fill_to(cm, 0.62, chars=500)
    cm.add(NEWEST)
    cm.prepare()
    (rec,) = cm.records()
    assert rec.tier is Tier.WARN and rec.summarized == 0 and rec.summary_text == ""
    assert all(a.is_empty for a in rec.anchors)
    assert {e.tool_call_id for e in rec.offloaded} == {"c0", "c1"}
    assert all(e.chars > 4_000 for e in rec.offloaded)
    assert rec.preserved_tail == len(cm.history) - cm.view.tail_start(6)
    assert [d["content"] for d in cm.prepare()[-6:]] == [m.content for m in cm.history[-6:]]


def test_tier_soft_summarizes_the_oldest_half_of_the_head(tmp_path: Path) -> None:
    """Section 2.3 TierSoft: head = msgs[1:N-MinTail] split in halves; the oldest half is
    summarized, the recent half and the tail stay verbatim; Summarized = len(headOldest),
    PreservedTail = len(tail) + len(headRecent)."""
    cm = at(tmp_path, 0.72)
    v = cm.view
    head_start, tail = v.boundary, v.tail_start(6)
    mid = v.legal_cut_at_or_before(head_start + (tail - head_start) // 2, head_start)
    cm.prepare()
    (rec,) = cm.records()
    assert rec.tier is Tier.SOFT
    assert rec.summarized == mid - head_start
    assert rec.preserved_tail == len(cm.history) - mid
    view = cm.prepare()
    assert view[0] == SYSTEM
    assert [d["content"] for d in view[-(len(cm.history) - mid) :]] == [
        m.content for m in cm.history[mid:]
    ]


def test_tier_full_summarizes_the_whole_head(tmp_path: Path) -> None:
    """Section 2.3 TierFull: the whole head becomes one [Context Compaction] message, the
    tail of MinTailMessages stays: [system, compactionMsg, ...tail]."""
    cm = at(tmp_path, 0.85)
    tail = cm.view.tail_start(6)
    cm.prepare()
    (rec,) = cm.records()
    assert rec.tier is Tier.FULL
    assert rec.preserved_tail == len(cm.history) - tail
    view = cm.prepare()
    summaries = [d for d in view if str(d["content"]).startswith("[Context Compaction]")]
    assert len(summaries) == 1
    assert [d["content"] for d in view[-rec.preserved_tail :]] == [
        m.content for m in cm.history[tail:]
    ]


def test_tier_emergency_truncates_without_llm(tmp_path: Path) -> None:
    """Section 2.3 TierEmergency and 6.3: no LLM call, forced truncation to the minimal tail,
    record.Error = "emergency fallback: forced truncation"."""
    llm = ScriptedSummarizer([], strict=False)
    cm = at(tmp_path, 0.97, summarizer=llm)
    cm.prepare()
    rec = cm.records()[0]
    assert rec.tier is Tier.EMERGENCY
    assert rec.error == "emergency fallback: forced truncation"
    assert llm.requests == []
    assert rec.summary_text == ""
    assert rec.preserved_tail <= 2  # the newest turn


def test_offload_placeholder_previews_ten_lines_and_is_exact(tmp_path: Path) -> None:
    """Sections 3.2-3.3: a head result above 4000 characters is written to a file and
    replaced by a placeholder naming the file with a 10-line preview; the file holds it
    exactly."""
    cm = spec_manager(tmp_path, window=20_000)
    cm.add_many([SYSTEM, TASK, *turns(1, chars=6_000), *turns(2, chars=500, start=1)])
    fill_to(cm, 0.62, chars=500)
    cm.add(NEWEST)
    view = cm.prepare()
    original = cm.history[3].content
    shown = next(d["content"] for d in view if d.get("tool_call_id") == "c0")
    assert shown != original and "c0" in shown
    preview = [line for line in original.splitlines()[:10]]
    assert all(line in shown for line in preview)
    assert original.splitlines()[10] not in shown
    assert cm.recover_tool_result("c0") == original


def test_offload_is_idempotent(tmp_path: Path) -> None:
    """Section 3.3: a tool result offloaded once is not written again on later turns."""
    cm = spec_manager(tmp_path, window=20_000)
    cm.add_many([SYSTEM, TASK, *turns(1, chars=6_000), *turns(2, chars=500, start=1)])
    fill_to(cm, 0.62, chars=500)
    cm.add(NEWEST)
    cm.prepare()
    first = cm.offloaded()["c0"]
    cm.add({"role": "assistant", "content": "ok"})
    cm.prepare()
    assert cm.offloaded()["c0"] == first
    assert sum(1 for r in cm.records() for e in r.offloaded if e.tool_call_id == "c0") == 1


def test_ingest_offload_hook_at_10000_characters(tmp_path: Path) -> None:
    """Section 3.4: the OffloadHook offloads outputs above 10,000 characters when they
    arrive; smaller ones enter the history as they are."""
    cm = spec_manager(tmp_path, window=100_000)
    cm.add_many([SYSTEM, TASK, *turns(1, chars=12_000), *turns(1, chars=6_000, start=1)])
    view = cm.prepare()
    big = next(d["content"] for d in view if d.get("tool_call_id") == "c0")
    mid = next(d["content"] for d in view if d.get("tool_call_id") == "c1")
    assert big != cm.history[3].content and "c0" in cm.offloaded()
    assert mid == cm.history[5].content and "c1" not in cm.offloaded()


def test_five_anchors_always_present(tmp_path: Path) -> None:
    """Sections 4.3 and 4.5: the record always carries all five anchor types, in order,
    missing ones as N/A."""
    llm = ScriptedSummarizer(["## Anchors\n\n### User Intent\nFix it\n\n## Summary\nshort"])
    cm = at(tmp_path, 0.85, summarizer=llm)
    cm.prepare()
    rec = cm.records()[0]
    assert [a.type for a in rec.anchors] == list(ALL_ANCHOR_TYPES)
    assert [a.content for a in rec.anchors][1:] == ["N/A"] * 4
    assert rec.summary_text == "short"


def test_parse_fills_missing_anchors_and_reads_the_summary() -> None:
    """Section 4.5: split by ### headers, missing types are N/A, the text after ## Summary
    is the summary (empty when absent)."""
    parsed = parse_summary("### Key Decisions\n- use chi\n")
    assert [a.type for a in parsed.anchors] == list(ALL_ANCHOR_TYPES)
    assert {a.type.value: a.content for a in parsed.anchors}["key_decision"] == "- use chi"
    assert parsed.summary == ""


def test_first_and_incremental_templates(tmp_path: Path) -> None:
    """Sections 4.4 and 4.7: the first compaction uses the structured template; the next one
    sends the previous anchors and summary for an incremental update."""
    llm = ScriptedSummarizer([ANCHORED, ANCHORED])
    cm = at(tmp_path, 0.85, summarizer=llm)
    cm.prepare()
    assert llm.requests[0].previous_summary is None
    fill_to(cm, 0.85)
    cm.add({"role": "user", "content": "Continue."})
    cm.prepare()
    assert len(llm.requests) == 2
    assert llm.requests[1].previous_summary == "Work on src/app.py."
    assert any(not a.is_empty for a in llm.requests[1].previous_anchors)


def test_anchor_merge_new_replaces_old_is_kept_when_na(tmp_path: Path) -> None:
    """Section 4.6: a new non-N/A anchor replaces the old one of its type; old non-N/A
    anchors the new output leaves N/A are kept; always five in order."""
    second = ANCHORED.replace("- Keep the parser: rewriting costs too much", "- N/A").replace(
        "- Run the tests", "- Ship it"
    )
    llm = ScriptedSummarizer([ANCHORED, second])
    cm = at(tmp_path, 0.85, summarizer=llm)
    cm.prepare()
    fill_to(cm, 0.85)
    cm.add({"role": "user", "content": "Continue."})
    cm.prepare()
    anchors = {a.type.value: a.content for a in cm.records()[-1].anchors}
    assert anchors["next_step"] == "- Ship it"  # replaced, not a union
    assert anchors["key_decision"] == "- Keep the parser: rewriting costs too much"


def test_compaction_message_format(tmp_path: Path) -> None:
    """Section 4.8: the message starts with [Context Compaction], then ## Anchors with the
    five ### sections and ## Summary."""
    cm = at(tmp_path, 0.85, summarizer=ScriptedSummarizer([ANCHORED]))
    view = cm.prepare()
    text = next(d["content"] for d in view if str(d["content"]).startswith("[Context"))
    assert text.startswith("[Context Compaction]\n## Anchors")
    for header in (
        "### User Intent",
        "### Execution Progress",
        "### Key Decisions",
        "### Tried Solutions",
        "### Next Steps",
        "## Summary",
    ):
        assert header in text
