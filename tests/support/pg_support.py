"""Finding the PostgreSQL test server, fresh schemas, and worker processes for the PG tests.

The server is ``$CONTEXTFOLD_TEST_POSTGRES_URL`` (default: the local test server,
``postgresql://postgres@127.0.0.1:5432/test``). Without a reachable server the tests skip with
the reason, except when ``CONTEXTFOLD_REQUIRE_ALL=1`` (CI), where they fail.
Every store gets its own schema (``cf_test_<run>_<n>``), dropped when the test ends.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
URL_ENV = "CONTEXTFOLD_TEST_POSTGRES_URL"
RUN = uuid.uuid4().hex[:8]
_counter = itertools.count()


def postgres_url() -> str:
    return os.environ.get(URL_ENV) or DEFAULT_URL


def _shown(url: str) -> str:
    """The URL without its password (skip reasons end up in CI logs)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def require_postgres() -> str:
    """The server URL, or skip (fail under CONTEXTFOLD_REQUIRE_ALL=1) naming why."""
    url = postgres_url()
    try:
        import psycopg
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        reason = f"psycopg 3 / psycopg-pool not installed ({exc}): pip install '.[postgres]' in the checkout"
    else:
        try:
            with psycopg.connect(url, connect_timeout=5) as conn:
                conn.execute("SELECT 1")
            return url
        except psycopg.Error as exc:
            reason = f"no PostgreSQL server at {_shown(url)} (set ${URL_ENV}): {exc}"
    if os.environ.get("CONTEXTFOLD_REQUIRE_ALL") == "1":
        pytest.fail(f"CONTEXTFOLD_REQUIRE_ALL=1 but {reason}")
    pytest.skip(reason)


def new_schema_name() -> str:
    return f"cf_test_{RUN}_{os.getpid()}_{next(_counter)}"


