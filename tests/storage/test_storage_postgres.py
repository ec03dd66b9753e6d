"""PostgresStore against the real server: faults, concurrency across processes, migrations.

The backend-agnostic behaviour is covered by the shared contract suite
(``tests/storage/test_storage_postgres_contract.py`` runs it on PostgreSQL); these are the cases that
only a server has: a connection killed mid-transaction, many processes, concurrent first opens.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.support import pg_support
from tests.support.pg_support import SchemaFactory
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def pg() -> Iterator[SchemaFactory]:
    yield from pg_support.schema_factory()


def _ev(i: int, kind: str = "message") -> Any:
    from contextfold.storage import NewEvent

    return NewEvent(kind=kind, data={"message": {"role": "user", "content": f"m{i}"}, "i": i})


def _doc(sid: str, n: int, body: str) -> Any:
    from contextfold.storage import SearchDoc

    return SearchDoc(
        namespace="session", doc_id=f"{sid}:{n}", scope="a", session_id=sid, fields={"body": body}
    )


def _kill(pg: SchemaFactory, pid: int) -> None:
    import psycopg

    with psycopg.connect(pg.url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()
        assert row is not None and row[0] is True
    # wait until the server has really ended that backend
    with psycopg.connect(pg.url, autocommit=True) as conn:
        gone = "SELECT 1 FROM pg_stat_activity WHERE pid = %s"
        wait_until(lambda: not conn.execute(gone, (pid,)).fetchone(), 10, f"backend {pid} ended")


def _snapshot(store: Any, sid: str) -> tuple[Any, ...]:
    return (
        store.head(sid),
        [(e.seq, e.kind, dict(e.data)) for e in store.read(sid)],
        store.docs("state"),
        [h.doc_id for h in store.search("session", "compacted summary", limit=50)],
        store.session(sid),
    )


def test_url_has_no_credentials_and_bad_urls_are_refused(pg: SchemaFactory) -> None:
    from contextfold.errors import StorageError
    from contextfold.storage.postgres import PostgresStore, public_url

    assert public_url("postgresql://bob:s3cret@db.example:6543/app?sslmode=require&password=x") == (
        "postgresql://db.example:6543/app"
    )
    store = pg.open()
    assert "postgres@" not in store.url and store.url.startswith("postgresql://127.0.0.1")
    with pytest.raises(StorageError, match="not a plain identifier"):
        PostgresStore(pg.url, schema='x"; DROP TABLE y; --')
    # a wrong port, role or parameter fails at once with the reason, password never shown
    started = time.monotonic()
    with pytest.raises(StorageError, match=re.escape("PostgreSQL at postgresql://127.0.0.1:1/")):
        PostgresStore("postgresql://postgres:pw@127.0.0.1:1/test", timeout=2)
    parts = urlsplit(pg.url)
    host = f"{parts.hostname}:{parts.port or 5432}"
    nobody = urlunsplit(parts._replace(netloc=f"nobody:hunter2@{host}", query=""))
    with pytest.raises(StorageError, match='"nobody"') as err:
        PostgresStore(nobody)
    assert "hunter2" not in str(err.value)
    with pytest.raises(StorageError, match="bogus"):
        PostgresStore(urlunsplit(parts._replace(query="bogus=1")))
    assert time.monotonic() - started < 10
    # libpq options in the URL are kept (spaces and all), next to the store's own
    timed = PostgresStore(
        urlunsplit(parts._replace(query="options=-c%20statement_timeout%3D5000")),
        schema=pg.schema(),
    )
    pg.stores.append(timed)
    shown = timed._run(
        "show",
        lambda c: [c.execute(f"SHOW {n}").fetchone()[0] for n in ("statement_timeout", "jit")],
    )
    assert shown == ["5s", "off"]


def test_migrations_are_idempotent_and_versioned(pg: SchemaFactory) -> None:
    from contextfold.storage.pg_schema import SCHEMA_VERSION

    schema = pg.schema()
    first = pg.open(schema)
    with first.transaction() as tx:
        tx.append("s", [_ev(0)], expected_seq=0, agent_id="a")
    first.close()
    again = pg.open(schema)  # reopening changes nothing and keeps the data
    assert again.head("s") == 1
    rows = again._rows("versions", f"SELECT version FROM {again.s}.schema_version", ())
    assert [r[0] for r in rows] == list(range(1, SCHEMA_VERSION + 1))


def test_a_newer_schema_is_refused(pg: SchemaFactory) -> None:
    from contextfold.errors import StorageError
    from contextfold.storage.pg_schema import SCHEMA_VERSION

    schema = pg.schema()
    store = pg.open(schema)
    store._run(
        "bump",
        lambda c: c.execute(
            f"INSERT INTO {store.s}.schema_version (version) VALUES (%s)", (SCHEMA_VERSION + 1,)
        ),
    )
    with pytest.raises(StorageError, match="newer than this release"):
        pg.open(schema)


def test_concurrent_first_open_from_eight_processes(pg: SchemaFactory) -> None:
    from contextfold.storage.pg_schema import SCHEMA_VERSION

    schema = pg.schema()
    start = time.time() + 4
    with ProcessPoolExecutor(8, mp_context=get_context("spawn")) as pool:
        futures = [pool.submit(pg_support.worker_open, pg.url, schema, start) for _ in range(8)]
        versions = [f.result(timeout=120) for f in futures]
    assert versions == [SCHEMA_VERSION] * 8
    store = pg.open(schema)
    rows = store._rows("versions", f"SELECT count(*) FROM {store.s}.schema_version", ())
    assert rows[0][0] == SCHEMA_VERSION


def test_dropped_connection_mid_transaction_rolls_back_and_retry_succeeds(
    pg: SchemaFactory,
) -> None:
    from contextfold.errors import StorageError

    store = pg.open()
    with store.transaction() as tx:
        tx.append("s", [_ev(0), _ev(1)], expected_seq=0, agent_id="a")
        tx.put_doc("state", "s", {"tier": 0})
    before = _snapshot(store, "s")

    def compaction(tx: Any) -> None:
        tx.append("s", [_ev(2, "compaction")], expected_seq=2, agent_id="a")
        tx.put_doc("state", "s", {"tier": 2})
        tx.index([_doc("s", 2, "compacted summary of the first turns")])

    # killed between two statements of the compaction
    with pytest.raises(StorageError, match="rolled back") as err, store.transaction() as tx:
        compaction(tx)
        _kill(pg, tx.backend_pid)
        tx.put_doc("state", "other", {"never": True})
    # it names the writes the server had not confirmed (queued since the append answered)
    assert "write document state/other" in str(err.value)
    assert "append to session" not in str(err.value)
    assert _snapshot(store, "s") == before

    # killed after the last statement: the commit fails
    with pytest.raises(StorageError, match="commit"), store.transaction() as tx:
        compaction(tx)
        _kill(pg, tx.backend_pid)
    assert _snapshot(store, "s") == before

    # the pool replaced the dead connections: the retry succeeds
    with store.transaction() as tx:
        compaction(tx)
    after = _snapshot(store, "s")
    assert after[0] == 3 and after[2]["s"] == {"tier": 2} and after[3] == ["s:2"]


def test_a_dead_idle_connection_is_replaced_transparently(pg: SchemaFactory) -> None:
    store = pg.open(min_size=1, max_size=1)
    with store.transaction() as tx:
        tx.append("s", [_ev(0)], expected_seq=0, agent_id="a")
        pid = tx.backend_pid
    _kill(pg, pid)  # the pool's only connection dies while idle
    assert store.head("s") == 1
    with store.transaction() as tx:
        tx.append("s", [_ev(1)], expected_seq=1, agent_id="a")
    assert store.head("s") == 2


def test_errors_are_storage_errors_and_close_leaks_nothing(pg: SchemaFactory) -> None:
    import psycopg

    from contextfold.errors import StorageError

    store = pg.open(min_size=2, max_size=4)
    pids = set()
    for _ in range(3):
        with store.transaction() as tx:
            pids.add(tx.backend_pid)
            with pytest.raises(StorageError, match="not JSON-serializable"):
                tx.put_doc("d", "k", {"x": object()})
    store.close()
    store.close()  # idempotent
    with pytest.raises(StorageError, match="closed"):
        store.head("s")
    with psycopg.connect(pg.url, autocommit=True) as conn:
        alive = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (list(pids),)
        ).fetchone()
    assert alive is not None and alive[0] == 0


def test_awkward_payloads_round_trip(pg: SchemaFactory) -> None:
    from contextfold.storage import BlobCorruptError, BlobNotFoundError, NewEvent

    store = pg.open()
    data = {"text": "nul \x00 byte, lone \udc80 surrogate, 中文, emoji 🎉", "n": [1, 2.5, None]}
    with store.transaction() as tx:
        tx.append("s", [NewEvent(kind="message", data=data)], expected_seq=0, agent_id="a")
        tx.put_doc("d", "k", data)
    assert dict(next(store.read("s")).data) == data
    assert store.get_doc("d", "k") == data
    big = bytes(range(256)) * 40_000  # 10 MB
    sha = store.blobs.put(big)
    assert sha == hashlib.sha256(big).hexdigest() and store.blobs.put(big) == sha
    assert store.blobs.get(sha) == big and store.blobs.size(sha) == len(big)
    store._run(
        "corrupt",
        lambda c: c.execute(
            f"UPDATE {store.s}.blobs SET data = 'x'::bytea WHERE sha256 = %s", (sha,)
        ),
    )
    with pytest.raises(BlobCorruptError):
        store.blobs.get(sha)
    with pytest.raises(BlobNotFoundError):
        store.blobs.get("0" * 64)


def test_two_processes_on_one_session_never_duplicate(pg: SchemaFactory) -> None:
    store = pg.open()
    n = 150
    start = time.time() + 4
    with ProcessPoolExecutor(2, mp_context=get_context("spawn")) as pool:
        futures = [
            pool.submit(pg_support.worker_append_loop, pg.url, store.schema, "s", w, n, start)
            for w in ("p1", "p2")
        ]
        conflicts = [f.result(timeout=180) for f in futures]
    events = list(store.read("s"))
    assert [e.seq for e in events] == list(range(2 * n))
    seen = Counter((e.data["writer"], e.data["i"]) for e in events)
    assert set(seen.values()) == {1} and len(seen) == 2 * n
    for w in ("p1", "p2"):  # each writer's events in its own order
        assert [e.data["i"] for e in events if e.data["writer"] == w] == list(range(n))
    assert store.session("s") is not None and store.session("s").messages == 2 * n
    print(f"conflicts met and retried: {conflicts}")


def test_eight_processes_on_eight_sessions(pg: SchemaFactory) -> None:
    store = pg.open()
    batches, size = 20, 10
    start = time.time() + 5
    sids = [f"s{i}" for i in range(8)]
    with ProcessPoolExecutor(8, mp_context=get_context("spawn")) as pool:
        futures = [
            pool.submit(
                pg_support.worker_own_session, pg.url, store.schema, sid, batches, size, start
            )
            for sid in sids
        ]
        heads = [f.result(timeout=180) for f in futures]
    assert heads == [batches * size] * 8
    for sid in sids:
        events = list(store.read(sid))
        assert [e.seq for e in events] == list(range(batches * size))
        assert Counter((e.data["b"], e.data["i"]) for e in events) == Counter(
            (b, i) for b in range(batches) for i in range(size)
        )
        assert store.get_doc("state", sid) == {"head": batches * size}
        hits = store.search("session", f"item of {sid}", scopes=[sid], limit=500)
        assert len(hits) == batches * size and {h.session_id for h in hits} == {sid}
    info = {s.session_id: s for s in store.sessions()}
    assert set(info) == set(sids) and all(info[s].agent_id == s for s in sids)


def test_two_store_instances_alternate_on_one_session_with_resync(pg: SchemaFactory) -> None:
    """Two gateway replicas (two independent stores, each with its own cached head) serve one
    session alternately: a stale replica is refused, re-reads the head and retries."""
    from contextfold.storage import ConcurrentWriteError

    schema = pg.schema()
    replicas = [pg.open(schema), pg.open(schema)]
    cached = [0, 0]
    refused = 0
    for turn in range(40):
        r = turn % 2 if turn % 5 else (turn + 1) % 2  # mostly alternating, sometimes twice
        store = replicas[r]
        events = [_ev(turn * 10), _ev(turn * 10 + 1, "state")]
        for _attempt in range(3):
            try:
                with store.transaction() as tx:
                    out = tx.append("s", events, expected_seq=cached[r], agent_id="gw")
                cached[r] = out[-1].seq + 1
                break
            except ConcurrentWriteError as exc:
                refused += 1
                assert exc.expected == cached[r] and exc.actual == store.head("s")
                cached[r] = store.head("s")  # re-sync
        else:
            raise AssertionError("no progress")
    assert refused >= 20  # each switch of replica met a stale head
    for store in replicas:
        events = list(store.read("s"))
        assert [e.seq for e in events] == list(range(80))
        assert [e.data["i"] for e in events] == [t * 10 + k for t in range(40) for k in (0, 1)]
        assert store.session("s").messages == 40


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    calls = " ".join(
        str(c.get("function", {}).get("arguments", "")) for c in message.get("tool_calls") or []
    )
    return f"{content or ''} {calls}".strip()


def test_ranking_matches_the_sqlite_index(pg: SchemaFactory, tmp_path: Any) -> None:
    """The same documents and queries rank the same on PostgreSQL and SQLite (FTS5 bm25)."""
    from contextfold.storage import SearchDoc, SQLiteStore
    from tests.conftest import load_trace, trace_files

    sqlite = SQLiteStore(tmp_path / "ws")
    assert sqlite.fts5
    store = pg.open()
    docs = []
    for t, path in enumerate(trace_files()[:3]):
        for i, message in enumerate(load_trace(path)):
            body = _text(message)
            hints = (
                {"command": body.split("\n", 1)[0][:80]} if message.get("role") == "tool" else {}
            )
            docs.append(
                SearchDoc(
                    namespace="session" if i % 4 else "evidence",
                    doc_id=f"t{t}:{i}",
                    scope=f"agent{t % 2}",
                    session_id=f"t{t}",
                    fields={"body": body, **hints},
                    meta={"i": i},
                )
            )
    for target in (sqlite, store):
        with target.transaction() as tx:
            tx.index(docs)
    queries = [
        "pytest failed",
        "def test_",
        "import os sys",
        "error traceback KeyError",
        "src/contextfold",
        "git diff HEAD",
        "README.md installation",
        "ValueError: invalid literal",
    ]
    compared = 0
    try:
        for q in queries:
            for kwargs in ({}, {"scopes": ["agent0"]}, {"session_id": "t1"}):
                want = sqlite.search("session", q, limit=10, **kwargs)
                got = store.search("session", q, limit=10, **kwargs)
                assert len(got) == len(want), (q, kwargs)
                for g, w in zip(got, want):
                    assert g.score == pytest.approx(w.score, rel=1e-6, abs=1e-9), (q, kwargs)
                    if g.doc_id != w.doc_id:  # only a tie may order differently
                        assert abs(g.score - w.score) < 1e-9 and g.score == pytest.approx(
                            next(x.score for x in want if x.doc_id == g.doc_id), rel=1e-6
                        )
                    assert g.session_id == w.session_id or g.doc_id != w.doc_id
                compared += len(got)
    finally:
        sqlite.close()
    assert compared > 100


def test_index_statistics_deltas_fold_without_changing_scores(
    pg: SchemaFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from contextfold.storage import pg_search

    store = pg.open()
    for i in range(12):
        with store.transaction() as tx:
            tx.index([_doc("s", i, f"parser step {i} " + "token " * i)])
    with store.transaction() as tx:  # replacing and removing documents count too
        tx.index([_doc("s", 3, "parser replaced")])
        tx.unindex("session", session_id="nobody")

    def deltas() -> tuple[int, int, int]:
        row = store._rows(
            "deltas",
            f"SELECT count(*), sum(docs), sum(tokens) FROM {store.s}.search_deltas",
            (),
        )[0]
        return int(row[0]), int(row[1]), int(row[2])

    count, docs, tokens = deltas()
    assert count == 13 and docs == 12
    before = store.search("session", "parser token", limit=20)
    monkeypatch.setattr(pg_search, "FOLD_DELTAS", 5)
    assert store.search("session", "parser token", limit=20) == before  # and folds
    assert deltas() == (1, docs, tokens)
    assert store.search("session", "parser token", limit=20) == before


def test_stale_tables_are_vacuumed_for_index_only_head_reads(
    pg: SchemaFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some servers run without autovacuum: the store VACUUMs the log once many rows were
    inserted, so message heads are read from their index alone; the refresh runs in a
    background thread, never in a writer's transaction."""
    from contextfold.storage import NewEvent
    from contextfold.storage import postgres as pg_mod
    from contextfold.storage.pg_schema import SMALL_HEAD, analyze_stale

    store = pg.open()
    events = [
        NewEvent(kind="message", data={"i": i, "pad": "x" * 500}, head=[i, f"u{i}"])
        for i in range(1_500)
    ]
    monkeypatch.setattr(pg_mod, "ANALYZE_EVERY", 1_000)
    with store.transaction() as tx:
        tx.append("s", events, expected_seq=0, agent_id="a")
    thread = store._maintenance
    assert thread is not None, "crossing ANALYZE_EVERY must start the background refresh"
    thread.join(timeout=60)
    assert not thread.is_alive()

    def stats(c: Any) -> Any:
        return c.execute(
            "SELECT n_ins_since_vacuum, last_vacuum IS NOT NULL FROM pg_stat_user_tables "
            "WHERE schemaname = %s AND relname = 'events'",
            (store.schema,),
        ).fetchone()

    def vacuumed() -> bool:
        row = store._run("stats", stats)
        if row is not None and row[1]:
            return True
        if row is not None and row[0] >= 1_000:
            assert "events" in store._run("analyze", lambda c: analyze_stale(c, store.schema))
        return False

    # the server publishes table statistics within ~1 s
    wait_until(vacuumed, 20, "the events table was vacuumed", interval=0.2)

    def plan(c: Any) -> str:
        c.execute("SET enable_seqscan = off")  # a small table: the planner would scan it
        rows = c.execute(
            f"EXPLAIN (ANALYZE, COSTS OFF) SELECT seq, kind, head::text FROM {store.s}.events "
            f"WHERE session_id = 's' AND kind = 'message' AND {SMALL_HEAD} ORDER BY seq"
        ).fetchall()
        c.execute("RESET enable_seqscan")
        return "\n".join(str(r[0]) for r in rows)

    c_plan = store._run("plan", plan)
    assert "Index Only Scan using events_heads" in c_plan and "Heap Fetches: 0" in c_plan
    assert [h.head for h in store.read_heads("s")][:2] == [[0, "u0"], [1, "u1"]]
    store.close()


