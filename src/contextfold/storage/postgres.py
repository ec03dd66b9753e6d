"""The PostgreSQL backend: many workers on many hosts share sessions through one database.

``PostgresStore("postgresql://user@host/db")`` keeps event logs, documents, the search index
and (by default) blobs in tables of one schema, created by the versioned migrations of
:mod:`.pg_schema`. Connections come from a ``psycopg_pool.ConnectionPool`` (each checked before
use, so a connection the server dropped is replaced instead of failing a call; the check asks
the server only when the connection's socket has something to read, which is how a dropped
connection shows, so a healthy one costs no round trip).

Expected-sequence appends are race-free across processes and hosts: an append is one
statement that moves the session's head in ``sessions`` from the expected value to the new one
(compare and set; the row lock serializes concurrent writers and a writer that is behind finds
a different head) and inserts the events only if that succeeded, so a stale writer gets
:class:`~.base.ConcurrentWriteError` and never writes a row. The ``(session_id, seq)`` primary
key of ``events`` backs this up. The session row (with its owner agent) is inserted by the
statement that appends the session's first events. Transactions run in pipeline mode: an
append costs one round trip, documents and index rows travel with the commit.

Search ranks with SQLite FTS5's ``bm25()`` formula and statistics (k1=1.2, b=0.75, idf
``ln((N - n + 0.5) / (n + 0.5))`` floored at 1e-6, hint fields weighing double, the document
count, lengths and frequencies taken over the whole index) over GIN-indexed ``tsvector`` s of
pre-tokenized text, so a query ranks the same documents the same way on both backends (see
:mod:`.pg_schema` for the encoding and :mod:`.pg_search` for the query).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from operator import itemgetter
from typing import Any

import psycopg
import psycopg.conninfo
import psycopg_pool

from ..errors import StorageError
from . import pg_search
from .base import (
    JSON,
    Event,
    EventHead,
    SearchHit,
    SessionInfo,
)
from .branches import BranchSearch, Chain, segments
from .pg_branches import chain_sql, to_chain
from .pg_connect import ServerUnresponsive, public_url, split_param, split_schema
from .pg_pool import ConnectArgs, Connections, resolve_timeout
from .pg_schema import (
    analyze_stale,
    check_schema_name,
    migrate,
)
from .pg_write import EVENT_COLS, PgBlobStore, PgTransaction, delete_rows
from .postgres_rows import SESSION_COLS, decode_heads, event_row, heads_query, session_row

Conn = psycopg.Connection[tuple[object, ...]]

#: Rows a store writes between two checks of the tables' planner statistics.
ANALYZE_EVERY = 20_000
#: Events fetched per round trip when reading a log.
PAGE = 2_000


class PostgresStore(BranchSearch):
    """Event logs, blobs, search and documents in a PostgreSQL database.

    ``url`` is a libpq URL (``postgresql://user:password@host:5432/db``); ``schema`` (default
    ``contextfold``, or the URL's ``?schema=`` parameter) names the schema holding the tables,
    created on first open. Thread-safe; each process opens its own store.
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        min_size: int = 1,
        max_size: int = 10,
        timeout: float | None = None,
    ) -> None:
        if not url.startswith(("postgresql://", "postgres://")):
            raise StorageError(f"not a PostgreSQL URL: {public_url(url)!r}")
        conninfo, url_schema = split_schema(url)
        conninfo, url_timeout = split_param(conninfo, "timeout")
        timeout = resolve_timeout(timeout, url_timeout)
        try:
            given = psycopg.conninfo.conninfo_to_dict(conninfo)
        except psycopg.ProgrammingError as exc:
            raise StorageError(f"bad PostgreSQL URL {public_url(url)!r}: {exc}") from None
        # JIT compiling costs more than it saves on these short statements
        options = " ".join(filter(None, [str(given.get("options") or ""), "-c jit=off"]))
        self.schema = check_schema_name(schema or url_schema or "contextfold")
        self._url = public_url(url)
        self._closed = False
        self._lock = threading.Lock()
        #: rows written since the planner statistics were last checked
        self._written = 0
        #: the background statistics refresh, while one runs, and its own connection
        self._maintenance: threading.Thread | None = None
        self._maintenance_conn: Conn | None = None
        connect_args: ConnectArgs = {
            "autocommit": True,
            "application_name": "contextfold",
            "options": options,
        }
        if "tcp_user_timeout" not in given:  # a server that stops answering mid-call
            connect_args["tcp_user_timeout"] = int(timeout * 1000)
        # one direct connection first: a wrong host, password or parameter fails here at
        # once with the server's reason (the pool would retry until its timeout); it also
        # brings the schema up to date before any pooled connection is used
        try:
            with psycopg.connect(
                conninfo, connect_timeout=max(1, round(timeout)), **connect_args
            ) as conn:
                migrate(conn, self.schema)
                analyze_stale(conn, self.schema)
        except psycopg.Error as exc:
            raise StorageError(f"cannot open PostgreSQL at {self._url}: {exc}") from exc
        self._conninfo, self._connect_args = conninfo, connect_args
        self._connect_timeout = max(1, round(timeout))
        #: the bound on every wait for the server (seconds)
        self.timeout = timeout
        try:
            self._conns = Connections(
                conninfo,
                connect_args,
                min_size=min_size,
                max_size=max_size,
                timeout=timeout,
                name=f"contextfold:{self._url}",
            )
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise StorageError(f"cannot connect to PostgreSQL at {self._url}: {exc}") from exc
        self.s = f'"{self.schema}"'
        self._blobs = PgBlobStore(self)

    def __repr__(self) -> str:
        return f"PostgresStore({self._url!r}, schema={self.schema!r})"

    # ------------------------------------------------------------------ plumbing

    @property
    def url(self) -> str:
        return f"{self._url}?schema={self.schema}"

    @property
    def blobs(self) -> PgBlobStore:
        return self._blobs

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"the PostgreSQL store {self._url} is closed")

    def _run(self, what: str, fn: Any) -> Any:
        """``fn(conn)`` on a pooled connection; a read that meets a dropped connection is
        retried once on a fresh one. Errors become StorageError naming ``what``."""
        self._check_open()
        for attempt in (0, 1):
            try:
                with self._conns.connection() as conn:
                    return fn(conn)
            except StorageError:
                raise
            except psycopg.OperationalError as exc:
                if attempt == 0 and not self._closed and not isinstance(exc, ServerUnresponsive):
                    continue  # the pool discarded the broken connection; try another
                raise StorageError(f"PostgreSQL: {what} failed ({self._url}): {exc}") from exc
            except (psycopg.Error, psycopg_pool.PoolTimeout, UnicodeEncodeError) as exc:
                raise StorageError(f"PostgreSQL: {what} failed ({self._url}): {exc}") from exc
        raise AssertionError("unreachable")

    def _rows(self, what: str, query: str, params: Sequence[Any] | Mapping[str, Any]) -> list[Any]:
        def fetch(conn: Conn) -> list[Any]:
            return conn.execute(query, params).fetchall()

        rows: list[Any] = self._run(what, fetch)
        return rows

    @contextmanager
    def transaction(self) -> Iterator[PgTransaction]:
        """One atomic unit; any exception (or a dropped connection) rolls it all back."""
        self._check_open()
        tx: PgTransaction | None = None
        try:
            # pipeline mode: queued writes travel with the next statement that needs an
            # answer (an append) or with the commit; the transaction ends before the pipeline
            stack, conn = self._conns.begin()
            with stack:
                tx = PgTransaction(self, conn)
                yield tx
                tx.done = True
                tx.pending.append("commit")
        except StorageError:
            raise
        except (psycopg.Error, psycopg_pool.PoolTimeout, UnicodeEncodeError) as exc:
            steps = ", ".join(tx.pending) if tx is not None and tx.pending else "begin"
            raise StorageError(
                f"PostgreSQL transaction failed and was rolled back (at: {steps}) "
                f"({self._url}): {exc}"
            ) from exc
        finally:
            if tx is not None:
                tx.done = True
        self._written += tx.rows if tx is not None else 0
        if self._written >= ANALYZE_EVERY:
            self._written = 0
            self._start_maintenance()

    def _start_maintenance(self) -> None:
        """Refresh statistics (and VACUUM the log and the search table) in the background:
        on a large table that takes seconds no writer should wait for."""
        with self._lock:
            if self._closed or (self._maintenance is not None and self._maintenance.is_alive()):
                return
            self._maintenance = threading.Thread(
                target=self._maintain, name="contextfold-pg-maintenance", daemon=True
            )
            self._maintenance.start()

    def _maintain(self) -> None:
        """The refresh, on a connection of its own: a VACUUM of a large log holds it for
        long, and no writer waits for one of the pool's connections meanwhile (a pool of
        ``max_size`` connections, plus this one while it runs); :meth:`close` cancels it."""
        # committed already: a failure here must not look like a failed transaction
        try:
            conn = psycopg.connect(
                self._conninfo, connect_timeout=self._connect_timeout, **self._connect_args
            )
        except psycopg.Error:
            return
        try:
            with self._lock:
                if self._closed:
                    return
                self._maintenance_conn = conn
            analyze_stale(conn, self.schema, lambda: self._closed)
        except psycopg.Error:
            pass  # cancelled by close(), or the server went away: a later run redoes it
        finally:
            with self._lock:
                self._maintenance_conn = None
            conn.close()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            maintenance = self._maintenance
            # a VACUUM under way is stopped (a later run redoes it); the lock keeps its
            # connection open meanwhile
            if self._maintenance_conn is not None:
                with contextlib.suppress(psycopg.Error):
                    self._maintenance_conn.cancel_safe(timeout=5)
        if maintenance is not None:
            maintenance.join(timeout=30)
        self._conns.close()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ event log

    def head(self, session_id: str) -> int:
        rows = self._rows(
            f"read the head of session {session_id!r}",
            f"SELECT head FROM {self.s}.sessions WHERE session_id = %s",
            (session_id,),
        )
        return int(rows[0][0]) if rows else 0

    def read(
        self,
        session_id: str,
        *,
        start: int = 0,
        stop: int | None = None,
        kinds: Sequence[str] | None = None,
    ) -> Iterator[Event]:
        """Events in order, fetched a page at a time (no connection is held between pages;
        events are immutable once written, so pages are consistent)."""
        self._check_open()
        for owner, lo, hi in segments(self._chain(session_id), start, stop):
            for row in self._read_rows(owner, lo, hi, kinds):
                yield event_row(row, session_id)

    def _chain(self, session_id: str) -> Chain:
        rows = self._rows(
            f"read the branches of session {session_id!r}", chain_sql(self.s), (session_id,)
        )
        return to_chain(session_id, rows)

    def _read_rows(
        self, owner: str, start: int, stop: int | None, kinds: Sequence[str] | None
    ) -> Iterator[Any]:
        cursor = max(start, 0)
        kind_sql = " AND kind = ANY(%s)" if kinds is not None else ""
        stop_sql = " AND seq < %s" if stop is not None else ""
        query = (
            f"SELECT {EVENT_COLS} FROM {self.s}.events WHERE session_id = %s AND seq >= %s"
            f"{stop_sql}{kind_sql} ORDER BY seq LIMIT {PAGE}"
        )
        while True:
            params: list[Any] = [owner, cursor]
            if stop is not None:
                params.append(stop)
            if kinds is not None:
                params.append(list(kinds))
            rows = self._rows(f"read session {owner!r}", query, params)
            yield from rows
            if len(rows) < PAGE:
                return
            cursor = int(rows[-1][1]) + 1

    def read_heads(
        self,
        session_id: str,
        *,
        start: int = 0,
        stop: int | None = None,
        kinds: Sequence[str] | None = None,
        details: bool = False,
    ) -> list[EventHead]:
        self._check_open()
        if kinds is not None and not kinds:
            return []
        out: list[EventHead] = []
        for owner, lo, hi in segments(self._chain(session_id), start, stop):
            out += self._heads(owner, lo, hi, kinds, details)
        return out

    def _heads(
        self,
        session_id: str,
        start: int,
        stop: int | None,
        kinds: Sequence[str] | None,
        details: bool,
    ) -> list[EventHead]:
        sql, params = heads_query(self.s, session_id, start, stop, kinds, details)
        rows = self._rows(f"read the heads of session {session_id!r}", sql, params)
        if not details:
            # in order here: the rows come in runs already ordered (the index's), which a
            # stable merge joins in one pass; the server would sort them all
            rows.sort(key=itemgetter(0))
        return decode_heads(rows, session_id, details)

    def read_last(
        self, session_id: str, n: int, *, kinds: Sequence[str] | None = None
    ) -> list[Event]:
        if n <= 0:
            return []
        kind_sql = " AND kind = ANY(%s)" if kinds is not None else ""
        rows: list[Any] = []
        for owner, lo, hi in reversed(segments(self._chain(session_id), 0, None)):
            params: list[Any] = [owner, lo, hi if hi is not None else 2**62]
            if kinds is not None:
                params.append(list(kinds))
            rows += self._rows(
                f"read the last events of session {session_id!r}",
                f"SELECT {EVENT_COLS} FROM {self.s}.events WHERE session_id = %s AND seq >= %s "
                f"AND seq < %s{kind_sql} ORDER BY seq DESC LIMIT %s",
                [*params, n - len(rows)],
            )
            if len(rows) >= n:
                break
        return [event_row(r, session_id) for r in reversed(rows)]

    def session(self, session_id: str) -> SessionInfo | None:
        rows = self._rows(
            f"read session {session_id!r}",
            f"SELECT {SESSION_COLS} FROM {self.s}.sessions WHERE session_id = %s",
            (session_id,),
        )
        return session_row(rows[0]) if rows else None

    def sessions(self, agent_ids: Sequence[str] | None = None) -> list[SessionInfo]:
        if agent_ids is None:
            query = f"SELECT {SESSION_COLS} FROM {self.s}.sessions"
            params: list[Any] = []
        else:
            query = f"SELECT {SESSION_COLS} FROM {self.s}.sessions WHERE agent_id = ANY(%s)"
            params = [list(agent_ids)]
        rows = self._rows("list sessions", query + " ORDER BY updated_at DESC, session_id", params)
        return [session_row(r) for r in rows]

    def branches(self, session_id: str) -> list[str]:
        rows = self._rows(
            f"list the branches of session {session_id!r}",
            f"SELECT session_id FROM {self.s}.sessions WHERE parent_id = %s ORDER BY session_id",
            (session_id,),
        )
        return [str(r[0]) for r in rows]

    def delete_session(self, session_id: str) -> None:
        def delete(conn: Conn) -> None:
            with conn.transaction():
                delete_rows(conn, self.s, session_id)

        self._run(f"delete session {session_id!r}", delete)

    # ------------------------------------------------------------------ documents

    def get_doc(self, namespace: str, key: str) -> dict[str, JSON] | None:
        rows = self._rows(
            f"read document {namespace}/{key}",
            f"SELECT value FROM {self.s}.documents WHERE namespace = %s AND key = %s",
            (namespace, key),
        )
        return dict(rows[0][0]) if rows else None

    def docs(self, namespace: str, *, prefix: str = "") -> dict[str, dict[str, JSON]]:
        rows = self._rows(
            f"list documents {namespace}/{prefix}*",
            f"SELECT key, value FROM {self.s}.documents WHERE namespace = %s "
            "AND left(key, length(%s)) = %s ORDER BY key",
            (namespace, prefix, prefix),
        )
        return {str(k): dict(v) for k, v in rows}

    # ------------------------------------------------------------------ search

    def _chain_of(self, session_id: str) -> Chain:
        return self._chain(session_id)

    def _search(
        self,
        namespace: str,
        query: str,
        *,
        scopes: Sequence[str] | None = None,
        session_id: str | None = None,
        limit: int = 10,
    ) -> list[SearchHit]:
        def run(conn: Conn) -> list[SearchHit]:
            return pg_search.search(
                conn,
                self.s,
                namespace,
                query,
                scopes=scopes,
                session_id=session_id,
                limit=limit,
            )

        hits: list[SearchHit] = self._run(f"search {namespace!r} for {query[:60]!r}", run)
        return hits

    def _lookup(
        self,
        namespace: str,
        *,
        session_id: str,
        keys: Sequence[str] = (),
        prefixes: Sequence[str] = (),
    ) -> list[tuple[str, str]]:
        def run(conn: Conn) -> list[tuple[str, str]]:
            return pg_search.lookup(conn, self.s, namespace, session_id, keys, prefixes)

        found: list[tuple[str, str]] = self._run(f"look up {namespace!r} keys", run)
        return found

    def metas(self, namespace: str, doc_ids: Sequence[str]) -> dict[str, dict[str, JSON]]:
        rows = self._rows(
            f"read {namespace!r} documents",
            f"SELECT doc_id, meta FROM {self.s}.search_docs WHERE namespace = %s "
            "AND doc_id = ANY(%s::text[])",
            (namespace, list(dict.fromkeys(doc_ids))),
        )
        return {str(d): dict(m) for d, m in rows}


__all__ = ["PgBlobStore", "PgTransaction", "PostgresStore", "public_url"]
