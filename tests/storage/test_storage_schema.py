"""The embedded store's schema versions: a database written by an older release is migrated
on open (once, also with two processes at a time), a newer one is refused."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from contextfold import ContextManager
from contextfold.errors import StorageError
from contextfold.storage import NewEvent, SQLiteStore
from contextfold.storage.sqlite_schema import _BASE, DB_NAME, SCHEMA_VERSION
from tests.engine.test_lazy_reopen import _feed, _messages
from tests.storage.test_storage_faults import remount, tmpfs  # noqa: F401


def _version_1(root: Path) -> Path:
    """A store as release 0.1 wrote it (schema 1: no event heads)."""
    root.mkdir(parents=True)
    path = root / DB_NAME
    con = sqlite3.connect(path)
    con.executescript(_BASE)
    con.execute("INSERT INTO store_meta VALUES ('schema', '1')")
    con.execute("INSERT INTO store_meta VALUES ('fts5', '1')")
    con.commit()
    con.close()
    return path


def _columns(path: Path) -> list[str]:
    con = sqlite3.connect(path)
    try:
        return [r[1] for r in con.execute("PRAGMA table_info(events)")]
    finally:
        con.close()


def test_schema_1_is_migrated_and_keeps_its_events(tmp_path: Path) -> None:
    path = _version_1(tmp_path / "ws")
    con = sqlite3.connect(path)
    con.execute("INSERT INTO events VALUES ('s', 0, 'message', 't', '{\"a\": 1}')")
    con.execute("INSERT INTO sessions VALUES ('s', 'a', 't', 't', '', 1, 1)")
    con.commit()
    con.close()
    assert "head" not in _columns(path)
    store = SQLiteStore(tmp_path / "ws")
    assert "head" in _columns(path)
    heads = store.read_heads("s")
    assert [(h.seq, h.head) for h in heads] == [(0, None)]
    with store.transaction() as txn:
        txn.append(
            "s",
            [NewEvent(kind="message", data={"b": 2}, head={"pos": 1})],
            expected_seq=1,
            agent_id="a",
        )
    assert [h.head for h in store.read_heads("s")] == [None, {"pos": 1}]
    assert [e.data for e in store.read("s")] == [{"a": 1}, {"b": 2}]
    store.close()
    con = sqlite3.connect(path)
    assert con.execute("SELECT value FROM store_meta WHERE key='schema'").fetchone() == (
        str(SCHEMA_VERSION),
    )
    con.close()


def test_session_of_an_older_release_reopens_then_goes_on(tmp_path: Path) -> None:
    """A session whose messages have no heads is read entirely, then continues with heads."""
    store = SQLiteStore(tmp_path / "ws")
    msgs = _messages(0, 2)
    with ContextManager(store=store, session_id="s", context_window=6_000) as cm:
        _feed(cm, msgs[:60])
        before = cm.prepare()
    store._con().execute("UPDATE events SET head = NULL")  # as an older release wrote them
    with ContextManager(store=store, session_id="s", context_window=6_000) as cm:
        assert cm.view.complete
        assert cm.prepare() == before
        _feed(cm, msgs[60:])
        after = cm.prepare()
    with ContextManager(store=store, session_id="s", context_window=6_000) as cm:
        assert cm.prepare() == after  # old events without heads: still a full read
    store.close()


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    SQLiteStore(tmp_path / "ws").close()
    con = sqlite3.connect(tmp_path / "ws" / DB_NAME)
    con.execute("UPDATE store_meta SET value=? WHERE key='schema'", (str(SCHEMA_VERSION + 1),))
    con.commit()
    con.close()
    with pytest.raises(StorageError, match="upgrade contextfold"):
        SQLiteStore(tmp_path / "ws")


def test_read_only_old_workspace_reads_without_heads(tmpfs: Path) -> None:  # noqa: F811
    """An older release's workspace on a read-only mount cannot be migrated: it is read as
    it is (heads None, so a session is read entirely) and ContextManager still opens."""
    path = _version_1(tmpfs / "ws")
    con = sqlite3.connect(path)
    con.execute(
        "INSERT INTO events VALUES ('s', 0, 'message', 't', ?)",
        ('{"pos": 0, "uuid": "u", "message": {"role": "user", "content": "hi"}, "tokens": 3}',),
    )
    con.execute("INSERT INTO sessions VALUES ('s', 'a', 't', 't', '', 1, 1)")
    con.commit()
    con.close()
    remount(tmpfs, "ro")
    store = SQLiteStore(tmpfs / "ws")
    assert store.read_only
    assert [(h.seq, h.head) for h in store.read_heads("s")] == [(0, None)]
    with ContextManager(store=store, session_id="s", agent_id="a") as cm:
        assert [m.text for m in cm.history] == ["hi"]
    store.close()


def _drop_branch_columns(con: sqlite3.Connection) -> None:
    """What schema 5 added: the parent and fork point of branch sessions."""
    con.execute("DROP INDEX sessions_parent")
    con.execute("ALTER TABLE sessions DROP COLUMN parent_id")
    con.execute("ALTER TABLE sessions DROP COLUMN fork_at")


def test_schema_4_store_gets_branch_columns_and_reads_as_before(tmp_path: Path) -> None:
    """A schema-4 store (no branches) is migrated to schema 5: its sessions read as before,
    stand alone (no parent), and a branch can then be made of them."""
    store = SQLiteStore(tmp_path / "ws")
    with store.transaction() as txn:
        txn.append(
            "s",
            [NewEvent(kind="message", data={"i": i}) for i in range(3)],
            expected_seq=0,
            agent_id="a",
        )
    store.close()
    con = sqlite3.connect(tmp_path / "ws" / DB_NAME)
    _drop_branch_columns(con)
    con.execute("UPDATE store_meta SET value='4' WHERE key='schema'")
    con.commit()
    con.close()
    store = SQLiteStore(tmp_path / "ws")
    info = store.session("s")
    assert info is not None and (info.events, info.parent_id, info.fork_at) == (3, None, 0)
    with store.transaction() as txn:
        txn.branch("b", parent_id="s", at=2, agent_id="a")
        txn.append("b", [NewEvent(kind="message", data={"i": 9})], expected_seq=2, agent_id="a")
    assert [e.data["i"] for e in store.read("b")] == [0, 1, 9]
    con = sqlite3.connect(tmp_path / "ws" / DB_NAME)
    version = con.execute("SELECT value FROM store_meta WHERE key='schema'").fetchone()
    own = con.execute("SELECT count(*) FROM events WHERE session_id='b'").fetchone()
    con.close()
    assert version == (str(SCHEMA_VERSION),) and own == (1,), "a branch stores its own events only"
    store.close()


def _as_schema_3(path: Path) -> int:
    """Rewrite a current store as schema 3 wrote it: message heads as objects holding what
    each call was about, no detail column. Returns how many heads held calls."""
    con = sqlite3.connect(path)
    with_calls = 0
    rows = con.execute("SELECT rowid, head, detail FROM events WHERE head IS NOT NULL").fetchall()
    for rowid, head, detail in rows:
        pos, uuid, role, tokens, call_id, ids = json.loads(head)
        old: dict[str, Any] = {"pos": pos, "uuid": uuid, "role": role, "tokens": tokens}
        if call_id is not None:
            old["tool_call_id"] = call_id
        if ids:
            old["calls"] = json.loads(detail)
            assert [c["id"] for c in old["calls"]] == ids
            with_calls += 1
        con.execute("UPDATE events SET head=? WHERE rowid=?", (json.dumps(old), rowid))
    con.execute("DROP INDEX events_heads")  # schema 3's indexes
    con.execute("ALTER TABLE events DROP COLUMN detail")
    con.execute("CREATE INDEX events_heads ON events(session_id, kind, seq, head)")
    con.execute("CREATE INDEX events_kind ON events(session_id, kind, seq)")
    _drop_branch_columns(con)
    con.execute("UPDATE store_meta SET value='3' WHERE key='schema'")
    con.commit()
    con.close()
    return with_calls


def _calls(cm: ContextManager) -> tuple[Any, ...]:
    """The call log as stored (what ordinals count: not the patterns, urls or lines)."""
    log = cm.recovery.session_calls()
    kept = [(f.tool, f.command, f.paths, f.action, f.shell) for f in log._fields]
    return (log.positions, kept, log.edits)


def _schema_3_session(root: Path, traces: int = 3) -> tuple[list[Any], tuple[Any, ...], int]:
    """A session written now, then turned into schema 3: (its view, call log, heads with calls)."""
    store = SQLiteStore(root)
    with ContextManager(store=store, session_id="s", context_window=6_000) as cm:
        _feed(cm, _messages(0, traces))
        assert cm.records()
        view, calls = cm.prepare(), _calls(cm)
    store.close()
    return view, calls, _as_schema_3(root / DB_NAME)


def test_schema_3_heads_become_compact_with_their_details_apart(tmp_path: Path) -> None:
    """Opening a schema-3 store moves what each call was about out of the message heads into
    the detail column; a session then reopens lazily, with the same view and call log."""
    view, calls, with_calls = _schema_3_session(tmp_path / "ws")
    assert with_calls > 50 and "detail" not in _columns(tmp_path / "ws" / DB_NAME)
    store = SQLiteStore(tmp_path / "ws")
    con = sqlite3.connect(tmp_path / "ws" / DB_NAME)
    indexes = {r[0]: r[1] for r in con.execute("SELECT name, sql FROM sqlite_master")}
    con.close()
    assert "events_kind" not in indexes and "detail" in indexes["events_heads"]
    heads = store.read_heads("s", kinds=["message"], details=True)
    assert all(type(h.head) is list and len(h.head) == 6 for h in heads)
    assert sum(1 for h in heads if h.detail is not None) == with_calls
    for h in heads:
        ids = h.head[5]  # type: ignore[index]
        assert (ids is None) == (h.detail is None)
        if ids is not None:
            assert ids == [c["id"] for c in h.detail]  # type: ignore[union-attr]
    with ContextManager(store=store, session_id="s", context_window=6_000) as cm:
        assert not cm.view.complete
        assert cm.prepare() == view
        assert _calls(cm) == calls
        assert not cm.view.complete, "the call log must come from the details, not the history"
    store.close()


def test_read_only_schema_3_store_reopens_lazily_from_its_heads(
    tmp_path: Path,
    tmpfs: Path,  # noqa: F811
) -> None:
    """A schema-3 store that cannot be migrated is read as it is: the heads (objects with the
    calls' details) still give a lazy reopen and the call log."""
    view, calls, _ = _schema_3_session(tmp_path / "ws", traces=1)
    (tmpfs / "ws").mkdir()
    shutil.copyfile(tmp_path / "ws" / DB_NAME, tmpfs / "ws" / DB_NAME)  # blobs: not needed
    remount(tmpfs, "ro")
    store = SQLiteStore(tmpfs / "ws")
    assert store.read_only
    assert all(type(h.head) is dict for h in store.read_heads("s", kinds=["message"]))
    with ContextManager(store=store, session_id="s", context_window=6_000) as cm:
        assert not cm.view.complete
        assert cm.prepare() == view
        assert _calls(cm) == calls
        assert not cm.view.complete
    store.close()


def test_schema_3_heads_of_unexpected_shapes_do_not_stop_the_migration(tmp_path: Path) -> None:
    """Old heads whose calls are not a list of call objects (or whose text is not JSON at
    all) are converted as far as they go: the workspace is migrated and stays writable,
    every detail is JSON, and the well-formed heads convert as usual."""
    store = SQLiteStore(tmp_path / "ws")
    with store.transaction() as txn:
        txn.append(
            "s",
            [NewEvent(kind="message", data={"i": i}, head=[i]) for i in range(8)],
            expected_seq=0,
            agent_id="a",
        )
    store.close()
    base = {"pos": 0, "uuid": "u", "role": "assistant", "tokens": 3}
    old = [
        json.dumps({**base, "calls": "not a list"}),
        json.dumps({**base, "calls": ["c1", "c2"]}),
        json.dumps({**base, "calls": [7, {"id": "c3"}]}),
        json.dumps({**base, "calls": {"x": {"id": "c4"}}}),
        json.dumps({**base, "calls": None}),
        json.dumps({**base, "calls": [{"id": "c5", "tool": "bash"}]}),
        "{not json",
        json.dumps([0, "u", "user", 1, None, None]),  # already compact: left as it is
    ]
    path = tmp_path / "ws" / DB_NAME
    con = sqlite3.connect(path)
    for seq, text in enumerate(old):
        con.execute("UPDATE events SET head=? WHERE seq=?", (text, seq))
    con.execute("DROP INDEX events_heads")  # schema 3's indexes and columns
    con.execute("ALTER TABLE events DROP COLUMN detail")
    con.execute("CREATE INDEX events_heads ON events(session_id, kind, seq, head)")
    con.execute("UPDATE store_meta SET value='3' WHERE key='schema'")
    con.commit()
    con.close()

    store = SQLiteStore(tmp_path / "ws")
    assert not store.read_only, "a migration failure turned a writable workspace read-only"
    assert "detail" in _columns(path)
    con = sqlite3.connect(path)
    rows = con.execute("SELECT head, detail FROM events ORDER BY seq").fetchall()
    con.close()
    for head, detail in rows[:6]:
        assert type(json.loads(head)) is list
        if detail is not None:
            json.loads(detail)
    heads = store.read_heads("s", stop=6, details=True)  # (the head that is not JSON: damaged)
    assert [h.head[5] for h in heads[:6]] == [  # type: ignore[index]
        None,
        [None, None],
        [None, "c3"],
        None,
        None,
        ["c5"],
    ]
    assert [h.detail for h in heads[:6]] == [
        "not a list",
        ["c1", "c2"],
        [7, {"id": "c3"}],
        {"x": {"id": "c4"}},
        None,
        [{"id": "c5", "tool": "bash"}],
    ]
    (last,) = store.read_heads("s", start=7, details=True)
    assert last.head == [0, "u", "user", 1, None, None] and last.detail is None
    with store.transaction() as txn:  # still writable
        txn.append("s", [NewEvent(kind="message", data={})], expected_seq=8, agent_id="a")
    assert store.head("s") == 9
    store.close()


def test_disk_full_during_the_migration_is_an_error_not_a_read_only_store(
    tmpfs: Path,  # noqa: F811
) -> None:
    """Migration 4 rewrites every message head and rebuilds the heads index: a disk that
    fills up meanwhile is reported as such (the store is not opened as if the workspace
    were read-only, refusing every write with a misleading reason), and once there is
    room again the store migrates and writes."""
    from tests.storage.test_storage_faults import _fill_up

    ws = tmpfs / "ws"
    store = SQLiteStore(ws)
    with store.transaction() as txn:
        txn.append(
            "s",
            [NewEvent(kind="message", data={"i": i}, head=[i]) for i in range(3_000)],
            expected_seq=0,
            agent_id="a",
        )
    store.close()
    con = sqlite3.connect(ws / DB_NAME)
    con.execute(  # schema 3's heads: objects holding what each call was about
        "UPDATE events SET head = json_object('pos', seq, 'uuid', 'u' || seq, 'role', "
        "'assistant', 'tokens', 5, 'calls', json_array(json_object('id', 'c' || seq, "
        "'tool', 'bash', 'command', 'ls -la /some/where/' || seq)))"
    )
    con.execute("DROP INDEX events_heads")
    con.execute("ALTER TABLE events DROP COLUMN detail")
    con.execute("CREATE INDEX events_heads ON events(session_id, kind, seq, head)")
    con.execute("UPDATE store_meta SET value='3' WHERE key='schema'")
    con.commit()
    con.close()
    _fill_up(tmpfs / "ballast")  # then room to open it, not to rewrite every head
    with (tmpfs / "ballast").open("r+b") as fh:
        fh.truncate((tmpfs / "ballast").stat().st_size - 256 * 1024)
    with pytest.raises(StorageError, match="schema") as err:
        SQLiteStore(ws)
    assert "full" in str(err.value)
    (tmpfs / "ballast").unlink()
    store = SQLiteStore(ws)
    assert not store.read_only
    heads = store.read_heads("s", start=2_999, details=True)
    assert [(h.head, h.detail) for h in heads] == [
        (
            [2_999, "u2999", "assistant", 5, None, ["c2999"]],
            [{"id": "c2999", "tool": "bash", "command": "ls -la /some/where/2999"}],
        )
    ]
    with store.transaction() as txn:
        txn.append("s", [NewEvent(kind="message", data={})], expected_seq=3_000, agent_id="a")
    store.close()
