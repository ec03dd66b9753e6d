"""Seed 002 2.2: large tool-result eviction at ingest, and seed 000's ingest offload."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from contextfold import ContextManager
from contextfold.core.config import ContextConfig, EvictionConfig, SummaryTriggerConfig, harness
from contextfold.core.messages import check_view
from contextfold.core.wire import from_openai
from tests.support.store_helpers import blob, offloads


class QuarterCounter:
    name = "quarter"

    def count_text(self, text: str) -> int:
        return len(text) // 4


def big_output(lines: int = 2_600) -> str:
    # 42 chars a line: 2,600 lines are ~109,000 characters, with a non-ASCII line in the middle
    out = [f"line {i:05d} " + "abcdefghij" * 3 for i in range(lines)]
    out[lines // 2] = "ünïcødé 中文 line — keep me byte-exact"
    return "\n".join(out)


def manager(tmp_path: Path, config: ContextConfig, **kw: Any) -> ContextManager:
    kw.setdefault("context_window", 200_000)
    return ContextManager(
        workspace=tmp_path / "ws",
        session_id="e",
        token_counter=QuarterCounter(),
        config=config,
        **kw,
    )


def call_and_result(call_id: str, tool: str, text: str) -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": tool, "arguments": json.dumps({"arg": call_id})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": text},
    ]


def start(cm: ContextManager) -> None:
    cm.add({"role": "system", "content": "You are a coding agent."})
    cm.add({"role": "user", "content": "Find out why the build is slow."})


def tool_content(view: list[dict[str, Any]], call_id: str) -> str:
    return str(next(d["content"] for d in view if d.get("tool_call_id") == call_id))


def read_offloaded(cm: ContextManager, **args: Any) -> str:
    msg = cm.handle_tool_call(
        {
            "id": "r1",
            "type": "function",
            "function": {"name": "read_offloaded", "arguments": json.dumps(args)},
        }
    )
    assert msg["role"] == "tool" and msg["tool_call_id"] == "r1"
    return str(msg["content"])


def read_all_pages(cm: ContextManager, limit: int, **ref: Any) -> list[str]:
    lines: list[str] = []
    offset = 0
    while True:
        page = read_offloaded(cm, offset=offset, limit=limit, **ref)
        header, *body = page.split("\n")
        assert re.match(r"^\[.+ \| lines \d+-\d+ of \d+ \| sha256 ok\]$", header), header
        if body and body[-1].startswith("[... "):
            assert body[-1].endswith(f"offset={offset + limit}]")
            body = body[:-1]
            lines += body
            offset += limit
            continue
        lines += body
        return lines


# ------------------------------------------------------------------------------- eviction


def test_bash_result_above_80k_keeps_head_tail_and_a_pointer(tmp_path: Path) -> None:
    cm = manager(tmp_path, harness(eviction=EvictionConfig()))
    start(cm)
    text = big_output()
    assert len(text) > 80_000
    cm.add_many(call_and_result("call_big", "bash", text))
    view = cm.prepare()
    check_view([from_openai(d, i) for i, d in enumerate(view)])
    shown = tool_content(view, "call_big")
    assert len(shown) < 2_000 + 2_000 + 800
    head, tail = text[:2_000], text[-2_000:]
    assert head in shown and tail in shown
    assert shown.index(head) < shown.index(tail)
    assert f"[{len(text) - 4_000} characters omitted]" in shown
    path = "sessions/e/tool_results/call_big.txt"
    last = shown.splitlines()[-1]
    assert path in last and 'read_offloaded(id="call_big")' in last and "offset/limit" in last
    # the full history keeps every byte
    assert cm.history[-1].content == text
    # the stored bytes are exact and their sha256 is recorded
    entry = cm.eviction_store.get("call_big")
    assert entry is not None
    data = blob(tmp_path / "ws", entry.sha256)
    assert data == text.encode("utf-8")
    assert entry is not None and entry.policy == "eviction" and entry.tool_name == "bash"
    assert entry.sha256 == hashlib.sha256(data).hexdigest()
    assert entry.sha256[:16] in shown
    assert cm.recover_tool_result("call_big") == text


def test_read_offloaded_pages_back_the_exact_text(tmp_path: Path) -> None:
    cm = manager(tmp_path, harness(eviction=EvictionConfig()))
    start(cm)
    text = big_output()
    cm.add_many(call_and_result("call_big", "bash", text))
    cm.prepare()
    first = read_offloaded(cm, id="call_big", offset=0, limit=3)
    assert first.splitlines()[1:4] == text.splitlines()[:3]
    assert "call again with offset=3" in first
    assert read_all_pages(cm, 700, id="call_big") == text.splitlines()
    by_path = read_offloaded(cm, path="sessions/e/tool_results/call_big.txt", offset=1300, limit=1)
    assert by_path.splitlines()[1] == "ünïcødé 中文 line — keep me byte-exact"
    # errors come back as a tool message, not an exception
    bad = read_offloaded(cm, id="nope")
    assert bad.startswith("Error")
    outside = read_offloaded(cm, path="../../etc/passwd")
    assert outside.startswith("Error")


def test_threshold_is_strictly_above_80k(tmp_path: Path) -> None:
    cm = manager(tmp_path, harness(eviction=EvictionConfig()))
    start(cm)
    exact = "e" * 80_000
    cm.add_many(call_and_result("c_at", "bash", exact))
    cm.add_many(call_and_result("c_over", "shell", "o" * 80_001))
    view = cm.prepare()
    assert tool_content(view, "c_at") == exact
    assert tool_content(view, "c_over").startswith("[evicted: ")


@pytest.mark.parametrize("tool", ["read_file", "memory_search", "grep_files", "session_search"])
def test_excluded_tools_are_not_evicted(tmp_path: Path, tool: str) -> None:
    cm = manager(tmp_path, harness(eviction=EvictionConfig()))
    start(cm)
    text = big_output()
    cm.add_many(call_and_result("call_x", tool, text))
    view = cm.prepare()
    assert tool_content(view, "call_x") == text
    assert cm.eviction_store.get("call_x") is None
    assert offloads(tmp_path / "ws", "e") == []


def test_custom_exclusion_patterns(tmp_path: Path) -> None:
    cfg = harness(eviction=EvictionConfig(max_chars=5_000, exclude_tools=("db_*",)))
    cm = manager(tmp_path, cfg)
    start(cm)
    cm.add_many(call_and_result("c1", "db_query", "d" * 9_000))
    cm.add_many(call_and_result("c2", "read_file", "r" * 9_000))  # no longer excluded
    view = cm.prepare()
    assert tool_content(view, "c1") == "d" * 9_000
    assert tool_content(view, "c2").startswith("[evicted: ")


def test_custom_offload_root_is_the_one_store(tmp_path: Path) -> None:
    root = tmp_path / "tool_offload"
    cfg = harness(eviction=EvictionConfig(max_chars=100_000, offload_root=root))
    cm = manager(tmp_path, cfg)
    start(cm)
    text = big_output(3_000)
    assert len(text) > 100_000
    cm.add_many(call_and_result("call_big", "bash", text))
    cm.add_many(call_and_result("call_small", "bash", big_output(2_000)))  # < 100,000
    view = cm.prepare()
    shown = tool_content(view, "call_big")
    # one folder per session under the custom root, so sessions never collide
    assert str(root / "e" / "call_big.txt") in shown.splitlines()[-1]
    assert tool_content(view, "call_small") == big_output(2_000)
    assert (root / "e" / "call_big.txt").read_bytes() == text.encode("utf-8")
    # no second offload copy: nothing in the session's own tool_results folder
    assert not (tmp_path / "ws/sessions/e/tool_results").exists()
    offload_copies = [
        p
        for p in tmp_path.rglob("*.txt")
        if p.read_bytes() == text.encode("utf-8") and "evidence" not in p.parts
    ]
    assert offload_copies == [root / "e" / "call_big.txt"]
    assert read_all_pages(cm, 1_000, id="call_big") == text.splitlines()
    assert cm.recover_tool_result("call_big") == text
    # reopening restores the placeholder from the same store
    again = manager(tmp_path, cfg)
    assert tool_content(again.prepare(), "call_big") == shown
    # deleting the session removes the evicted files in the custom root too
    again.delete_session()
    assert not (root / "e").exists()
    assert again.history == [] and again.offloaded() == {}


def test_compaction_lists_results_evicted_to_a_custom_root(tmp_path: Path) -> None:
    root = tmp_path / "tool_offload"
    cfg = harness(
        eviction=EvictionConfig(offload_root=root),
        summary=SummaryTriggerConfig(trigger_messages=10, keep_messages=4),
    )
    cm = manager(tmp_path, cfg)
    start(cm)
    cm.add_many(call_and_result("call_big", "bash", big_output()))
    for i in range(4):
        cm.add_many(call_and_result(f"c{i}", "bash", "ok"))
    view = cm.prepare()
    assert cm.last_prepare is not None and cm.last_prepare.changed
    text = next(str(d["content"]) for d in view if "[Context Compaction]" in str(d["content"]))
    assert "## Offloaded References" in text
    assert "call_big" in text.split("## Offloaded References")[1]


def test_compaction_lists_results_evicted_to_the_default_root(tmp_path: Path) -> None:
    cfg = harness(
        eviction=EvictionConfig(),
        summary=SummaryTriggerConfig(trigger_messages=10, keep_messages=4),
    )
    cm = manager(tmp_path, cfg)
    start(cm)
    cm.add_many(call_and_result("call_big", "bash", big_output()))
    for i in range(4):
        cm.add_many(call_and_result(f"c{i}", "bash", "ok"))
    view = cm.prepare()
    text = next(str(d["content"]) for d in view if "[Context Compaction]" in str(d["content"]))
    refs = text.split("## Offloaded References")[1]
    assert "sessions/e/tool_results/call_big.txt" in refs and "bash" in refs


def test_eviction_write_error_keeps_the_text(tmp_path: Path) -> None:
    root = tmp_path / "blocked"
    root.write_text("a file where the folder should be", encoding="utf-8")
    cm = manager(tmp_path, harness(eviction=EvictionConfig(offload_root=root)))
    start(cm)
    text = big_output()
    cm.add_many(call_and_result("call_big", "bash", text))
    view = cm.prepare()
    assert tool_content(view, "call_big") == text  # fail-open
    assert any("call_big" in p for p in cm.recovery.problems)


# ------------------------------------------------------------------------------- progressive


def test_progressive_ingest_offload_above_10k_uses_the_preview(tmp_path: Path) -> None:
    cm = ContextManager(
        workspace=tmp_path / "ws",
        session_id="e",
        token_counter=QuarterCounter(),
        context_window=200_000,
    )
    start(cm)
    text = "\n".join(f"row {i} " + "v" * 40 for i in range(400))  # ~18,000 chars
    small = "s" * 10_000
    cm.add_many(call_and_result("call_big", "bash", text))
    cm.add_many(call_and_result("call_small", "read_file", small))
    view = cm.prepare()
    shown = tool_content(view, "call_big")
    assert shown.startswith("[offloaded: sessions/e/tool_results/call_big.txt | 400 lines")
    assert "Preview (first 10 lines):" in shown
    assert "\n".join(text.splitlines()[:10]) in shown
    assert text.splitlines()[10] not in shown
    assert 'read_offloaded(id="call_big")' in shown
    assert tool_content(view, "call_small") == small  # exactly 10,000: kept
    entry = cm.offload.get("call_big")
    assert entry is not None and entry.policy == "ingest"
    assert blob(tmp_path / "ws", entry.sha256) == text.encode()
    assert entry.sha256 == hashlib.sha256(text.encode()).hexdigest()
    assert read_all_pages(cm, 150, id="call_big") == text.splitlines()
    assert cm.history[-3].content == text


def test_progressive_ingest_offload_applies_to_read_file_too(tmp_path: Path) -> None:
    # seed 000's hook has no exclusion list; only seed 002's eviction excludes tools
    cm = ContextManager(workspace=tmp_path / "ws", session_id="e", token_counter=QuarterCounter())
    start(cm)
    cm.add_many(call_and_result("c1", "read_file", "f" * 12_000))
    assert tool_content(cm.prepare(), "c1").startswith("[offloaded: ")


def test_both_policies_one_store(tmp_path: Path) -> None:
    """Ingest offload and eviction together: a result above 80k is evicted (head/tail), one
    between 10k and 80k is offloaded with a preview; both land in the same folder/index."""
    cfg = harness(eviction=EvictionConfig()).with_(ingest_offload_chars=10_000)
    cm = manager(tmp_path, cfg)
    start(cm)
    cm.add_many(call_and_result("huge", "bash", big_output()))
    cm.add_many(call_and_result("mid", "bash", "m\n" * 10_000))
    view = cm.prepare()
    assert tool_content(view, "huge").startswith("[evicted: sessions/e/tool_results/huge.txt")
    assert tool_content(view, "mid").startswith("[offloaded: sessions/e/tool_results/mid.txt")
    assert cm.eviction_store is cm.offload
    policies = {k: e.policy for k, e in cm.offload.entries().items()}
    assert policies == {"huge": "eviction", "mid": "ingest"}
    assert [e.tool_call_id for e in offloads(tmp_path / "ws", "e")] == ["huge", "mid"]


# ------------------------------------------------------------------------------- edge cases


@pytest.mark.parametrize("preset", ["harness", "progressive"])
def test_tool_result_as_content_blocks_is_evicted(tmp_path: Path, preset: str) -> None:
    cfg = harness(eviction=EvictionConfig()) if preset == "harness" else ContextConfig()
    cm = manager(tmp_path, cfg)
    start(cm)
    text = big_output()
    msgs = call_and_result("call_big", "bash", text)
    msgs[1]["content"] = [{"type": "text", "text": text}]
    cm.add_many(msgs)
    view = cm.prepare()
    assert len(json.dumps(view)) < 20_000
    assert cm.recover_tool_result("call_big") == text


def test_read_offloaded_pages_keep_form_feeds_and_carriage_returns(tmp_path: Path) -> None:
    cm = manager(tmp_path, harness(eviction=EvictionConfig()))
    start(cm)
    text = "".join(f"page {i}\x0cbody\r\n" for i in range(12_000))
    cm.add_many(call_and_result("call_ff", "bash", text))
    shown = tool_content(cm.prepare(), "call_ff")
    entry = cm.eviction_store.get("call_ff")
    assert entry is not None and f"{entry.lines} lines" in shown
    first = read_offloaded(cm, id="call_ff", offset=0, limit=2)
    assert f"of {entry.lines} " in first.splitlines()[0]
    assert read_all_pages(cm, 5_000, id="call_ff") == text.split("\n")[:-1]
