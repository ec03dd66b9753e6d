"""The writing side of the PostgreSQL store: one transaction's writes, and the blob table."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import psycopg
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
)
from .pg_schema import STAT_SHARDS, encode_fields
from .util import check_bytes, check_sha, sha256_hex, utc_now

if TYPE_CHECKING:
    from .postgres import PostgresStore

Conn = psycopg.Connection[tuple[Any, ...]]
EVENT_COLS = "session_id, seq, kind, ts, data"


def dumps(value: Mapping[str, JSON], what: str) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise StorageError(f"{what} is not JSON-serializable: {exc}") from exc
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: keep them as \\u escapes
        text = json.dumps(value, ensure_ascii=True, separators=(",", ":"))
    return text


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
        #: events and index rows written (the store re-checks planner statistics now and then)
        self.rows = 0

    @property
    def backend_pid(self) -> int:
        """The server process running this transaction (for diagnostics and fault tests)."""
        return int(self._conn.info.backend_pid)

    def flush_stats(self) -> None:
        """Add this transaction's index changes to the index statistics. Done last, just
        before the commit, so the stats row is locked only while committing (no deadlock)."""
        if self._docs or self._tokens:
            self._use("update the search statistics")
            add_stats(self._conn, self._s, self._docs, self._tokens)
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
        self.rows += len(events)
        out = [
            Event(session_id=session_id, seq=expected_seq + i, kind=e.kind, ts=now, data=e.data)
            for i, e in enumerate(events)
        ]
        if out:
            params = [
                (session_id, ev.seq, ev.kind, now, dumps(ev.data, f"event {ev.seq} ({ev.kind})"))
                for ev in out
            ]
            try:
                with conn.cursor() as cur:
                    cur.executemany(
                        f"INSERT INTO {s}.events ({EVENT_COLS}) VALUES (%s, %s, %s, %s, %s::json)",
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
            (namespace, key, dumps(value, f"document {namespace}/{key}")),
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
        self.rows += len(docs)
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
            meta = dumps(d.meta, f"search document {d.namespace}/{d.doc_id} meta")
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


def add_stats(conn: Conn, s: str, docs: int, tokens: int) -> None:
    conn.execute(
        f"UPDATE {s}.search_stats SET docs = docs + %s, tokens = tokens + %s "
        "WHERE shard = pg_backend_pid() %% %s",
        (docs, tokens, STAT_SHARDS),
    )


__all__ = ["EVENT_COLS", "PgBlobStore", "PgTransaction", "add_stats", "dumps"]
