"""WorkspaceTools: the agent tools over a workspace without a live session, in process."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from contextfold.engine.manager import ContextManager
from contextfold.errors import ConfigError
from contextfold.mcp import workspace_tools
from contextfold.mcp.workspace_tools import WorkspaceTools
from tests.conftest import load_trace, trace_files


def _session(ws: Path, sid: str, agent: str, n: int = 10_000) -> ContextManager:
    path = next(p for p in trace_files() if "django-15213" in p.name)
    cm = ContextManager(workspace=ws, session_id=sid, agent_id=agent, context_window=6_000)
    for i, msg in enumerate(load_trace(path)[:n]):
        if msg.get("role") == "assistant" and i > 0:
            cm.prepare()
        cm.add(msg)
    return cm


def test_same_schemas_as_the_agent_tools_plus_a_session_id(tmp_path: Path) -> None:
    cm = _session(tmp_path, "s1", "a")
    tools = WorkspaceTools(tmp_path, agent_id="a")
    ours = {t.name: t for t in tools.tools()}
    # the workspace tools only read: the agent's memory-writing tools are not among them
    writes = {"memory_add", "memory_edit", "memory_delete", "memory_flush"}
    theirs = {
        s["function"]["name"]: s["function"]
        for s in cm.tool_schemas()
        if s["function"]["name"] not in writes
    }
    assert set(ours) == set(theirs)
    assert writes <= {s["function"]["name"] for s in cm.tool_schemas()}
    for name, fn in theirs.items():
        props = dict(ours[name].parameters["properties"])
        if name in ("recall", "read_offloaded"):
            assert props.pop("sessionId")["type"] == "string"
            assert ours[name].parameters["required"] == ["sessionId"]
        assert props == fn["parameters"]["properties"], name


def test_answers_match_the_live_session_and_scoping_holds(tmp_path: Path) -> None:
    cm = _session(tmp_path, "s1", "a")
    _session(tmp_path, "s2", "b", n=20)
    call_id = next(iter(cm.offloaded()))
    live = cm.handle_tool_call(
        {"id": "x", "function": {"name": "read_offloaded", "arguments": f'{{"id": "{call_id}"}}'}}
    )["content"]
    a = WorkspaceTools(tmp_path, agent_id="a")
    text, is_error = a.call("read_offloaded", {"sessionId": "s1", "id": call_id})
    assert not is_error and text == live
    evidence = cm.recovery.store.pointers()[0].id
    live = cm.handle_tool_call(
        {"id": "y", "function": {"name": "recall", "arguments": f'{{"evidence_id": "{evidence}"}}'}}
    )["content"]
    text, is_error = a.call("recall", {"sessionId": "s1", "evidence_id": evidence})
    assert not is_error and text == live
    b = WorkspaceTools(tmp_path, agent_id="b")
    text, is_error = b.call("recall", {"sessionId": "s1", "evidence_id": evidence})
    assert is_error and "access denied: agent 'b'" in text
    everyone = WorkspaceTools(tmp_path, agent_id="b", allow_agents=["*"])
    text, is_error = everyone.call("recall", {"sessionId": "s1", "evidence_id": evidence})
    assert not is_error
    text, is_error = a.call("recall", {"evidence_id": evidence})
    assert is_error and "missing required argument 'sessionId'" in text


def test_evidence_indexes_in_memory_are_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workspace_tools, "MAX_OPEN_SESSIONS", 2)
    for i in range(4):
        _session(tmp_path, f"s{i}", "a", n=30)
    tools = WorkspaceTools(tmp_path, agent_id="a")
    for i in range(4):
        text, is_error = tools.call("recall", {"sessionId": f"s{i}", "query": "error"})
        assert not is_error, text
    assert list(tools._evidence) == ["s2", "s3"]


def test_bad_workspace_or_agent_id(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no workspace at"):
        WorkspaceTools(tmp_path / "missing")
    with pytest.raises(ConfigError, match="agent id"):
        WorkspaceTools(tmp_path, agent_id="../x")


def _first_request(ws: Path, sid: str) -> ContextManager:
    """A long first request whose evidence index and full-text rows are queued (not run)."""
    from tests.recovery.test_deferred import WINDOW, long_history

    cm = ContextManager(workspace=ws, session_id=sid, agent_id="a", context_window=WINDOW)
    cm.add_many(long_history())
    cm.prepare()
    return cm


def _ask(ws: Path, sid: str) -> tuple[str, str]:
    tools = WorkspaceTools(ws, agent_id="a")
    recall, err = tools.call("recall", {"sessionId": sid, "query": "marker17 pytest -k case17"})
    assert not err, recall
    found, err = tools.call("session_search", {"query": "marker88"})
    assert not err, found
    tools.close()
    return recall, re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+Z", "TS", found)  # when each was logged


def test_queued_indexing_runs_before_the_workspace_tools_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from contextfold.recovery.deferred import NAMESPACE

    cm = _first_request(tmp_path / "later", "s")
    assert cm.context.recovery.deferred.active  # the jobs are queued, not run
    cm.close()
    recall, found = _ask(tmp_path / "later", "s")
    assert "marker17" in recall and "marker88" in found
    tools = WorkspaceTools(tmp_path / "later")
    assert not tools.store.docs(NAMESPACE)  # the reader ran them, as the manager would
    tools.close()
    # the answers are those of a session indexed at once
    monkeypatch.setattr("contextfold.recovery.hooks.DEFER_MIN", 10**9)
    monkeypatch.setattr("contextfold.engine.ingest.DEFER_MIN", 10**9)
    now = _first_request(tmp_path / "now", "s")
    assert not now.context.recovery.deferred.active
    now.close()
    assert _ask(tmp_path / "now", "s") == (recall, found)


def test_search_across_sessions_runs_every_sessions_queued_jobs(tmp_path: Path) -> None:
    from contextfold.engine.filing import queued_sessions

    _first_request(tmp_path, "s1").close()
    _first_request(tmp_path, "s2").close()
    tools = WorkspaceTools(tmp_path, agent_id="a")
    assert queued_sessions(tools.store) == ["s1", "s2"]
    text, err = tools.call("session_search", {"query": "marker88", "limit": 5})
    assert not err and "s1" in text and "s2" in text
    assert queued_sessions(tools.store) == []
    tools.close()
