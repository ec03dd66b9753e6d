"""Each tier of the ProgressiveCompactor and each fail-open path, through the ContextManager."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from contextfold import ContextManager
from contextfold.compaction.summarizers.llm import LLMSummarizer
from contextfold.core.anchors import ALL_ANCHOR_TYPES
from contextfold.core.config import LATE_COMPACTION_TIERS, progressive
from contextfold.core.messages import check_view
from contextfold.core.records import CompactionRecord, Tier
from contextfold.core.wire import from_openai
from contextfold.errors import ConfigError, InvalidMessageError
from contextfold.testing import ScriptedLLM
from tests.support.store_helpers import records

WINDOW = 10_000


class QuarterCounter:
    """1 token per 4 characters: makes ratios easy to reason about in tests."""

    name = "quarter"

    def count_text(self, text: str) -> int:
        return len(text) // 4


def manager(tmp_path: Path, **kw: Any) -> ContextManager:
    """The tier mechanics are tested at the late thresholds (60/70/80/95%, target 30%)."""
    if "config" not in kw and "preset" not in kw:
        kw["config"] = progressive().with_(tiers=LATE_COMPACTION_TIERS)
    kw.setdefault("context_window", WINDOW)
    kw.setdefault("fact_extractor", "extractive")
    return ContextManager(workspace=tmp_path, session_id="t", token_counter=QuarterCounter(), **kw)


def turn(i: int, out_chars: int, cmd: str | None = None) -> list[dict[str, Any]]:
    command = cmd or f"python step_{i}.py"
    return [
        {
            "role": "assistant",
            "content": f"Next I will run step {i}.",
            "tool_calls": [
                {
                    "id": f"call_{i}",
                    "type": "function",
                    "function": {"name": "bash", "arguments": json.dumps({"command": command})},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": f"call_{i}",
            "content": "\n".join(f"out {i}.{j} " + "x" * 40 for j in range(out_chars // 50)),
        },
    ]


def grow(cm: ContextManager, start: int, target_ratio: float, out_chars: int = 1_500) -> int:
    """Add turns until the view (without compacting) reaches ``target_ratio`` of the window."""
    i = start
    while cm.view_tokens < target_ratio * cm.window:
        cm.add_many(turn(i, out_chars))
        i += 1
    return i


def base(cm: ContextManager) -> None:
    cm.add({"role": "system", "content": "You are a coding agent."})
    cm.add({"role": "user", "content": "Fix the failing date parser in src/dates.py."})


def assert_valid(cm: ContextManager, view: list[dict[str, Any]]) -> None:
    check_view([from_openai(d, i) for i, d in enumerate(view)])
    assert view[0]["content"] == "You are a coding agent."
    assert {"role": "user", "content": "Fix the failing date parser in src/dates.py."} in view


def test_tier_none_returns_history_unchanged(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    base(cm)
    cm.add_many(turn(0, 500))
    view = cm.prepare()
    assert cm.last_prepare is not None and cm.last_prepare.tier is Tier.NONE
    assert not cm.last_prepare.changed
    assert len(view) == 4
    assert records(tmp_path, "t") == []


def test_thresholds_validated() -> None:
    from contextfold.core.config import TierConfig

    with pytest.raises(ConfigError):
        TierConfig(warn_threshold=0.7, soft_threshold=0.6)
    with pytest.raises(ConfigError):
        TierConfig(emergency_threshold=1.2)
    with pytest.raises(ConfigError):
        TierConfig(target_ratio=0.65)
    cfg = TierConfig()
    assert (
        cfg.warn_threshold,
        cfg.soft_threshold,
        cfg.full_threshold,
        cfg.emergency_threshold,
        cfg.min_tail_messages,
        cfg.offload_threshold,
    ) == (0.55, 0.60, 0.75, 0.95, 6, 4_000)
    late = LATE_COMPACTION_TIERS
    assert (late.warn_threshold, late.soft_threshold, late.full_threshold) == (0.6, 0.7, 0.8)
    assert (late.target_ratio, late.stale_after, late.working_window) == (0.30, 0, 0)
    with pytest.raises(ConfigError):
        TierConfig(stale_batch_ratio=0.0)
    with pytest.raises(ConfigError):
        TierConfig(working_window=-1)


def test_warn_offloads_large_head_results_only(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    base(cm)
    i = grow(cm, 0, 0.30, out_chars=1_000)
    cm.add_many(turn(i, 6_000))  # a result above 4,000 chars, in the head later
    grow(cm, i + 1, 0.62, out_chars=1_000)
    before = len(cm.history)
    view = cm.prepare()
    rec = cm.last_prepare
    assert rec is not None and rec.tier is Tier.WARN, rec
    assert [e.tool_call_id for e in rec.offloaded] == [f"call_{i}"]
    assert rec.summarized == 0
    assert len(view) == before  # structure unchanged, pairs intact
    placeholder = next(d for d in view if d.get("tool_call_id") == f"call_{i}")
    assert placeholder["content"].startswith("[offloaded: sessions/t/tool_results/")
    assert_valid(cm, view)
    assert [r.tier for r in records(tmp_path, "t")] == [Tier.WARN]


def test_soft_summarizes_oldest_half_and_leaves_room(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    base(cm)
    grow(cm, 0, 0.72)
    view = cm.prepare()
    rec = cm.last_prepare
    assert rec is not None and rec.tier is Tier.SOFT
    assert rec.summarized > 0
    assert len(rec.anchors) == 5 and [a.type for a in rec.anchors] == list(ALL_ANCHOR_TYPES)
    assert any(d["content"] and str(d["content"]).startswith("[Context Compaction]") for d in view)
    assert rec.tokens_after <= 0.60 * WINDOW  # well under the Warn line
    assert_valid(cm, view)
    # the next prepare with nothing new does not compact again
    assert cm.prepare() == view and not cm.last_prepare.changed


def test_full_summarizes_whole_head_keeps_min_tail(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    base(cm)
    grow(cm, 0, 0.85)
    view = cm.prepare()
    rec = cm.last_prepare
    assert rec is not None and rec.tier is Tier.FULL
    assert rec.preserved_tail >= 6
    tail = view[-6:]
    assert tail == [d for d in cm.view.view_dicts()[-6:]]
    assert rec.tokens_after < 0.5 * WINDOW
    assert_valid(cm, view)
    assert "step" in rec.summary_text or rec.anchors[1].content != "N/A"


def test_emergency_never_calls_the_llm(tmp_path: Path) -> None:
    llm = ScriptedLLM([])  # strict: any call would fail the test via assert_done / records
    cm = manager(tmp_path, summarizer=LLMSummarizer(llm, context_window=WINDOW))
    base(cm)
    grow(cm, 0, 0.97)
    view = cm.prepare()
    rec = cm.last_prepare
    assert rec is not None and rec.tier is Tier.EMERGENCY
    assert rec.error.startswith("emergency fallback: forced truncation")
    assert llm.calls == []
    assert rec.tokens_after <= 0.5 * WINDOW
    assert_valid(cm, view)


def test_llm_summary_is_used_for_full_and_parsed(tmp_path: Path) -> None:
    reply = (
        "## Anchors\n\n### User Intent\nFix the date parser\n\n### Execution Progress\n- ran steps\n\n"
        "### Key Decisions\n- use dateutil: robust\n\n### Tried Solutions\n- regex: failed\n\n"
        "### Next Steps\n- add tests\n\n## Summary\nWorking in src/dates.py."
    )
    llm = ScriptedLLM([reply])
    cm = manager(tmp_path, summarizer=LLMSummarizer(llm, context_window=50_000))
    base(cm)
    grow(cm, 0, 0.85)
    view = cm.prepare()
    rec = cm.last_prepare
    assert rec is not None and rec.tier is Tier.FULL and rec.error == ""
    assert len(llm.calls) == 1
    assert rec.summary_text == "Working in src/dates.py."
    assert rec.anchors[2].content.strip() == "- use dateutil: robust"
    assert rec.summarizer_input_tokens > 0 and rec.summarizer_output_tokens > 0
    comp = next(d for d in view if str(d.get("content", "")).startswith("[Context Compaction]"))
    assert "use dateutil" in comp["content"]
    llm.assert_done()


def test_llm_error_falls_back_and_is_recorded(tmp_path: Path) -> None:
    llm = ScriptedLLM([RuntimeError("boom: 503")])
    cm = manager(tmp_path, summarizer=LLMSummarizer(llm, context_window=50_000))
    base(cm)
    grow(cm, 0, 0.85)
    view = cm.prepare()
    rec = cm.last_prepare
    assert rec is not None and "LLM summary failed in TierFull" in rec.error
    assert rec.summarized > 0 and "fallback" in rec.summarizer
    assert_valid(cm, view)


def test_malformed_llm_output_still_gives_five_anchors(tmp_path: Path) -> None:
    llm = ScriptedLLM(["I could not follow the format, sorry. The parser is broken."])
    cm = manager(tmp_path, summarizer=LLMSummarizer(llm, context_window=50_000))
    base(cm)
    grow(cm, 0, 0.85)
    cm.prepare()
    rec = cm.last_prepare
    assert rec is not None
    assert len(rec.anchors) == 5
    assert "summary parse" in rec.error


def test_offload_write_error_keeps_text_and_is_recorded(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    base(cm)
    i = grow(cm, 0, 0.30, out_chars=1_000)
    cm.add_many(turn(i, 6_000))
    grow(cm, i + 1, 0.62, out_chars=1_000)
    blobs = tmp_path / "blobs"
    assert not blobs.exists()
    blobs.write_text("not a folder")  # makes every blob write fail
    view = cm.prepare()
    rec = cm.last_prepare
    assert rec is not None and rec.tier is Tier.WARN
    assert "offload failed" in rec.error
    original = next(m for m in cm.history if m.tool_call_id == f"call_{i}")
    assert any(d.get("content") == original.content for d in view)


def test_incremental_second_compaction_merges(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    base(cm)
    i = grow(cm, 0, 0.85)
    cm.prepare()
    first = cm.last_prepare
    assert first is not None and first.tier is Tier.FULL
    grow(cm, i, 0.85)
    cm.prepare()
    second = cm.last_prepare
    assert second is not None and second.changed and second.tier in (Tier.SOFT, Tier.FULL)
    # progress items of the first round survive the second (union merge); the compaction
    # message is budgeted, so the oldest may be folded into "(+N earlier items ...)" (they stay
    # in the first record)
    first_items = [x for x in first.anchors[1].items() if not x.startswith("(+")]
    second_items = second.anchors[1].items()
    missing = [x for x in first_items if x not in second_items]
    folded = sum(int(m.group(1)) for x in second_items if (m := re.match(r"\(\+(\d+) earlier", x)))
    assert first_items and len(missing) <= folded
    assert second.anchors[0] == first.anchors[0]  # the user intent is kept


def test_restart_restores_view_and_state(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    base(cm)
    grow(cm, 0, 0.85)
    view = cm.prepare()
    anchors = cm.compactor.state.last_anchors
    cm2 = manager(tmp_path)
    assert cm2.history == cm.history
    assert cm2.compactor.state.last_anchors == anchors
    assert cm2.view.view_dicts() == view


def test_newest_user_message_survives_compaction(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    base(cm)
    i = grow(cm, 0, 0.3)
    cm.add({"role": "user", "content": "Also keep the old API working."})
    grow(cm, i, 0.9)
    view = cm.prepare()
    assert {"role": "user", "content": "Also keep the old API working."} in view
    assert_valid(cm, view)


def test_manual_compact_and_callback(tmp_path: Path) -> None:
    seen: list[CompactionRecord] = []
    cm = manager(tmp_path, on_compaction=seen.append)
    base(cm)
    grow(cm, 0, 0.3)
    rec = cm.compact(force=True)
    assert rec.tier is Tier.FULL and rec.forced and rec.summarized > 0
    assert seen == [rec]
    lines = rec.notification().splitlines()
    assert len(lines) == 2 and lines[0].startswith("⚡ Context compacted [Full]")
    rec2 = cm.compact(tier="emergency")
    assert rec2.tier is Tier.EMERGENCY


def test_calibration_from_reported_usage(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    base(cm)
    grow(cm, 0, 0.3)
    cm.prepare()
    est = cm.view_tokens
    for _ in range(10):
        scale = cm.report_usage(input_tokens=int(est * 1.5))
    assert 1.3 < scale <= 1.5
    assert cm.view_tokens > est
    assert manager(tmp_path).calibration.scale == pytest.approx(scale)


def test_delete_session_cascades(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    base(cm)
    grow(cm, 0, 0.85)
    cm.prepare()
    assert records(tmp_path, "t") and cm.store.head("t") > 0
    cm.delete_session()
    assert cm.store.session("t") is None and records(tmp_path, "t") == []
    assert manager(tmp_path).history == []


def test_bad_input_is_rejected_before_anything_is_written(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    base(cm)
    with pytest.raises(InvalidMessageError) as info:
        cm.add_many(
            [
                {"role": "assistant", "content": "ok"},
                {"role": "tool", "tool_call_id": "nope", "content": "x"},
            ]
        )
    assert info.value.index == 3
    assert len(cm.history) == 2
    assert len(manager(tmp_path).history) == 2


def test_seed_interfaces_on_plain_lists(tmp_path: Path) -> None:
    from contextfold.compaction.budget import TokenBudgetCompactor
    from contextfold.compaction.progressive import ProgressiveCompactor
    from contextfold.compaction.protocols import (
        Compactor,
        ForceCompactor,
        RecordedCompactor,
        apply_compaction,
    )
    from contextfold.core.messages import Message, ToolCall

    comp = ProgressiveCompactor.standalone(WINDOW, workspace=str(tmp_path), session_id="solo")
    assert isinstance(comp, Compactor) and isinstance(comp, ForceCompactor)
    assert isinstance(comp, RecordedCompactor)
    msgs = [Message(role="system", content="s"), Message(role="user", content="task")]
    for i in range(40):
        msgs.append(Message(role="assistant", tool_calls=(ToolCall(id=f"c{i}", name="bash"),)))
        msgs.append(
            Message(role="tool", tool_call_id=f"c{i}", content=f"line {i} of output\n" * 80)
        )
    msgs.append(Message(role="tool", tool_call_id="orphan", content="no call"))  # repaired away
    view, record = apply_compaction(comp, msgs)
    assert record is not None and record.tier is not Tier.NONE
    check_view(view)
    assert view[0].text == "s" and view[1].text == "task"
    forced = comp.compact_force(msgs)
    check_view(forced)
    assert len(forced) < len(msgs)
    budget = TokenBudgetCompactor(2_000, lambda m: len(m.text) // 4 + 4)
    small = budget.compact(msgs)
    check_view(small)
    assert sum(len(m.text) // 4 + 4 for m in small) <= 2_000
    assert small[0].text == "s" and small[1].text == "task"
