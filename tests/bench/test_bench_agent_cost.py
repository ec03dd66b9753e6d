"""The agent cost benchmark end to end on its quickest agent (Codex CLI, about 10 s): both
arms, the agent going direct to the scripted upstream (its own compaction) and through
``contextfold serve``, finish, so the table has a cost ratio."""

from __future__ import annotations

import pytest
from benchmarks.agent_cost import record, summary, table

pytestmark = pytest.mark.timeout(900)


def test_agent_cost_codex_both_arms_finish() -> None:
    rec = record("codex")
    direct, gateway = summary(rec["direct"]), summary(rec["gateway"])
    assert direct["finished"], rec["direct"]["exit_codes"]
    assert gateway["finished"], rec["gateway"]["exit_codes"]
    # going direct the history outgrows the limit: Codex compacts itself, and is not refused
    assert direct["agent_compacted"] >= 1
    assert direct["cost"] > 0 and gateway["cost"] > 0
    assert gateway["refused"] <= 1  # at most the one overflow that teaches the gateway
    rows = [line for line in table([rec]).splitlines() if line.startswith("| codex")]
    ratio = rows[1].split("|")[7].strip()
    assert float(ratio) == pytest.approx(gateway["cost"] / direct["cost"], abs=0.01)


def test_agent_cost_mini_swe_agent_going_direct_does_not_finish() -> None:
    """mini-swe-agent has no compaction of its own: going direct it stops at the limit's
    error, so the table gives it no ratio; through the gateway it finishes the session."""
    rec = record("mini-swe-agent")
    direct, gateway = summary(rec["direct"]), summary(rec["gateway"])
    assert not direct["finished"] and direct["refused"] >= 1
    assert gateway["finished"], rec["gateway"]["exit_codes"]
    assert gateway["refused"] <= 1 and gateway["compacted"] >= 1
    rows = [line for line in table([rec]).splitlines() if line.startswith("| mini-swe-agent")]
    assert [row.split("|")[7].strip() for row in rows] == ["-", "-"]
