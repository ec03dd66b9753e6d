"""Reopening reads message heads and leaves the history before the boundary unloaded.

A lazily reopened manager must behave exactly like one that read every message: the same
views, the same compactions afterwards, the same restore hits, and the part before the
boundary stays unloaded on every path that builds a view (add, prepare with compaction,
restore, the session tools)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contextfold import ContextManager
from contextfold.errors import StorageError
from contextfold.storage import MemoryStore, SQLiteStore, Store
from tests.conftest import load_trace, trace_files
from tests.support import pg_support

TRACES = trace_files()


def _renamed(trace: list[dict[str, Any]], tag: str) -> list[dict[str, Any]]:
    out = []
    for m in trace:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [{**c, "id": f"{c['id']}-{tag}"} for c in m["tool_calls"]]
        if m.get("role") == "tool":
            m["tool_call_id"] = f"{m['tool_call_id']}-{tag}"
        out.append(m)
    return out


def _messages(first: int, count: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = []
    for n in range(first, first + count):
        trace = load_trace(TRACES[n])
        msgs.extend(_renamed(trace if not msgs else trace[1:], f"t{n}"))
    while msgs[-1].get("role") == "assistant" and msgs[-1].get("tool_calls"):
        msgs.pop()
    return msgs


def _feed(cm: ContextManager, msgs: list[dict[str, Any]]) -> list[Any]:
    views = []
    for m in msgs:
        if m.get("role") == "assistant":
            views.append(cm.prepare())
        cm.add(m)
    views.append(cm.prepare())
    return views


@pytest.fixture(params=["sqlite", "memory", "postgresql"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Store, Store]]:
    """Two stores holding the same session: one reopened lazily, one read entirely."""
    factory = None
    if request.param == "memory":
        pair: tuple[Store, Store] = (MemoryStore(), MemoryStore())
    elif request.param == "sqlite":
        pair = (SQLiteStore(tmp_path / "a"), SQLiteStore(tmp_path / "b"))
    else:
        factory = pg_support.SchemaFactory(pg_support.require_postgres())
        pair = (factory.open(), factory.open())
    try:
        for store in pair:
            with ContextManager(store=store, session_id="s", context_window=6_000) as cm:
                _feed(cm, _messages(0, 3))
                assert cm.records()
        yield pair
    finally:
        if factory is not None:
            factory.cleanup()


def _open(store: Store) -> ContextManager:
    return ContextManager(store=store, session_id="s", context_window=6_000)


def _open_full(store: Store, monkeypatch: pytest.MonkeyPatch) -> ContextManager:
    with monkeypatch.context() as m:
        m.setattr("contextfold.engine.reopen.load_lazily", lambda cm: None)
        return _open(store)


QUERY = "show me the full error output of `python reproduce_issue.py`"


def test_lazy_reopen_behaves_like_a_full_read(
    stores: tuple[Store, Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    lazy, full = _open(stores[0]), _open_full(stores[1], monkeypatch)
    assert not lazy.view.complete, "the history before the boundary should not be loaded"
    assert full.view.complete
    assert lazy.prepare() == full.prepare()
    assert lazy.view.view_tokens() == full.view.view_tokens()
    compactions = len(lazy.records())
    for m in _messages(5, 2):
        if m.get("role") == "assistant":
            assert lazy.prepare() == full.prepare()
        assert lazy.add(m) == full.add(m)
    assert lazy.prepare() == full.prepare()
    assert len(lazy.records()) > compactions, "the continued session must compact again"
    assert not lazy.view.complete, "adding and compacting loaded the old history"
    assert not lazy.view.complete
    assert lazy.recovery.read_stored_calls is not None, "compacting read the calls' details"
    calls, ref = lazy.recovery.session_calls(), full.recovery.session_calls()
    assert lazy.view.call_positions() == calls.positions == full.view.call_positions()
    assert len(calls) > 100 and calls.positions == ref.positions
    assert calls._fields == ref._fields and calls.edits == ref.edits
    hits = [(h.pointer.id, h.text) for h in lazy.restore(QUERY)]
    assert hits and hits == [(h.pointer.id, h.text) for h in full.restore(QUERY)]
    text, failed = lazy.toolbox.run("session_history", {"sessionId": "s", "lastN": 5})
    assert not failed and text
    assert not lazy.view.complete, "restore or the session tools loaded the old history"
    # a path that needs the old messages loads them; the view does not change
    view = lazy.prepare()
    assert lazy.history == full.history
    assert lazy.view.complete
    assert lazy.prepare() == view
    assert lazy.view.forms == full.view.forms
    assert lazy.compactor.state.offload_policies == full.compactor.state.offload_policies
    lazy.close()
    full.close()
    # reopened again (the state saved by the lazy manager): still the same view
    again, ref = _open(stores[0]), _open_full(stores[1], monkeypatch)
    assert again.prepare() == ref.prepare()
    again.close()
    ref.close()


def test_events_without_heads_are_read_entirely(tmp_path: Path) -> None:
    """Sessions written before heads existed open through a full read, with the same view."""
    store = SQLiteStore(tmp_path / "ws")
    with ContextManager(store=store, session_id="s", context_window=6_000) as cm:
        _feed(cm, _messages(0, 2))
        before = cm.prepare()
    con = store._con()
    con.execute("UPDATE events SET head = NULL WHERE seq % 7 = 3")
    cm = _open(store)
    assert cm.view.complete
    assert cm.prepare() == before
    cm.close()


@pytest.mark.parametrize(
    "damage",
    [
        "UPDATE events SET head = '[1, 2]' WHERE seq = "
        "(SELECT min(seq) FROM events WHERE kind = 'message' AND seq >= 5)",
        "UPDATE events SET head = json_set(head, '$[1]', 'other') WHERE seq = "
        "(SELECT min(seq) FROM events WHERE kind = 'message' AND seq >= 40)",
        "UPDATE events SET head = json_set(head, '$[0]', 999) WHERE seq = "
        "(SELECT min(seq) FROM events WHERE kind = 'message' AND seq >= 12)",
        "UPDATE events SET head = json_set(head, '$[4]', json('null')) WHERE "
        "json_extract(head, '$[2]') = 'tool' AND seq > 30",
        "UPDATE events SET head = json_set(head, '$[5]', json('[7]')) WHERE "
        "json_extract(head, '$[5]') IS NOT NULL AND seq > 30",
        "UPDATE events SET head = json_set(head, '$[3]', 'many') WHERE seq = "
        "(SELECT min(seq) FROM events WHERE kind = 'message' AND seq >= 20)",
        "UPDATE events SET head = '{\"pos\": 3}' WHERE seq = "
        "(SELECT min(seq) FROM events WHERE kind = 'message' AND seq >= 3)",
    ],
)
def test_damaged_heads_fall_back_to_the_messages(tmp_path: Path, damage: str) -> None:
    store = SQLiteStore(tmp_path / "ws")
    with ContextManager(store=store, session_id="s", context_window=6_000) as cm:
        _feed(cm, _messages(0, 2))
        before = cm.prepare()
    assert store._con().execute(damage).rowcount > 0
    cm = _open(store)
    if not cm.view.complete:  # a plausible head of a message the reopen did not load
        assert "'other'" in damage
        assert cm.prepare() == before
        with pytest.raises(StorageError, match="does not match its head"):
            cm.history[0]
        assert cm.prepare() == before  # the view is kept
        cm.close()
        return
    assert cm.prepare() == before
    assert len(cm.history) == cm.store.session("s").messages  # type: ignore[union-attr]
    cm.close()


def test_message_at_reads_one_message(stores: tuple[Store, Store]) -> None:
    lazy = _open(stores[0])
    assert not lazy.view.complete
    full_history = _open(stores[1]).history
    for i in (1, 7, len(full_history) // 2):
        assert lazy.message_at(i) == full_history[i]
    assert not lazy.view.complete
    lazy.close()


def test_history_that_cannot_be_read_back_is_a_clear_error(
    stores: tuple[Store, Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Old messages the log no longer has: StorageError naming the position, view unchanged,
    and the next use tries again."""
    lazy = _open(stores[0])
    view = lazy.prepare()
    real = lazy.view._loader
    assert real is not None
    monkeypatch.setattr(lazy.view, "_loader", lambda positions: {})
    with pytest.raises(StorageError, match="could not be read back"):
        lazy.history  # noqa: B018
    assert not lazy.view.complete
    assert lazy.prepare() == view
    monkeypatch.setattr(lazy.view, "_loader", real)
    assert len(lazy.history) == len(lazy.view) and lazy.view.complete
    lazy.close()


def test_a_callers_key_is_kept_in_the_head(tmp_path: Path) -> None:
    """A message's ``cf_fingerprint`` metadata is stored in its head (read back without the
    message); heads with it reopen lazily like the others."""
    from contextfold.core.messages import Message
    from contextfold.recovery.sessions.log import HEAD_KEY

    store = SQLiteStore(tmp_path / "ws")
    with ContextManager(store=store, session_id="s", context_window=6_000) as cm:
        _feed(cm, _messages(0, 2))
        cm.add(Message(role="user", content="keyed", metadata={HEAD_KEY: "k-1"}))
        cm.add(Message(role="assistant", content="ok", metadata={HEAD_KEY: 7}))  # not a str
        before = cm.prepare()
    heads = store.read_heads("s", kinds=["message"])
    assert heads[-2].head[6:] == ["k-1"]  # type: ignore[index]
    assert len(heads[-1].head) == 6  # type: ignore[arg-type]
    cm = _open(store)
    assert not cm.view.complete
    assert cm.prepare() == before
    cm.close()
