"""Defects found by the design-notes audit, each with a test that fails without its fix."""

from __future__ import annotations

import json
import logging
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from contextfold import ContextManager
from contextfold.compaction.progressive import ProgressiveCompactor
from contextfold.core.config import LATE_COMPACTION_TIERS, SummaryTriggerConfig, progressive
from contextfold.core.messages import Message
from contextfold.core.records import CompactionRecord
from contextfold.core.wire import from_openai
from contextfold.errors import StorageError
from contextfold.recovery.memory_extract import ExtractiveFactExtractor
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


# ------------------------------------------------------------------ 6. record store failure


class _BrokenRecords:
    def append(self, record: CompactionRecord) -> None:
        raise StorageError("disk full")

    def list(self, session_id: str) -> list[CompactionRecord]:
        return []


def test_a_record_store_failure_is_logged_as_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    comp = ProgressiveCompactor.standalone(4_000)
    comp.record_store = _BrokenRecords()
    msgs = [from_openai(d, i) for i, d in enumerate([SYSTEM, TASK, *turns(12, words=60), NEWEST])]
    with caplog.at_level(logging.WARNING, logger="contextfold"):
        view, record = comp.compact_with_record(msgs)
    assert record.changed and len(view) < len(msgs)  # the compaction itself went through
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warned and "disk full" in warned[0].getMessage()
    assert record.id in warned[0].getMessage()


# ------------------------------------------------------------------ 7. fact extraction


def _facts(role: str, text: str) -> list[tuple[str, str]]:
    return [
        (f.kind, f.text)
        for f in ExtractiveFactExtractor().extract([Message(role=role, content=text)])
    ]


def test_facts_decision_lines_ports_and_no_prompt_fragments() -> None:
    assert _facts("assistant", "Decision: we keep SQLite for the unit tests.") == [
        ("conclusion", "Decision: we keep SQLite for the unit tests.")
    ]
    assert ("requirement", "Requirement: uploads go to the staging bucket.") in _facts(
        "user", "Requirement: uploads go to the staging bucket."
    )
    assert _facts("assistant", "I set the test database to port 5433.") == [
        ("configuration", "I set the test database to port 5433.")
    ]
    prompt = (
        "Follow these steps to resolve the issue:\n"
        "1. Find the code\n"
        "Test edge cases to ensure your fix is\n"
        "robust and complete."
    )
    texts = [t for _, t in _facts("user", prompt)]
    assert "Test edge cases to ensure your fix is" not in texts
    assert "Test edge cases to ensure your fix is robust and complete." in texts
    assert _facts("user", "Make sure the fix is") == []  # a fragment: no fact


# ------------------------------------------------------------------ 8. session_history hint


def test_session_history_pages_through_a_message_above_the_cap(tmp_path: Path) -> None:
    cm = ContextManager(workspace=tmp_path, session_id="big", context_window=128_000)
    body = "".join(f"{i:07d}\n" for i in range(60_000))  # 480,000 characters
    cm.add_many([TASK, {"role": "assistant", "content": body}])
    args: dict[str, Any] = {"sessionId": "big", "lastN": 1, "maxChars": 200_000}
    read = ""
    for _ in range(5):
        text, err = cm.toolbox.run("session_history", args)
        assert not err, text
        hint = re.search(r"read on with session_history (\{.*?\})\]", text)
        part = text.split("assistant:\n", 1)[1]
        part = re.sub(r"^\[characters [\d,]+-[\d,]+ of [\d,]+\]\n", "", part)
        read += part.split("\n… [", 1)[0].split("\n\n1 earlier message(s)", 1)[0]
        if hint is None:
            break
        nxt = json.loads(hint.group(1))
        assert nxt != args, "the hint must not repeat the same call"
        args = nxt
    assert read == body
