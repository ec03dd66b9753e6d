"""contextfold.sessions.ops: list, show, delete, fork and tail on a store."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from contextfold.errors import ConfigError
from contextfold.manager import ContextManager
from contextfold.sessions import ops
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