def drop_schema(url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


class SchemaFactory:
    """Opens PostgresStores on fresh schemas; closes them and drops the schemas at the end."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.schemas: list[str] = []
        self.stores: list[Any] = []

    def schema(self) -> str:
        name = new_schema_name()
        self.schemas.append(name)
        return name

    def open(self, schema: str | None = None, **kwargs: Any) -> Any:
        from contextfold.storage.postgres import PostgresStore

        store = PostgresStore(self.url, schema=schema or self.schema(), **kwargs)
        self.stores.append(store)
        return store

    def cleanup(self) -> None:
        for store in self.stores:
            store.close()
        for schema in self.schemas:
            drop_schema(self.url, schema)


def fresh_store_url(kind: str, folder: Path) -> Iterator[str]:
    """A fixture body: the URL of a new, empty store, created before the test opens it (so
    servers or replicas started on it do not race to create it): ``"folder"`` a workspace at
    ``folder``, ``"postgresql"`` a new schema on the test server, dropped afterwards."""
    from contextfold.storage import open_store

    if kind == "folder":
        open_store(folder).close()
        yield str(folder)
        return
    url = require_postgres()
    schema = new_schema_name()
    store_url = f"{url}?schema={schema}"
    try:
        open_store(store_url).close()
        yield store_url
    finally:
        drop_schema(url, schema)


def schema_factory() -> Iterator[SchemaFactory]:
    factory = SchemaFactory(require_postgres())
    try:
        yield factory
    finally:
        factory.cleanup()


# ----------------------------------------------------------------- worker processes (spawned)


def _wait_until(start_at: float) -> None:
    import time

    delay = start_at - time.time()
    if delay > 0:
        time.sleep(delay)


def worker_append_loop(
    url: str, schema: str, session_id: str, name: str, count: int, start_at: float
) -> int:
    """Append ``count`` events named ``name:i`` to one shared session, one at a time, with a
    stale-head retry loop (read head, append, on ConcurrentWriteError re-read). Returns how
    many conflicts it met."""
    from contextfold.storage import ConcurrentWriteError, NewEvent
    from contextfold.storage.postgres import PostgresStore

    conflicts = 0
    with PostgresStore(url, schema=schema, max_size=2) as store:
        _wait_until(start_at)
        head = store.head(session_id)
        for i in range(count):
            event = NewEvent(kind="message", data={"writer": name, "i": i})
            while True:
                try:
                    with store.transaction() as tx:
                        tx.append(session_id, [event], expected_seq=head, agent_id="shared")
                    head += 1
                    break
                except ConcurrentWriteError:
                    conflicts += 1
                    head = store.head(session_id)
    return conflicts


def worker_own_session(
    url: str, schema: str, session_id: str, batches: int, size: int, start_at: float
) -> int:
    """Write ``batches`` batches of ``size`` events (plus documents and index rows) to one
    session of its own; returns the final head."""
    from contextfold.storage import NewEvent, SearchDoc
    from contextfold.storage.postgres import PostgresStore

    with PostgresStore(url, schema=schema, max_size=2) as store:
        _wait_until(start_at)
        head = 0
        for b in range(batches):
            events = [NewEvent(kind="message", data={"b": b, "i": i}) for i in range(size)]
            with store.transaction() as tx:
                out = tx.append(session_id, events, expected_seq=head, agent_id=session_id)
                tx.put_doc("state", session_id, {"head": head + size})
                tx.index(
                    [
                        SearchDoc(
                            namespace="session",
                            doc_id=f"{session_id}:{e.seq}",
                            scope=session_id,
                            session_id=session_id,
                            fields={"body": f"batch {b} item {e.seq} of {session_id}"},
                        )
                        for e in out
                    ]
                )
            head += size
        return store.head(session_id)


def worker_open(url: str, schema: str, start_at: float) -> int:
    """Open (and so migrate) the schema; returns the schema version found."""
    from contextfold.storage.postgres import PostgresStore

    _wait_until(start_at)
    with PostgresStore(url, schema=schema, max_size=1) as store:
        rows = store._rows("version", f"SELECT max(version) FROM {store.s}.schema_version", ())
        return int(rows[0][0])


# ----------------------------------------------------------------- ContextManager workers


def trace_messages(n: int) -> list[dict[str, Any]]:
    """The first ``n`` messages of the bundled trajectories (several traces joined as needed,
    each trace whole so tool calls keep their results)."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "benchmarks" / "traces"
    out: list[dict[str, Any]] = []
    for path in sorted(root.glob("*.json")):
        trace = json.loads(path.read_text(encoding="utf-8"))
        body = [m for m in trace if m.get("role") != "system"]
        if not out:
            out.extend(trace[:1] if trace and trace[0].get("role") == "system" else [])
        out.extend(body)
        if len(out) >= n:
            break
    # cut after a complete turn: never leave an assistant tool call without its results
    cut = n
    while cut < len(out) and out[cut].get("role") == "tool":
        cut += 1
    return out[:cut]


def worker_manager_session(
    store_url: str, session_id: str, start: int, stop: int, window: int, workdir: str
) -> dict[str, Any]:
    """In a fresh working folder: open the session through ContextManager(store=URL), add the
    trace messages ``start:stop`` with a prepare after each, and return what it saw."""
    os.chdir(workdir)
    from contextfold import ContextManager

    messages = trace_messages(stop)
    with ContextManager(store=store_url, session_id=session_id, context_window=window) as cm:
        resumed = [(m.role, m.text, m.uuid) for m in cm.history]
        first_view = cm.prepare(copy=True)
        for m in messages[start:stop]:
            cm.add(m)
            cm.prepare()
        return {
            "resumed": resumed,
            "first_view": first_view,
            "history": [(m.role, m.text, m.uuid) for m in cm.history],
            "records": len(cm.records()),
            "view": cm.prepare(copy=True),
            "files": sorted(os.listdir(workdir)),
        }


def worker_manager_writer(
    store_url: str, session_id: str, name: str, count: int, start_at: float
) -> int:
    """Add ``count`` user messages ``name i`` through a ContextManager on a session another
    process writes too; on ConcurrentWriteError (the manager reloaded) retry. Returns how many
    conflicts it met."""
    from contextfold import ContextManager
    from contextfold.storage import ConcurrentWriteError

    conflicts = 0
    with ContextManager(store=store_url, session_id=session_id, context_window=32_000) as cm:
        _wait_until(start_at)
        for i in range(count):
            while True:
                try:
                    cm.add({"role": "user", "content": f"{name} {i}"})
                    cm.prepare()
                    break
                except ConcurrentWriteError:
                    conflicts += 1
    return conflicts


def schema_factory_store() -> Iterator[Any]:
    """One PostgresStore on a fresh schema (a fixture body: yields it, then drops the schema)."""
    for factory in schema_factory():
        yield factory.open()
