"""The emulated peers in the replay benchmark: each follows its documented policy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contextfold.bench.cli import main
from contextfold.bench.metrics import TokenCounter, content_text
from contextfold.bench.peers import (
    AnthropicClearToolUses,
    CodexAutoCompact,
    LangChainSummarization,
    OpenHandsCondenser,
    repair_pairs,
)
from contextfold.bench.replay import replay_one
from contextfold.bench.strategies import PEERS, check_pairs, make_strategy
from tests.conftest import load_trace, trace_files

TASK = "Fix the failing test in pkg/core.py (tests/test_core.py::test_add)."


def trajectory(turns: int = 40, lines: int = 30) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": TASK},
    ]
    for k in range(turns):
        cmd = f"cat > pkg/mod_{k}.py << 'EOF'\nx = {k}\nEOF" if k % 4 == 0 else f"pytest -k t{k}"
        msgs.append(
            {
                "role": "assistant",
                "content": f"Step {k}: running a command.",
                "tool_calls": [
                    {
                        "id": f"c{k}",
                        "type": "function",
                        "function": {"name": "bash", "arguments": json.dumps({"command": cmd})},
                    }
                ],
            }
        )
        body = "\n".join(f"result {k}.{j} " + "words " * 8 for j in range(lines))
        msgs.append({"role": "tool", "tool_call_id": f"c{k}", "content": body})
    return msgs


@pytest.fixture(scope="module")
def tc() -> TokenCounter:
    return TokenCounter()


def feed(strategy: Any, msgs: list[dict[str, Any]]) -> list[list[Any]]:
    """Replay like the benchmark: the messages before each assistant message, then prepare."""
    views = []
    prev = 0
    for i, m in enumerate(msgs):
        if m["role"] == "assistant" and i:
            strategy.add(msgs[prev:i])
            prev = i
            views.append(strategy.prepare().view)
    return views


def test_anthropic_clear_keeps_the_newest_three_results_once_over_the_trigger(
    tc: TokenCounter,
) -> None:
    msgs = trajectory()
    window = 8_000
    s = AnthropicClearToolUses(window, tc)
    assert s.trigger == 4_000  # 100,000 of a 200,000 window: half of the replayed window
    views = feed(s, msgs)
    last = views[-1]
    results = [m for m in last if m["role"] == "tool"]
    kept = [m for m in results if m["content"] != "[cleared]"]
    assert len(kept) == 3 and results[-3:] == kept
    # tool inputs stay, nothing is removed, the task stays
    assert len(last) == len(msgs[: len(last)])
    assert last[1]["content"] == TASK
    assert s.recover("c0") is None
    # below the trigger nothing changes
    small = AnthropicClearToolUses(10_000_000, tc)
    assert feed(small, msgs)[-1] == msgs[: len(last)]


def test_codex_compacts_at_90_percent_into_users_and_a_summary(tc: TokenCounter) -> None:
    msgs = trajectory()
    s = CodexAutoCompact(6_000, tc)
    steps = []
    prev = 0
    for i, m in enumerate(msgs):
        if m["role"] == "assistant" and i:
            s.add(msgs[prev:i])
            prev = i
            steps.append(s.prepare())
    compacted = [k for k, st in enumerate(steps) if st.tier == "compact"]
    assert compacted
    before = steps[compacted[0] - 1].view
    assert tc.view(before) < 0.9 * 6_000
    after = steps[compacted[0]].view
    assert [m["role"] for m in after] == ["system", "user", "user"]
    assert after[1]["content"] == TASK
    assert "compacted" in after[2]["content"]
    for st in steps:
        assert check_pairs(st.view) == []


def test_langchain_keeps_20_messages_and_summarizes_the_task_away(tc: TokenCounter) -> None:
    msgs = trajectory()
    s = LangChainSummarization(6_000, tc)
    views = feed(s, msgs)
    summarized = [v for v in views if v[1]["content"].startswith("Here is a summary")]
    assert summarized
    first = summarized[0]
    assert first[0]["role"] == "system"
    assert len(first) in (22, 23)  # system + summary + 20 kept (one more to keep a pair)
    assert first[2]["role"] == "assistant"
    assert all(m["content"] != TASK for m in first)
    for v in views:
        assert check_pairs(v) == []


def test_openhands_condenses_past_120_events_to_half(tc: TokenCounter) -> None:
    msgs = trajectory(turns=70, lines=2)
    s = OpenHandsCondenser(10_000_000, tc)
    views = feed(s, msgs)
    sizes = [len(v) for v in views]
    assert max(sizes) <= 121
    drop = next(k for k in range(1, len(sizes)) if sizes[k] < sizes[k - 1])
    condensed = views[drop]
    # the first 4 events, one summary, the newest 55 (a call whose result was cut is dropped)
    assert condensed[:2] == msgs[:2]
    assert 58 <= len(condensed) <= 61
    for v in views:
        assert check_pairs(v) == []


def test_repair_pairs_drops_orphans() -> None:
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "a", "type": "function", "function": {"name": "x"}}],
    }
    view = [{"role": "tool", "tool_call_id": "z", "content": "orphan"}, call]
    assert repair_pairs(view) == []
    ok = [call, {"role": "tool", "tool_call_id": "a", "content": "r"}]
    assert repair_pairs(ok) == ok


@pytest.mark.parametrize("name", PEERS)
def test_peers_on_real_traces_are_pair_valid(name: str, tc: TokenCounter) -> None:
    path = trace_files()[0]
    msgs = load_trace(path)
    s = make_strategy(name, 32_000, tc)
    for view in feed(s, msgs):
        assert check_pairs(view) == []
        assert all(isinstance(content_text(m.get("content")), str) for m in view)
    run = replay_one(msgs, name, 32_000)
    assert run["tool_outputs_recoverable"] == 0


def test_cli_runs_peers_on_a_users_own_traces(tmp_path: Path) -> None:
    traces = tmp_path / "mine"
    traces.mkdir()
    (traces / "a.json").write_text(json.dumps(trajectory()), encoding="utf-8")
    out = tmp_path / "out"
    code = main(
        [
            "--traces",
            str(traces),
            "--window",
            "6000",
            "--strategies",
            "raw," + ",".join(PEERS) + ",progressive",
            "--out",
            str(out),
            "--no-progress",
            "--plain",
        ]
    )
    assert code == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    per = results["aggregates"]["6000"]
    for name in PEERS:
        assert per[name]["available"] and per[name]["recoverability_pct"] in (0.0, None)
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "Per strategy" in page and page.count("<svg") >= len(PEERS) + 2
    assert "http://" not in page.replace("http://www.w3.org", "")
    assert sorted(p.name for p in traces.iterdir()) == ["a.json"]  # nothing written there


def test_targets_hold_the_default_to_every_peer_and_the_window_limit() -> None:
    from contextfold.bench.cli import evaluate_targets

    def agg(cost: float, **kw: Any) -> dict[str, Any]:
        base = {
            "available": True,
            "overflows": 0,
            "retention_first_pct": 100.0,
            "retention_newest_pct": 100.0,
            "recoverability_pct": 100.0,
            "tool_outputs_left": 10,
            "cost_vs_raw": cost,
            "artifact_recall_pct": 100.0,
            "prepare_p50_ms": 0.2,
        }
        return {**base, **kw}

    per = {"progressive": agg(0.70), "codex-compact": agg(0.71), "mask": agg(1.9)}
    got = {t["text"].split(" (")[0]: t["met"] for t in evaluate_targets({"128000": per}, 128_000)}
    assert got["progressive: cache-aware cost <= 80% of raw"] is True
    assert got["progressive: cheaper than every peer"] is True
    got = {t["text"].split(" (")[0]: t["met"] for t in evaluate_targets({"32000": per}, 32_000)}
    assert got["progressive: cache-aware cost <= 60% of raw"] is False
    per["codex-compact"] = agg(0.69)
    got = {t["text"].split(" (")[0]: t["met"] for t in evaluate_targets({"32000": per}, 32_000)}
    assert got["progressive: cheaper than every peer"] is False