def _slow_maintenance(marker: str) -> Any:
    """Stands in for a VACUUM of a large log: one statement that runs for a minute."""

    def slow(conn: Any, schema: str, *args: Any, **kwargs: Any) -> list[str]:
        conn.execute(f"SELECT pg_sleep(60) /* {marker} */")
        return []

    return slow


def _start_slow_maintenance(store: Any, marker: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """One write starts a maintenance run that stands for a long VACUUM; returns once the
    server runs it."""
    from contextfold.storage import postgres as pg_mod

    monkeypatch.setattr(pg_mod, "analyze_stale", _slow_maintenance(marker))
    monkeypatch.setattr(pg_mod, "ANALYZE_EVERY", 1)
    with store.transaction() as tx:
        tx.append("s", [_ev(0)], expected_seq=0, agent_id="a")
    wait_until(lambda: _running(store, marker) > 0, 10, "the maintenance run started")
    assert _running(store, marker) == 1, "the maintenance run did not start"


def _running(store: Any, marker: str) -> int:
    """How many server backends are running the statement tagged ``marker``."""
    import psycopg

    with psycopg.connect(pg_support.postgres_url(), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE %s "
            "AND pid <> pg_backend_pid()",
            (f"%{marker}%",),
        ).fetchone()
    return int(row[0]) if row else 0


def test_a_long_maintenance_run_never_holds_a_writers_connection(
    pg: SchemaFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The background VACUUM/ANALYZE does not take one of the pool's connections: with a
    pool of one, a write made while a long VACUUM runs goes through at once instead of
    waiting for the VACUUM (and failing when the pool's timeout runs out)."""

    marker = f"cf-maintenance-{pg_support.new_schema_name()}"
    store = pg.open(min_size=1, max_size=1, timeout=3)
    _start_slow_maintenance(store, marker, monkeypatch)
    started = time.monotonic()
    with store.transaction() as tx:  # the pool's one connection is free
        tx.append("s", [_ev(1)], expected_seq=1, agent_id="a")
    assert store.head("s") == 2
    assert time.monotonic() - started < 2.5


def test_close_stops_a_maintenance_run_under_way(
    pg: SchemaFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closing the store while a long VACUUM runs in the background cancels it: close()
    returns at once and nothing of the store keeps running on the server."""

    marker = f"cf-maintenance-{pg_support.new_schema_name()}"
    store = pg.open()
    _start_slow_maintenance(store, marker, monkeypatch)
    thread = store._maintenance
    started = time.monotonic()
    store.close()
    assert time.monotonic() - started < 5, "close() waited for the maintenance run"
    assert thread is not None and not thread.is_alive()
    wait_until(lambda: not _running(store, marker), 5, "the maintenance statement ended")


def test_heads_of_sessions_with_long_ids_fit_the_index(pg: SchemaFactory) -> None:
    """A btree entry holds at most 2704 bytes: a head just under the covering index's limit
    of a session whose id is long (the Store API takes any id) is still written, and read
    back once, in order, with the others."""
    from contextfold.storage import NewEvent

    store = pg.open()

    def noise(n: int) -> str:  # incompressible: the index cannot squeeze it
        return "".join(hashlib.sha256(f"{n}:{i}".encode()).hexdigest() for i in range(n // 64 + 1))[
            :n
        ]

    sid = noise(1_000)
    heads = [[0, noise(1_950), "user", 1, None, None], [1, "u1", "user", 1, None, None]]
    with store.transaction() as tx:
        tx.append(
            sid,
            [NewEvent(kind="message", data={}, head=h) for h in heads],
            expected_seq=0,
            agent_id="a",
        )
    assert [h.head for h in store.read_heads(sid, kinds=["message"])] == heads
