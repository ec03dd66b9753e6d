"""Regressions for defects found in review: each test reproduces one defect that was fixed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contextfold import ContextManager
from contextfold.core.config import ContextConfig, TierConfig
from contextfold.core.messages import check_view
from contextfold.core.tokens import count_tools
from contextfold.core.wire import from_anthropic, from_openai
from contextfold.errors import InvalidMessageError
from tests.support.store_helpers import blob


def valid(view: list[dict[str, Any]]) -> None:
    check_view([from_openai(d, i) for i, d in enumerate(view)])


def call(cid: str, args: dict[str, Any], name: str = "bash") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": cid,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
        ],
    }


def test_compaction_message_stays_within_its_budget_over_many_rounds(tmp_path: Path) -> None:
    cm = ContextManager(workspace=tmp_path, session_id="b", context_window=8_000)
    cm.add({"role": "system", "content": "You are an agent."})
    cm.add({"role": "user", "content": "Fix all bugs"})
    for t in range(250):
        cm.add(call(f"c{t}", {"command": f"pytest tests/test_{t}.py"}))
        cm.add(
            {
                "role": "tool",
                "tool_call_id": f"c{t}",
                "content": f"FAILED tests/test_{t}.py - ValueError: e{t}\n" * 30,
            }
        )
        view = cm.prepare()
        assert cm.view_tokens <= 8_000
    assert cm.view.compaction is not None
    assert cm.counter.count_text(cm.view.compaction.text) <= cm.compactor.compaction_budget
    valid(view)


def test_calibration_is_not_fooled_by_tool_schemas(tmp_path: Path) -> None:
    cm = ContextManager(workspace=tmp_path, session_id="c", context_window=128_000)
    tools = [
        {
            "type": "function",
            "function": {
                "name": f"t{i}",
                "description": "does a thing " * 40,
                "parameters": {"type": "object", "properties": {}},
            },
        }
        for i in range(20)
    ]
    schema_tokens = count_tools(cm.counter, tools)
    cm.add({"role": "system", "content": "Rule. " * 2_000})
    cm.add({"role": "user", "content": "hi"})
    for _ in range(6):
        cm.prepare(tools=tools)
        scale = cm.report_usage(input_tokens=cm.view.view_tokens() + schema_tokens)
    assert scale == pytest.approx(1.0, abs=0.01)


def test_huge_tool_call_arguments_are_squeezed_into_the_window(tmp_path: Path) -> None:
    cm = ContextManager(workspace=tmp_path, session_id="a", context_window=8_000)
    cm.add({"role": "system", "content": "sys"})
    cm.add({"role": "user", "content": "write the file"})
    body = "print('hi')\n" * 5_000
    cm.add(call("c1", {"path": "a.py", "content": body}, name="write_file"))
    cm.add({"role": "tool", "tool_call_id": "c1", "content": "ok"})
    view = cm.prepare()
    assert cm.view_tokens <= 8_000
    valid(view)
    assistant = next(d for d in view if d.get("tool_calls"))
    args = json.loads(assistant["tool_calls"][0]["function"]["arguments"])
    assert args["path"] == "a.py" and "truncated" in args["content"]
    # the full arguments are on disk and survive a reopen
    entry = next(e for k, e in cm.offloaded().items() if k.startswith("args-"))
    saved = json.loads(blob(tmp_path, entry.sha256))
    assert json.loads(saved[0]["arguments"])["content"] == body
    again = ContextManager(workspace=tmp_path, session_id="a", context_window=8_000)
    assert again.view.view_dicts() == view
    assert json.loads(cm.history[2].tool_calls[0].arguments)["content"] == body  # history intact


def test_interrupted_block_only_tool_use_is_not_an_empty_message(tmp_path: Path) -> None:
    cm = ContextManager(workspace=tmp_path, session_id="e", context_window=16_000)
    for m in from_anthropic(
        [
            {"role": "user", "content": "list files"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"cmd": "ls"}}
                ],
            },
            {"role": "user", "content": "stop, do something else"},
        ],
        system="sys",
    ):
        cm.add(m)
    anthropic = cm.prepare(format="anthropic")["messages"]
    assert anthropic[1]["content"] not in ([], "", None)
    openai = cm.prepare()
    assert openai[2]["content"] and not openai[2].get("tool_calls")
    valid(openai)


def test_delete_session_forgets_state_and_intents(tmp_path: Path) -> None:
    def fill(cm: ContextManager, last: str) -> None:
        cm.add({"role": "system", "content": "sys"})
        cm.add({"role": "user", "content": "fix"})
        for i in range(12):
            cm.add(call(f"c{i}", {"command": "pytest"}))
            cm.add(
                {
                    "role": "tool",
                    "tool_call_id": f"c{i}",
                    "content": "Traceback (most recent call last):\nValueError: boom\n" * 20,
                }
            )
        cm.add({"role": "user", "content": last})

    cm = ContextManager(workspace=tmp_path, session_id="d", context_window=32_000)
    cm.state.set_todos([{"content": "OLD TODO", "status": "pending"}])
    cm.save_session_state()
    fill(cm, "what was the full error output of pytest?")
    cm.compact()
    cm.prepare()
    cm.delete_session()
    fill(cm, "thanks, that's all. bye")
    cm.compact()
    view = cm.prepare()
    text = json.dumps(view)
    assert "OLD TODO" not in text and "<system-reminder>" not in text
    fresh = ContextManager(workspace=tmp_path / "other", session_id="d", context_window=32_000)
    fill(fresh, "thanks, that's all. bye")
    fresh.compact()
    assert fresh.prepare() == view


def test_later_system_messages_stay_in_the_view(tmp_path: Path) -> None:
    cm = ContextManager(workspace=tmp_path, session_id="m", context_window=16_000)
    cm.add({"role": "system", "content": "You are an agent."})
    cm.add({"role": "user", "content": "task"})
    cm.add({"role": "assistant", "content": "ok"})
    cm.add({"role": "system", "content": "POLICY UPDATE: never run rm -rf"})
    for i in range(30):
        cm.add(call(f"c{i}", {}))
        cm.add({"role": "tool", "tool_call_id": f"c{i}", "content": "out\n" * 300})
    cm.add({"role": "user", "content": "continue"})
    cm.compact()
    view = cm.prepare()
    assert {"role": "system", "content": "POLICY UPDATE: never run rm -rf"} in view
    assert "POLICY UPDATE" in str(cm.prepare(format="anthropic")["system"])
    valid(view)


def test_copy_true_is_a_deep_copy(tmp_path: Path) -> None:
    cm = ContextManager(workspace=tmp_path, session_id="k", context_window=16_000)
    cm.add({"role": "user", "content": [{"type": "text", "text": "describe"}]})
    mine = cm.prepare(copy=True)
    mine[0]["content"][0]["cache_control"] = {"type": "ephemeral"}
    assert cm.prepare()[0]["content"] == [{"type": "text", "text": "describe"}]


def test_compact_while_a_tool_runs_keeps_the_call(tmp_path: Path) -> None:
    cfg = ContextConfig(tiers=TierConfig(min_tail_messages=0))
    cm = ContextManager(workspace=tmp_path, session_id="t", context_window=16_000, config=cfg)
    cm.add({"role": "system", "content": "sys"})
    cm.add({"role": "user", "content": "go"})
    cm.add(call("c1", {}))
    cm.compact()
    cm.add({"role": "tool", "tool_call_id": "c1", "content": "result"})
    valid(cm.prepare())


def test_corrupt_state_file_fails_open(tmp_path: Path) -> None:
    cm = ContextManager(workspace=tmp_path, session_id="s", context_window=16_000)
    cm.add({"role": "user", "content": "hello"})
    for bad in ({"boundary": "abc"}, {"last_anchors": [{"type": "bogus", "content": 1}]}):
        cm.session.emit("state", bad)
        again = ContextManager(workspace=tmp_path, session_id="s", context_window=16_000)
        assert len(again.history) == 1
        assert any("ignored" in p for p in again.recovery.problems)


def test_summarizer_returning_bytes_fails_open(tmp_path: Path) -> None:
    class BytesSummarizer:
        def summarize(self, request: Any) -> Any:
            return b"## Summary\nbytes"

    cm = ContextManager(
        workspace=tmp_path,
        session_id="y",
        context_window=4_000,
        summarizer=BytesSummarizer(),
        fact_extractor="off",
    )
    cm.add({"role": "user", "content": "go"})
    for i in range(10):
        cm.add(call(f"c{i}", {}))
        cm.add({"role": "tool", "tool_call_id": f"c{i}", "content": f"line {i}\n" * 10})
    record = cm.compact(force=True)
    assert "not text" in record.error and record.summarized > 0
    valid(cm.prepare())


def test_lone_surrogates_are_rejected_cleanly(tmp_path: Path) -> None:
    cm = ContextManager(workspace=tmp_path, session_id="u", context_window=16_000)
    cm.add({"role": "user", "content": "go"})
    cm.add(call("c1", {}))
    with pytest.raises(InvalidMessageError, match="surrogates") as info:
        cm.add({"role": "tool", "tool_call_id": "c1", "content": "bad \udcff\udcfe bytes"})
    assert info.value.index == 2
    assert (
        len(ContextManager(workspace=tmp_path, session_id="u", context_window=16_000).history) == 2
    )


def test_a_second_writer_is_refused_instead_of_corrupting_the_log(tmp_path: Path) -> None:
    from contextfold.errors import StorageError

    one = ContextManager(workspace=tmp_path, session_id="w", context_window=16_000)
    two = ContextManager(workspace=tmp_path, session_id="w", context_window=16_000)
    one.add({"role": "user", "content": "from one"})
    with pytest.raises(StorageError, match="another writer"):
        two.add({"role": "user", "content": "from two"})
    three = ContextManager(workspace=tmp_path, session_id="w", context_window=16_000)
    assert [m.text for m in three.history] == ["from one"]
    three.add({"role": "user", "content": "from three"})
    assert (
        len(ContextManager(workspace=tmp_path, session_id="w", context_window=16_000).history) == 2
    )
