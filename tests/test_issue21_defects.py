"""Defects found by the design-notes audit, each with a test that fails without its fix."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from contextfold import ContextManager
from contextfold.config import LATE_COMPACTION_TIERS, SummaryTriggerConfig, progressive
from contextfold.testing import OverflowingModel, message_tokens

SYSTEM = {"role": "system", "content": "You are a coding agent. " + "Be careful. " * 300}
TASK = {"role": "user", "content": "Please fix the bug in src/app.py. " + "Context. " * 400}
NEWEST = {"role": "user", "content": "Now also update the changelog, please."}


def turns(n: int, words: int = 250) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(n):
        out.append(
            {
                "role": "assistant",
                "content": f"Step {i}: reading f{i}.",
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {
                            "name": "bash",
                            "arguments": json.dumps({"command": f"cat f{i}.txt"}),
                        },
                    }
                ],
            }
        )
        out.append(
            {
                "role": "tool",
                "tool_call_id": f"c{i}",
                "content": " ".join(f"w{i}x{j}" for j in range(words)),
            }
        )
    return out


# ------------------------------------------------------------------ 1. overflow retry fits


def test_overflow_retry_view_fits_the_window_the_error_states(tmp_path: Path) -> None:
    late = progressive().with_(tiers=LATE_COMPACTION_TIERS)
    cm = ContextManager(workspace=tmp_path, session_id="o", context_window=128_000, config=late)
    cm.add_many([SYSTEM, TASK, *turns(30), NEWEST])
    model = OverflowingModel(limit=1_500)
    cm.call(model)  # raised ContextOverflowError: the retry view was over the stated window
    assert model.overflows == 1
    assert cm.window == 1_500
    assert model.token_counts[1] <= 1_500
    assert cm.view_tokens <= cm.window
    assert message_tokens(cm.prepare()) <= 1_500


# ------------------------------------------------------------------ 2. CompactBlock fields


def test_compact_block_has_the_records_boundary_and_tokens_after(tmp_path: Path) -> None:
    cm = ContextManager(workspace=tmp_path, session_id="b", context_window=8_000)
    cm.add_many([SYSTEM, TASK, *turns(12, words=60), NEWEST])
    cm.prepare()
    summarized = [r for r in cm.records() if r.summarized]
    assert summarized, "the session must compact"
    blocks = [b for b in cm.recovery.store.blocks() if b.strategy == "progressive"]
    assert blocks
    rec, block = summarized[-1], blocks[-1]
    assert block.compact_boundary_uuid is not None
    assert block.compact_boundary_uuid == rec.boundary_uuid
    assert block.token_after == rec.tokens_after > 0
    # reopened from the store: the same fields
    again = ContextManager(workspace=tmp_path, session_id="b", context_window=8_000)
    stored = [b for b in again.recovery.store.blocks() if b.strategy == "progressive"][-1]
    assert stored.compact_boundary_uuid == rec.boundary_uuid
    assert stored.token_after == rec.tokens_after


# ------------------------------------------------------------------ 3/4. flush / offload flags

FACTFUL = [
    {"role": "user", "content": "Requirement: the service must listen on port 5433."},
    {"role": "assistant", "content": "Decision: we keep SQLite for the test suite."},
]


def _both(tmp_path: Path, trig: SummaryTriggerConfig, name: str) -> ContextManager:
    cfg = progressive().with_(summary=trig)
    cm = ContextManager(workspace=tmp_path, session_id=name, context_window=8_000, config=cfg)
    cm.add_many([SYSTEM, TASK, *FACTFUL, *turns(12, words=60), NEWEST])
    return cm


def test_flush_before_compact_false_holds_for_tier_compactions(tmp_path: Path) -> None:
    trig = SummaryTriggerConfig(
        trigger_messages=500, trigger_tokens=0, keep_messages=4, flush_before_compact=False
    )
    cm = _both(tmp_path, trig, "noflush")
    cm.prepare()
    assert [r for r in cm.records() if r.summarized and r.strategy != "summary"]
    assert "no facts stored yet" in cm.recovery.memory.get()
    on = _both(tmp_path, replace(trig, flush_before_compact=True), "flush")
    on.prepare()
    assert "5433" in on.recovery.memory.get()


def _trigger_session(tmp_path: Path, name: str, offload: bool) -> ContextManager:
    trig = SummaryTriggerConfig(
        trigger_messages=10, keep_messages=4, offload_before_compact=offload, offload_chars=1_000
    )
    cfg = progressive().with_(summary=trig, tiers=None, ingest_offload_chars=0)
    cm = ContextManager(workspace=tmp_path, session_id=name, context_window=64_000, config=cfg)
    cm.add_many([SYSTEM, TASK, *turns(8, words=400), NEWEST])
    return cm


def test_offload_before_compact_writes_the_ranges_tool_results_to_files(tmp_path: Path) -> None:
    cm = _trigger_session(tmp_path, "off-on", True)
    cm.prepare()
    (rec,) = [r for r in cm.records() if r.strategy == "summary"]
    assert rec.offloaded, "the summarized range's tool results go to files first"
    for entry in rec.offloaded:
        assert cm.recover_tool_result(entry.tool_call_id) in {
            m.content for m in cm.history if m.tool_call_id == entry.tool_call_id
        }
    cm2 = _trigger_session(tmp_path, "off-off", False)
    cm2.prepare()
    (rec2,) = [r for r in cm2.records() if r.strategy == "summary"]
    assert rec2.offloaded == ()
