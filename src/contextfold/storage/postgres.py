"""The PostgreSQL backend: many workers on many hosts share sessions through one database.

``PostgresStore("postgresql://user@host/db")`` keeps event logs, documents, the search index
and (by default) blobs in tables of one schema, created by the versioned migrations of
:mod:`.pg_schema`. Connections come from a ``psycopg_pool.ConnectionPool`` (each checked before
use, so a connection the server dropped is replaced instead of failing a call).

Expected-sequence appends are race-free across processes and hosts: the session's row in
``sessions`` holds its head and is locked (``SELECT ... FOR UPDATE``) by the appending
transaction; a writer that is behind finds a different head and gets
:class:`~.base.ConcurrentWriteError`. The ``(session_id, seq)`` primary key of ``events`` backs
this up: a duplicate position is refused, never stored. The session row (with its owner agent)
is inserted in the transaction of the session's first event.

Search ranks with BM25 computed in SQL over the GIN-indexed ``tsvector`` of pre-tokenized text
(see :mod:`.pg_schema`), with SQLite FTS5's ``bm25()`` formula and statistics (k1=1.2, b=0.75,
idf ``ln((N - n + 0.5) / (n + 0.5))`` floored at 1e-6, hint fields weighing double, the
document count, lengths and frequencies taken over the whole index), so a query ranks the same
documents the same way on both backends.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
import psycopg_pool
from psycopg import errors as pg_errors

from ..errors import StorageError
from .base import (
    JSON,
    BlobCorruptError,
    BlobNotFoundError,
    ConcurrentWriteError,
    Event,
    NewEvent,
    SearchDoc,
    SearchHit,
    SessionInfo,
)
from .pg_schema import (
    SEARCH_SQL,
    STAT_SHARDS,
    TF_WEIGHTS,
    any_query,
    check_schema_name,
    encode_fields,
    migrate,
    search_terms,
    term_query,
)
from .util import check_bytes, check_sha, sha256_hex, utc_now

Conn = psycopg.Connection[tuple[Any, ...]]
T = TypeVar("T")

#: Events fetched per round trip when reading a log.
PAGE = 500
K1 = 1.2
B = 0.75
_EVENT_COLS = "session_id, seq, kind, ts, data"


def _dumps(value: Mapping[str, JSON], what: str) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise StorageError(f"{what} is not JSON-serializable: {exc}") from exc
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: keep them as \\u escapes
        text = json.dumps(value, ensure_ascii=True, separators=(",", ":"))
    return text


def public_url(url: str) -> str:
    """``url`` without user, password and query parameters (safe to log and show)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _split_schema(url: str) -> tuple[str, str | None]:
    """The connection URL without a ``schema`` query parameter, and that parameter."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = next((v for k, v in query if k == "schema"), None)
    rest = urlencode([(k, v) for k, v in query if k != "schema"])
    return urlunsplit((parts.scheme, parts.netloc, parts.path, rest, parts.fragment)), schema


class PostgresStore:
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
        timeout: float = 30.0,
    ) -> None:
        if not url.startswith(("postgresql://", "postgres://")):
            raise StorageError(f"not a PostgreSQL URL: {public_url(url)!r}")
        conninfo, url_schema = _split_schema(url)
        self.schema = check_schema_name(schema or url_schema or "contextfold")
        self._url = public_url(url)
        self._closed = False
        self._lock = threading.Lock()
        try:
            self._pool: psycopg_pool.ConnectionPool[Conn] = psycopg_pool.ConnectionPool(
                conninfo,
                min_size=min_size,
                max_size=max(max_size, min_size),
                open=False,
                timeout=timeout,
                kwargs={"autocommit": True, "application_name": "contextfold"},
                check=psycopg_pool.ConnectionPool.check_connection,
                name=f"contextfold:{self._url}",
            )
            self._pool.open(wait=True, timeout=timeout)
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise StorageError(f"cannot connect to PostgreSQL at {self._url}: {exc}") from exc
        try:
            self._run("migrate the schema", lambda conn: migrate(conn, self.schema))
        except BaseException:
            self._pool.close()
            raise
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
                with self._pool.connection() as conn:
                    return fn(conn)
            except StorageError:
                raise
            except psycopg.OperationalError as exc:
                if attempt == 0 and not self._closed:
                    continue  # the pool discarded the broken connection; try another
                raise StorageError(f"PostgreSQL: {what} failed ({self._url}): {exc}") from exc
            except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
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
            with self._pool.connection() as conn, conn.transaction():
                tx = PgTransaction(self, conn)
                yield tx
                tx.flush_stats()
                tx.done = True
        except StorageError:
            raise
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            stage = "commit" if tx is not None and tx.done else tx.last if tx else "begin"
            raise StorageError(
                f"PostgreSQL transaction failed at {stage} and was rolled back ({self._url}): {exc}"
            ) from exc
        finally:
            if tx is not None:
                tx.done = True

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._pool.close()

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
        cursor = max(start, 0)
        kind_sql = " AND kind = ANY(%s)" if kinds is not None else ""
        stop_sql = " AND seq < %s" if stop is not None else ""
        query = (
            f"SELECT {_EVENT_COLS} FROM {self.s}.events WHERE session_id = %s AND seq >= %s"
            f"{stop_sql}{kind_sql} ORDER BY seq LIMIT {PAGE}"
        )
        while True:
            params: list[Any] = [session_id, cursor]
            if stop is not None:
                params.append(stop)
            if kinds is not None:
                params.append(list(kinds))
            rows = self._rows(f"read session {session_id!r}", query, params)
            for row in rows:
                yield _event(row)
            if len(rows) < PAGE:
                return
            cursor = int(rows[-1][1]) + 1

    def read_last(
        self, session_id: str, n: int, *, kinds: Sequence[str] | None = None
    ) -> list[Event]:
        if n <= 0:
            return []
        kind_sql = " AND kind = ANY(%s)" if kinds is not None else ""
        params: list[Any] = [session_id]
        if kinds is not None:
            params.append(list(kinds))
        rows = self._rows(
            f"read the last events of session {session_id!r}",
            f"SELECT {_EVENT_COLS} FROM {self.s}.events WHERE session_id = %s{kind_sql} "
            "ORDER BY seq DESC LIMIT %s",
            [*params, n],
        )
        return [_event(r) for r in reversed(rows)]

    def session(self, session_id: str) -> SessionInfo | None:
        rows = self._rows(
            f"read session {session_id!r}",
            f"SELECT {_SESSION_COLS} FROM {self.s}.sessions WHERE session_id = %s",
            (session_id,),
        )
        return _session(rows[0]) if rows else None

    def sessions(self, agent_ids: Sequence[str] | None = None) -> list[SessionInfo]:
        if agent_ids is None:
            query = f"SELECT {_SESSION_COLS} FROM {self.s}.sessions"
            params: list[Any] = []
        else:
            query = f"SELECT {_SESSION_COLS} FROM {self.s}.sessions WHERE agent_id = ANY(%s)"
            params = [list(agent_ids)]
        rows = self._rows("list sessions", query + " ORDER BY updated_at DESC, session_id", params)
        return [_session(r) for r in rows]

    def delete_session(self, session_id: str) -> None:
        def delete(conn: Conn) -> None:
            with conn.transaction():
                conn.execute(
                    f"SELECT 1 FROM {self.s}.sessions WHERE session_id = %s FOR UPDATE",
                    (session_id,),
                )
                conn.execute(f"DELETE FROM {self.s}.events WHERE session_id = %s", (session_id,))
                gone = conn.execute(
                    f"DELETE FROM {self.s}.search_docs WHERE session_id = %s RETURNING doc_len",
                    (session_id,),
                ).fetchall()
                if gone:
                    _add_stats(conn, self.s, -len(gone), -sum(int(r[0]) for r in gone))
                conn.execute(
                    f"DELETE FROM {self.s}.documents WHERE key = %s OR "
                    "(left(key, length(%s) + 1) = %s || '/')",
                    (session_id, session_id, session_id),
                )
                conn.execute(f"DELETE FROM {self.s}.sessions WHERE session_id = %s", (session_id,))

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

    def search(
        self,
        namespace: str,
        query: str,
        *,
        scopes: Sequence[str] | None = None,
        session_id: str | None = None,
        limit: int = 10,
    ) -> list[SearchHit]:
        terms = search_terms(query)
        if not terms or limit <= 0 or (scopes is not None and not scopes):
            return []
        filters = ""
        params: dict[str, Any] = {
            "ns": namespace,
            "terms": terms,
            "tqs": [term_query(t) for t in terms],
            "q": any_query(terms),
            "limit": limit,
            "k1": K1,
            "b": B,
        }
        if scopes is not None:
            filters += " AND scope = ANY(%(scopes)s)"
            params["scopes"] = list(scopes)
        if session_id is not None:
            filters += " AND session_id = %(sid)s"
            params["sid"] = session_id
        sql = (
            SEARCH_SQL.replace("{s}", self.s)
            .replace("{filters}", filters)
            .replace("{w}", TF_WEIGHTS)
        )

        def run(conn: Conn) -> list[Any]:
            with conn.transaction():
                # the GIN index finds the candidates (a scan would decode every row's tsvector)
                conn.execute("SET LOCAL enable_seqscan = off")
                return conn.execute(sql, params).fetchall()

        rows: list[Any] = self._run(f"search {namespace!r} for {query[:60]!r}", run)
        return [
            SearchHit(doc_id=str(r[0]), session_id=str(r[1]), score=float(r[2]), meta=r[3])
            for r in rows
        ]


class PgTransaction:
    """The writes of one :meth:`PostgresStore.transaction` (one database transaction)."""

    def __init__(self, store: PostgresStore, conn: Conn) -> None:
        self._store = store
        self._conn = conn
        self._s = store.s
        self.done = False
        #: what the transaction was doing last (named in errors)
        self.last = "begin"
        self._docs = 0
        self._tokens = 0

    @property
    def backend_pid(self) -> int:
        """The server process running this transaction (for diagnostics and fault tests)."""
        return int(self._conn.info.backend_pid)

    def flush_stats(self) -> None:
        """Add this transaction's index changes to the index statistics. Done last, just
        before the commit, so the stats row is locked only while committing (no deadlock)."""
        if self._docs or self._tokens:
            self._use("update the search statistics")
            _add_stats(self._conn, self._s, self._docs, self._tokens)
            self._docs = self._tokens = 0

    def _removed(self, rows: Sequence[Any]) -> None:
        self._docs -= len(rows)
        self._tokens -= sum(int(r[0]) for r in rows)

    def _use(self, what: str) -> None:
        if self.done:
            raise StorageError(f"{what}: the transaction has already ended")
        self.last = what

    def append(
        self,
        session_id: str,
        events: Sequence[NewEvent],
        *,
        expected_seq: int,
        agent_id: str,
        title: str | None = None,
    ) -> list[Event]:
        self._use(f"append to session {session_id!r}")
        if expected_seq < 0:
            raise StorageError(f"expected_seq must be >= 0, got {expected_seq}")
        s, conn, now = self._s, self._conn, utc_now()
        created = False
        if expected_seq == 0:
            row = conn.execute(
                f"INSERT INTO {s}.sessions (session_id, agent_id, title, created_at, "
                "updated_at) VALUES (%s, %s, %s, %s, %s) ON CONFLICT (session_id) DO NOTHING "
                "RETURNING session_id",
                (session_id, agent_id, title or "", now, now),
            ).fetchone()
            created = row is not None
        if not created:
            found = conn.execute(
                f"SELECT head, agent_id FROM {s}.sessions WHERE session_id = %s FOR UPDATE",
                (session_id,),
            ).fetchone()
            head = int(found[0]) if found is not None else 0
            if found is None or head != expected_seq:
                raise ConcurrentWriteError(session_id, expected_seq, head)
            if found[1] != agent_id:
                raise StorageError(
                    f"session {session_id!r} belongs to agent {found[1]!r}, "
                    f"not {agent_id!r}; refusing to append"
                )
        out = [
            Event(session_id=session_id, seq=expected_seq + i, kind=e.kind, ts=now, data=e.data)
            for i, e in enumerate(events)
        ]
        if out:
            params = [
                (session_id, ev.seq, ev.kind, now, _dumps(ev.data, f"event {ev.seq} ({ev.kind})"))
                for ev in out
            ]
            try:
                with conn.cursor() as cur:
                    cur.executemany(
                        f"INSERT INTO {s}.events ({_EVENT_COLS}) VALUES (%s, %s, %s, %s, %s::json)",
                        params,
                    )
            except pg_errors.UniqueViolation as exc:  # the primary key caught a stale writer
                raise ConcurrentWriteError(session_id, expected_seq, None) from exc
        messages = sum(1 for e in events if e.kind == "message")
        conn.execute(
            f"UPDATE {s}.sessions SET head = %s, messages = messages + %s, updated_at = %s "
            "WHERE session_id = %s",
            (expected_seq + len(out), messages, now, session_id),
        )
        return out

    def put_doc(self, namespace: str, key: str, value: Mapping[str, JSON]) -> None:
        self._use(f"write document {namespace}/{key}")
        self._conn.execute(
            f"INSERT INTO {self._s}.documents (namespace, key, value) VALUES (%s, %s, %s::json) "
            "ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value, "
            "updated_at = now()",
            (namespace, key, _dumps(value, f"document {namespace}/{key}")),
        )

    def delete_doc(self, namespace: str, key: str) -> None:
        self._use(f"delete document {namespace}/{key}")
        self._conn.execute(
            f"DELETE FROM {self._s}.documents WHERE namespace = %s AND key = %s",
            (namespace, key),
        )

    def index(self, docs: Sequence[SearchDoc]) -> None:
        self._use(f"index {len(docs)} search documents")
        if not docs:
            return
        docs = list({(d.namespace, d.doc_id): d for d in docs}.values())  # last one wins
        rows = []
        by_ns: dict[str, list[str]] = {}
        for d in docs:
            by_ns.setdefault(d.namespace, []).append(d.doc_id)
        for ns, ids in by_ns.items():  # replaced documents leave the statistics
            self._removed(
                self._conn.execute(
                    f"DELETE FROM {self._s}.search_docs WHERE namespace = %s "
                    "AND doc_id = ANY(%s) RETURNING doc_len",
                    (ns, ids),
                ).fetchall()
            )
        for d in docs:
            tsv, length = encode_fields(d.fields)
            self._docs += 1
            self._tokens += length
            meta = _dumps(d.meta, f"search document {d.namespace}/{d.doc_id} meta")
            rows.append((d.namespace, d.doc_id, d.scope, d.session_id, meta, length, tsv))
        with self._conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO {self._s}.search_docs (namespace, doc_id, scope, session_id, meta, "
                "doc_len, tsv) VALUES (%s, %s, %s, %s, %s::json, %s, %s::tsvector) "
                "ON CONFLICT (namespace, doc_id) DO UPDATE SET scope = excluded.scope, "
                "session_id = excluded.session_id, meta = excluded.meta, "
                "doc_len = excluded.doc_len, tsv = excluded.tsv",
                rows,
            )

    def unindex(self, namespace: str, *, session_id: str) -> None:
        self._use(f"unindex {namespace!r} of session {session_id!r}")
        self._removed(
            self._conn.execute(
                f"DELETE FROM {self._s}.search_docs WHERE namespace = %s AND session_id = %s "
                "RETURNING doc_len",
                (namespace, session_id),
            ).fetchall()
        )


class PgBlobStore:
    """Content-addressed blobs in a ``bytea`` table (sha256 checked on every read)."""

    def __init__(self, store: PostgresStore) -> None:
        self._store = store
        self._s = store.s

    def put(self, data: bytes) -> str:
        data = check_bytes(data)
        digest = sha256_hex(data)

        def put(conn: Conn) -> None:
            conn.execute(
                f"INSERT INTO {self._s}.blobs (sha256, size, data) VALUES (%s, %s, %s) "
                "ON CONFLICT (sha256) DO NOTHING",
                (digest, len(data), data),
            )

        self._store._run(f"store blob {digest[:12]} ({len(data)} bytes)", put)
        return digest

    def get(self, sha256: str) -> bytes:
        check_sha(sha256)
        rows = self._store._rows(
            f"read blob {sha256[:12]}",
            f"SELECT data FROM {self._s}.blobs WHERE sha256 = %s",
            (sha256,),
        )
        if not rows:
            raise BlobNotFoundError(f"no blob {sha256} in {self._store.url}")
        data = bytes(rows[0][0])
        if sha256_hex(data) != sha256:
            raise BlobCorruptError(f"blob {sha256} in {self._store.url} does not match its hash")
        return data

    def has(self, sha256: str) -> bool:
        return self.size(sha256) is not None

    def size(self, sha256: str) -> int | None:
        check_sha(sha256)
        rows = self._store._rows(
            f"read the size of blob {sha256[:12]}",
            f"SELECT size FROM {self._s}.blobs WHERE sha256 = %s",
            (sha256,),
        )
        return int(rows[0][0]) if rows else None


def _add_stats(conn: Conn, s: str, docs: int, tokens: int) -> None:
    conn.execute(
        f"UPDATE {s}.search_stats SET docs = docs + %s, tokens = tokens + %s "
        "WHERE shard = pg_backend_pid() %% %s",
        (docs, tokens, STAT_SHARDS),
    )


_SESSION_COLS = "session_id, agent_id, created_at, updated_at, title, head, messages"


def _session(row: Sequence[Any]) -> SessionInfo:
    return SessionInfo(
        session_id=str(row[0]),
        agent_id=str(row[1]),
        created_at=str(row[2]),
        updated_at=str(row[3]),
        title=str(row[4]),
        events=int(row[5]),
        messages=int(row[6]),
    )


def _event(row: Sequence[Any]) -> Event:
    return Event(
        session_id=str(row[0]), seq=int(row[1]), kind=str(row[2]), ts=str(row[3]), data=row[4]
    )


__all__ = ["PgBlobStore", "PgTransaction", "PostgresStore", "public_url"]
