"""contextfold.engine.session_ops: list, show, delete, fork and tail on a store."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from contextfold.engine import session_ops as ops
from contextfold.engine.manager import ContextManager
from contextfold.errors import ConfigError
from contextfold.storage import open_store


def _session(ws: Path, sid: str, n: int, agent: str = "default") -> None:
    with ContextManager(workspace=ws, session_id=sid, agent_id=agent) as cm:
        cm.add({"role": "system", "content": "You are a coding agent."})
        for i in range(n - 1):
            cm.add({"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"})


def test_fork_copies_up_to_a_message_and_leaves_the_source(tmp_path: Path) -> None:
    _session(tmp_path, "src", 6, agent="a")
    store = open_store(tmp_path)
    try:
        assert ops.fork_session(store, "src", "copy", upto=3) == 4
        copy = ops.show_session(store, "copy")
        assert [e.message.text for e in copy] == [
            e.message.text for e in ops.show_session(store, "src", stop=4)
        ]
        assert ops.get_session(store, "copy").agent_id == "a"
        assert ops.get_session(store, "src").messages == 6
        with pytest.raises(ConfigError, match="already exists"):
            ops.fork_session(store, "src", "copy")
        with pytest.raises(ConfigError, match="no message 6"):
            ops.fork_session(store, "src", "other", upto=6)
        assert store.session("other") is None  # refused before writing
        assert [i.session_id for i in ops.list_sessions(store, "a")] == ["copy", "src"]
        assert ops.delete_session(store, "copy").messages == 4
        with pytest.raises(ConfigError, match="no session 'copy'"):
            ops.show_session(store, "copy")
    finally:
        store.close()


def _own_rows(ws: Path, sid: str) -> int:
    con = sqlite3.connect(ws / "store.sqlite")
    try:
        row = con.execute("SELECT count(*) FROM events WHERE session_id=?", (sid,)).fetchone()
        return int(row[0])
    finally:
        con.close()


def test_fork_shares_the_source_history_and_continues_on_its_own(tmp_path: Path) -> None:
    """A fork by the same agent is a branch: the source's messages are stored once, the fork
    stores what is added to it, reads as one session, and outlives its source."""
    _session(tmp_path, "src", 6, agent="a")
    store = open_store(tmp_path)
    try:
        before = _own_rows(tmp_path, "src")
        assert ops.fork_session(store, "src", "copy", upto=3) == 4
        info = ops.get_session(store, "copy")
        assert (info.parent_id, info.messages) == ("src", 4)
        assert _own_rows(tmp_path, "copy") == 0 and _own_rows(tmp_path, "src") == before
        with ContextManager(store=store, session_id="copy", agent_id="a") as cm:
            cm.add({"role": "user", "content": "a different turn"})
            assert [m["content"] for m in cm.prepare()][-2:] == ["turn 2", "a different turn"]
        texts = [e.message.text for e in ops.show_session(store, "copy")]
        assert texts == [e.message.text for e in ops.show_session(store, "src", stop=4)] + [
            "a different turn"
        ]
        assert ops.get_session(store, "src").messages == 6
        assert 0 < _own_rows(tmp_path, "copy") < before
        ops.delete_session(store, "src")  # the fork keeps the history it shared
        assert [e.message.text for e in ops.show_session(store, "copy")] == texts
        with ContextManager(store=store, session_id="copy", agent_id="a") as cm:
            assert [m["content"] for m in cm.prepare()][-1] == "a different turn"
        # another agent's fork is a copy (the source's index is scoped to its owner)
        assert ops.fork_session(store, "copy", "theirs", agent_id="b") == 5
        assert ops.get_session(store, "theirs").parent_id is None
    finally:
        store.close()


def test_tail_yields_each_new_message_until_stopped(tmp_path: Path) -> None:
    _session(tmp_path, "live", 2)
    store = open_store(tmp_path)
    stop = threading.Event()
    go = threading.Event()

    def writer() -> None:
        go.wait(30)
        with ContextManager(workspace=tmp_path, session_id="live") as cm:
            cm.add({"role": "assistant", "content": "looking"})
            cm.add({"role": "user", "content": "and now?"})

    thread = threading.Thread(target=writer)
    thread.start()
    seen: list[str] = []
    try:
        for entry in ops.tail_session(store, "live", last=1, stop=stop, interval=0.02):
            seen.append(entry.message.text)
            go.set()  # the newest message came first: the tail is following the head now
            if len(seen) == 3:
                stop.set()
    finally:
        thread.join()
        store.close()
    assert seen == ["turn 0", "looking", "and now?"]


def test_tail_ends_when_the_session_is_deleted(tmp_path: Path) -> None:
    _session(tmp_path, "gone", 2)
    store = open_store(tmp_path)
    try:
        follow = ops.tail_session(store, "gone", last=2, interval=0.02)
        assert next(follow).seq == 0 and next(follow).seq == 1
        store.delete_session("gone")
        assert list(follow) == []
    finally:
        store.close()
