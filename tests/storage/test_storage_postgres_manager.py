"""ContextManager on the PostgreSQL store: many workers share sessions through the database.

A session written by one process is resumed by another that has no local files; a connection
killed in the middle of a compaction leaves the session exactly as before and the retry
succeeds; two managers in two processes on one session never duplicate a message.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from multiprocessing import get_context
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.support import pg_support
from tests.support.pg_support import SchemaFactory
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def pg() -> Iterator[SchemaFactory]:
    yield from pg_support.schema_factory()


def _spawn(fn: Any, *args: Any) -> Any:
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        return pool.submit(fn, *args).result(timeout=240)


def test_a_session_is_resumed_by_another_process_without_local_files(
    pg: SchemaFactory, tmp_path: Path
) -> None:
    schema = pg.schema()
    pg.open(schema).close()  # create the schema before the workers run
    url = f"{pg.url}?schema={schema}"
    a, b = tmp_path / "host-a", tmp_path / "host-b"
    a.mkdir()
    b.mkdir()
    first = _spawn(pg_support.worker_manager_session, url, "shared", 0, 60, 6_000, str(a))
    assert first["records"] >= 1, "the first worker should have compacted"
    assert first["resumed"] == [] and len(first["history"]) >= 60
    n = len(first["history"])
    second = _spawn(pg_support.worker_manager_session, url, "shared", n, n + 40, 6_000, str(b))
    # the second host saw exactly what the first wrote, and the same view
    assert second["resumed"] == first["history"]
    assert second["first_view"] == first["view"]
    assert second["history"][:n] == first["history"] and len(second["history"]) > n
    assert second["records"] >= first["records"]
    assert first["files"] == [] and second["files"] == []  # nothing written locally
    store = pg.open(schema)
    info = store.session("shared")
    assert info is not None and info.messages == len(second["history"])


class _KillingStore:
    """A PostgresStore whose next transaction that appends a compaction event has its server
    connection terminated just before the append (a crash of the database link mid-unit)."""

    def __init__(self, store: Any, pg: SchemaFactory) -> None:
        self._store = store
        self._pg = pg
        self.armed = False
        self.killed = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        with self._store.transaction() as tx:
            outer = self

            class Tx:
                def __getattr__(self, name: str) -> Any:
                    return getattr(tx, name)

                def append(self, session_id: str, events: Any, **kw: Any) -> Any:
                    if outer.armed and any(e.kind == "compaction" for e in events):
                        outer.armed = False
                        outer.killed += 1
                        _terminate(outer._pg, tx.backend_pid)
                    return tx.append(session_id, events, **kw)

            yield Tx()


def _terminate(pg: SchemaFactory, pid: int) -> None:
    import psycopg

    with psycopg.connect(pg.url, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        gone = "SELECT 1 FROM pg_stat_activity WHERE pid = %s"
        wait_until(lambda: not conn.execute(gone, (pid,)).fetchone(), 10, f"backend {pid} ended")


def test_a_connection_killed_mid_compaction_leaves_the_session_as_before(
    pg: SchemaFactory,
) -> None:
    from contextfold import ContextManager
    from contextfold.errors import StorageError

    store = pg.open()
    killing = _KillingStore(store, pg)
    messages = pg_support.trace_messages(80)
    cm = ContextManager(store=killing, session_id="s", context_window=6_000)  # type: ignore[arg-type]
    failed_at = None
    for i, m in enumerate(messages):
        cm.add(m)
        before = (store.head("s"), [e.seq for e in store.read("s")], len(cm.records()))
        killing.armed = True
        try:
            cm.prepare()
        except StorageError as exc:
            assert "rolled back" in str(exc)
            failed_at = i
            break
        finally:
            killing.armed = False
    assert failed_at is not None and killing.killed == 1, "no compaction happened"
    # nothing of the failed compaction is stored, and the manager reloaded what is
    assert (store.head("s"), [e.seq for e in store.read("s")], len(cm.records())) == before
    assert len(cm.history) == i + 1 == len(list(store.read("s", kinds=["message"])))
    view = cm.prepare()  # the retry compacts and commits
    assert len(cm.records()) == before[2] + 1 and store.head("s") > before[0]
    assert cm.view_tokens <= 6_000 and view
    reopened = ContextManager(store=store, session_id="s", context_window=6_000)
    assert reopened.prepare() == view
    assert len(reopened.history) == failed_at + 1
    reopened.close()
    cm.close()


def test_two_managers_in_two_processes_on_one_session(pg: SchemaFactory) -> None:
    schema = pg.schema()
    store = pg.open(schema)
    url = f"{pg.url}?schema={schema}"
    n = 60
    start = time.time() + 5
    with ProcessPoolExecutor(2, mp_context=get_context("spawn")) as pool:
        futures = [
            pool.submit(pg_support.worker_manager_writer, url, "s", w, n, start) for w in "pq"
        ]
        conflicts = [f.result(timeout=240) for f in futures]
    texts = [e.data["message"]["content"] for e in store.read("s", kinds=["message"])]
    assert sorted(texts) == sorted(f"{w} {i}" for w in "pq" for i in range(n))  # exactly once
    for w in "pq":  # each writer's messages in its order
        assert [t for t in texts if t.startswith(f"{w} ")] == [f"{w} {i}" for i in range(n)]
    from contextfold import ContextManager

    with ContextManager(store=store, session_id="s", context_window=32_000) as cm:
        assert [m.text for m in cm.history] == texts
    print(f"conflicts met and retried: {conflicts}")


def test_the_store_url_can_come_from_the_environment(
    pg: SchemaFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from contextfold import ContextManager
    from contextfold.storage import open_store
    from contextfold.storage.postgres import PostgresStore

    schema = pg.schema()
    url = f"{pg.url}?schema={schema}"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CONTEXTFOLD_STORE", url)
    with ContextManager(session_id="env", agent_id="alice") as cm:
        assert isinstance(cm.store, PostgresStore) and cm.store.schema == schema
        assert cm.ws is None and "postgres@" not in cm.store.url
        cm.add({"role": "user", "content": "stored in PostgreSQL"})
    assert list(tmp_path.iterdir()) == []  # nothing written next to the process
    store = open_store(url)
    try:
        info = store.session("env")
        assert info is not None and (info.agent_id, info.messages) == ("alice", 1)
    finally:
        store.close()


def test_schema_3_heads_are_migrated_to_compact_heads(pg: SchemaFactory) -> None:
    """Message heads written by schema 3 (objects holding what each call was about) become
    compact arrays with the details in their own column when the schema is migrated; the
    session then reopens lazily with the same view and call log."""
    from contextfold import ContextManager
    from tests.engine.test_lazy_reopen import _feed, _messages
    from tests.storage.test_storage_schema import _calls as calls

    schema = pg.schema()
    store = pg.open(schema)
    with ContextManager(store=store, session_id="s", context_window=6_000) as cm:
        _feed(cm, _messages(0, 2))
        view, before = cm.prepare(), calls(cm)
    s = store.s

    def downgrade(c: Any) -> int:
        cur = c.execute(
            f"UPDATE {s}.events SET head = (jsonb_build_object('pos', head->0, 'uuid', head->1, "
            "'role', head->2, 'tokens', head->3) || CASE WHEN json_typeof(head->4) = 'string' "
            "THEN jsonb_build_object('tool_call_id', head->4) ELSE '{}'::jsonb END || "
            "CASE WHEN detail IS NOT NULL THEN jsonb_build_object('calls', detail) "
            "ELSE '{}'::jsonb END)::json WHERE head IS NOT NULL"
        )
        c.execute(f"ALTER TABLE {s}.events DROP COLUMN detail")
        c.execute(f"ALTER TABLE {s}.sessions DROP COLUMN IF EXISTS parent_id")
        c.execute(f"ALTER TABLE {s}.sessions DROP COLUMN IF EXISTS fork_at")
        c.execute(f"DELETE FROM {s}.schema_version WHERE version >= 4")
        return int(cur.rowcount)

    def schema_3_heads(c: Any) -> list[Any]:
        rows = c.execute(
            f"SELECT seq, head FROM {s}.events WHERE session_id = 's' AND kind = 'message' "
            "ORDER BY seq"
        ).fetchall()
        return [SimpleNamespace(seq=r[0], head=r[1]) for r in rows]

    assert store._run("downgrade", downgrade) > 50
    old = store._run("read the schema 3 heads", schema_3_heads)
    assert old and all(type(h.head) is dict for h in old)
    store.close()
    store = pg.open(schema)  # migrates
    heads = store.read_heads("s", kinds=["message"], details=True)
    assert [h.seq for h in heads] == [h.seq for h in old]
    for h, o in zip(heads, old, strict=True):
        assert type(h.head) is list and h.head[:4] == [
            o.head[k] for k in ("pos", "uuid", "role", "tokens")
        ]  # type: ignore[index]
        assert h.detail == o.head.get("calls")  # type: ignore[union-attr]
        assert h.head[5] == ([c["id"] for c in h.detail] if h.detail else None)  # type: ignore[index,union-attr]
    with ContextManager(store=store, session_id="s", context_window=6_000) as cm:
        assert not cm.view.complete
        assert cm.prepare() == view
        assert calls(cm) == before
        assert not cm.view.complete
    store.close()
