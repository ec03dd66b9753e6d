"""Reopening a session reads what was stored instead of re-deriving it (issue 8, cold start)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from contextfold import ContextManager
from contextfold.core.wire import to_openai
from contextfold.evidence import store as evidence_store
from contextfold.evidence.fields import call_fields, call_key
from contextfold.storage import MemoryStore, Store
from tests.conftest import load_trace, trace_files

TRACES = trace_files()[:3]


def _build(store: Store) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = []
    with ContextManager(store=store, session_id="s", context_window=6_000) as cm:
        for n, path in enumerate(TRACES):
            trace = load_trace(path)
            body = trace[1:] if n else trace
            for m in body:  # ids unique across the replayed trajectories
                m = dict(m)
                if m.get("tool_calls"):
                    m["tool_calls"] = [{**c, "id": f"{c['id']}-{n}"} for c in m["tool_calls"]]
                if m.get("role") == "tool":
                    m["tool_call_id"] = f"{m['tool_call_id']}-{n}"
                msgs.append(m)
        while msgs[-1].get("role") == "assistant" and msgs[-1].get("tool_calls"):
            msgs.pop()
        for m in msgs:
            if m.get("role") == "assistant":
                cm.prepare()
            cm.add(m)
        cm.prepare()
        assert cm.records(), "the session must have compacted for this test to mean anything"
    return msgs


@pytest.fixture(params=["sqlite", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "memory":
        return MemoryStore()
    from contextfold.storage import SQLiteStore

    return SQLiteStore(tmp_path / "ws")


def test_call_log_is_read_back_not_reparsed(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    _build(store)
    cm = ContextManager(store=store, session_id="s", context_window=6_000)
    expected = [(c.id, call_fields(c.name, c.arguments)) for m in cm.history for c in m.tool_calls]
    assert expected

    def refuse(*_: Any) -> Any:
        raise AssertionError("a stored call was parsed again")

    monkeypatch.setattr("contextfold.recovery.hooks.call_fields", refuse)
    log = cm.recovery.session_calls()
    assert list(log.positions) == [cid for cid, _ in expected]
    for pos, (_, fields) in enumerate(expected):
        assert pos in log.runs("call:" + call_key(fields.tool, fields.command, fields.shell))
    cm.close()


def test_calls_missing_from_old_events_are_derived(store: Store) -> None:
    """Events written before the fields were stored (or damaged ones) fall back to parsing."""
    _build(store)
    cm = ContextManager(store=store, session_id="s", context_window=6_000)
    derived = [c.id for m in cm.history for c in m.tool_calls]
    for i in list(cm.recovery.stored_calls)[::2]:
        cm.recovery.stored_calls[i] = [{"id": 3}]  # not the stored form: parsed again
    assert list(cm.recovery.session_calls().positions) == derived
    cm.close()


def test_session_tools_read_no_evidence_until_recall(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _build(store)
    loads: list[int] = []
    real = evidence_store.EvidenceStore._load

    def counted(self: evidence_store.EvidenceStore) -> Any:
        loads.append(1)
        return real(self)

    monkeypatch.setattr(evidence_store.EvidenceStore, "_load", counted)
    cm = ContextManager(store=store, session_id="s", context_window=6_000)
    text, failed = cm.toolbox.run("session_history", {"sessionId": "s", "lastN": 5})
    assert not failed and text
    assert loads == []
    text, failed = cm.toolbox.run("recall", {"query": "pytest"})
    assert not failed and "hit(s)" in text
    assert cm.restore("pytest")  # the same search object, kept current
    assert loads == []  # recall asks the store's index: the blocks are never read
    cm.close()


def test_reopened_view_is_the_same(store: Store) -> None:
    msgs = _build(store)
    with ContextManager(store=store, session_id="s", context_window=6_000) as cm:
        before = cm.prepare()
    with ContextManager(store=store, session_id="s", context_window=6_000) as cm:
        assert len(cm.history) == len(msgs)
        after = cm.prepare()
        assert after == before
        assert cm.view.view_dicts() == [to_openai(m) for m in cm.view.view_messages()]
