"""ContextManager.staged(): writes applied in memory at once and committed later (the gateway
commits a turn's append while the model call is in flight). Nothing is stored before
commit_staged(); a write that commits first takes the staged one along, in order, in one
transaction; a failed commit leaves the manager exactly as stored."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from contextfold import ContextManager
from contextfold.errors import StorageError
from contextfold.storage import open_store


def _msgs(i: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"request {i}: " + "word " * 40},
        {"role": "assistant", "content": f"answer {i}"},
    ]


def _stored(root: Path, sid: str) -> list[str]:
    store = open_store(root)
    try:
        return [m.text for m in ContextManager(store=store, session_id=sid).history]
    finally:
        store.close()


def test_staged_messages_are_viewable_at_once_and_stored_on_commit(tmp_path: Path) -> None:
    cm = ContextManager(tmp_path / "ws", session_id="s", context_window=50_000)
    cm.add_many([{"role": "system", "content": "sys"}, *_msgs(0)])
    with cm.staged():
        cm.add_many(_msgs(1))
    assert cm.has_staged
    assert [m["content"] for m in cm.prepare()][-2:] == [_msgs(1)[0]["content"], "answer 1"]
    assert _stored(tmp_path / "ws", "s") == ["sys", _msgs(0)[0]["content"], "answer 0"]
    cm.commit_staged()
    assert not cm.has_staged
    assert _stored(tmp_path / "ws", "s")[-1] == "answer 1"
    assert cm.session.head == cm.store.head("s")


def test_the_next_write_commits_the_staged_one_first_in_order(tmp_path: Path) -> None:
    cm = ContextManager(tmp_path / "ws", session_id="s", context_window=50_000)
    cm.add_many([{"role": "system", "content": "sys"}])
    with cm.staged():
        cm.add_many(_msgs(1))
    cm.add_many(_msgs(2))  # not staged: commits now, the staged messages first
    assert not cm.has_staged
    assert _stored(tmp_path / "ws", "s") == [
        "sys",
        _msgs(1)[0]["content"],
        "answer 1",
        _msgs(2)[0]["content"],
        "answer 2",
    ]
    events = list(cm.store.read("s"))
    assert [e.seq for e in events] == list(range(len(events)))


def test_a_failed_commit_leaves_the_manager_as_stored(tmp_path: Path) -> None:
    cm = ContextManager(tmp_path / "ws", session_id="s", context_window=50_000)
    cm.add_many([{"role": "system", "content": "sys"}, *_msgs(0)])
    before = [m.text for m in cm.history]
    with cm.staged():
        cm.add_many(_msgs(1))
    assert len(cm.history) == len(before) + 2
    con = sqlite3.connect(tmp_path / "ws" / "store.sqlite")
    con.execute(
        "CREATE TRIGGER fail BEFORE INSERT ON events BEGIN SELECT RAISE(ABORT, 'full'); END"
    )
    con.commit()
    with pytest.raises(StorageError):
        cm.commit_staged()
    assert [m.text for m in cm.history] == before and not cm.has_staged
    con.execute("DROP TRIGGER fail")
    con.commit()
    con.close()
    cm.add_many(_msgs(1))  # the caller tries again: stored once
    assert _stored(tmp_path / "ws", "s") == [*before, _msgs(1)[0]["content"], "answer 1"]


def test_an_error_inside_staged_undoes_what_it_applied(tmp_path: Path) -> None:
    cm = ContextManager(tmp_path / "ws", session_id="s", context_window=50_000)
    cm.add_many([{"role": "system", "content": "sys"}])
    with pytest.raises(RuntimeError), cm.staged():
        cm.add_many(_msgs(1))
        raise RuntimeError("the caller failed half way")
    assert [m.text for m in cm.history] == ["sys"] and not cm.has_staged
    cm.add_many(_msgs(2))
    assert _stored(tmp_path / "ws", "s") == ["sys", _msgs(2)[0]["content"], "answer 2"]


def test_a_staged_blob_is_readable_at_once_and_written_on_commit(tmp_path: Path) -> None:
    cm = ContextManager(tmp_path / "ws", session_id="s", context_window=50_000)
    cm.add_many([{"role": "system", "content": "sys"}])
    with cm.staged():
        sha = cm.session.put_blob(b"tool output " * 100)
    assert cm.session.blob(sha) == b"tool output " * 100  # read before it is stored
    assert not cm.store.blobs.has(sha)
    cm.add_many(_msgs(1))  # committing takes the staged unit along
    assert cm.store.blobs.get(sha) == b"tool output " * 100
