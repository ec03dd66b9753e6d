"""The writing side of the PostgreSQL store: one transaction's writes, and the blob table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import psycopg

from ..errors import StorageError
from ..jsontypes import JSON, JSONLike, to_int
from . import pg_branches
from .base import (
    BlobCorruptError,
    BlobNotFoundError,
    ConcurrentWriteError,
    Event,
    SearchDoc,
    check_keys,
)
from .base_write import Append, WriteTransaction, check_claim, dump_json
from .pg_schema import doc_tags, encode_fields
from .util import check_bytes, check_sha, sha256_hex, utc_now

if TYPE_CHECKING:
    from .postgres import PostgresStore

Conn = psycopg.Connection[tuple[object, ...]]
EVENT_COLS = "session_id, seq, kind, ts, data"


#: the JSON encoder of every write (the one all backends share)
dumps = dump_json


class PgTransaction(WriteTransaction):
    """The writes of one :meth:`PostgresStore.transaction` (one database transaction).

    The connection is in pipeline mode: an append waits for its own result (it must refuse a
    stale writer at once), documents and index rows are only queued and go to the server with
    the commit. A queued write that fails makes the commit fail (everything rolls back);
    :attr:`pending` names what was queued since the last round trip.
    """

    def __init__(self, store: PostgresStore, conn: Conn) -> None:
        self._store = store
        self._conn = conn
        self._s = store.s
        self.done = False
        #: writes queued since the server last answered (named when the commit fails)
        self.pending: list[str] = []
        #: events and index rows written (the store re-checks planner statistics now and then)
        self.rows = 0

    @property
    def backend_pid(self) -> int:
        """The server process running this transaction (for diagnostics and fault tests)."""
        return int(self._conn.info.backend_pid)

    def _use(self, what: str) -> None:
        if self.done:
            raise StorageError(f"{what}: the transaction has already ended")
        self.pending.append(what)

    def _begin(self, what: str) -> None:
        self._use(what)

    def _delete_session(self, session_id: str) -> None:
        delete_rows(self._conn, self._s, session_id)

    def _owner(self, session_id: str) -> tuple[int, str] | None:
        row = self._conn.execute(
            f"SELECT head, agent_id FROM {self._s}.sessions WHERE session_id = %s", (session_id,)
        ).fetchone()
        return None if row is None else (to_int(row[0]), str(row[1]))

    def _append(self, a: Append) -> list[Event]:
        session_id, expected_seq, agent_id = a.session_id, a.expected_seq, a.agent_id
        s, conn, now = self._s, self._conn, utc_now()
        # each event's data as given (encoded as JSON above, so it reads as JSON)
        out = [
            Event(
                session_id=session_id,
                seq=en.seq,
                kind=en.kind,
                ts=now,
                data=cast("Mapping[str, JSON]", e.data),
            )
            for e, en in zip(a.events, a.encoded, strict=True)
        ]
        head = expected_seq + len(out)
        messages = sum(1 for e in a.events if e.kind == "message")
        if expected_seq == 0:  # a new session, its owner in the same statement
            claim = (
                f"INSERT INTO {s}.sessions AS t (session_id, agent_id, title, created_at, "
                "updated_at, head, messages) VALUES (%(sid)s, %(agent)s, %(title)s, %(now)s, "
                "%(now)s, %(head)s, %(messages)s) ON CONFLICT (session_id) DO UPDATE SET "
                "head = excluded.head, messages = excluded.messages, updated_at = excluded.updated_at, "
                "title = CASE WHEN t.title = '' THEN excluded.title ELSE t.title END "
                "WHERE t.head = 0 AND t.agent_id = excluded.agent_id RETURNING 1"
            )
        else:  # compare and set: the row lock serializes writers, the head check refuses
            claim = (
                f"UPDATE {s}.sessions SET head = %(head)s, messages = messages + %(messages)s, "
                "updated_at = %(now)s, title = CASE WHEN title = '' THEN %(title)s ELSE title END "
                "WHERE session_id = %(sid)s AND head = %(expected)s "
                "AND agent_id = %(agent)s RETURNING 1"
            )
        # the events are inserted only if the claim succeeded (no stale row is ever written)
        row = conn.execute(
            f"WITH claim AS ({claim}), ins AS (INSERT INTO {s}.events ({EVENT_COLS}, head, "
            "detail) SELECT %(sid)s, e.seq, e.kind, %(now)s, e.data::json, e.head::json, "
            "e.detail::json FROM unnest(%(seqs)b::bigint[], %(kinds)b::text[], "
            "%(data)b::text[], %(heads)b::text[], %(details)b::text[]) "
            "AS e(seq, kind, data, head, detail) "
            "WHERE EXISTS (SELECT 1 FROM claim) RETURNING 1) "
            "SELECT (SELECT count(*) FROM claim), (SELECT count(*) FROM ins)",
            {
                "sid": session_id,
                "agent": agent_id,
                "title": a.title,
                "now": now,
                "head": head,
                "messages": messages,
                "expected": expected_seq,
                "seqs": [en.seq for en in a.encoded],
                "kinds": [en.kind for en in a.encoded],
                "data": [en.data for en in a.encoded],
                "heads": [en.head for en in a.encoded],
                "details": [en.detail for en in a.encoded],
            },
        ).fetchone()  # the one round trip: the server answers for everything queued
        self.pending.clear()
        if row is None or to_int(row[0]) != 1:
            found = self._owner(session_id)
            check_claim(a, found)  # refused: by the head or by the owner
            raise ConcurrentWriteError(session_id, expected_seq, found[0] if found else 0)
        self.rows += len(out)
        return out

    def _branch(self, session_id: str, parent_id: str, at: int, agent_id: str, title: str) -> None:
        pg_branches.create(self._conn, self._s, session_id, parent_id, at, agent_id, title)
        self.pending.clear()

    def _put_doc(self, namespace: str, key: str, text: str) -> None:
        self._conn.execute(
            f"INSERT INTO {self._s}.documents (namespace, key, value) VALUES (%s, %s, %s::json) "
            "ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value, "
            "updated_at = now()",
            (namespace, key, text),
        )

    def _delete_doc(self, namespace: str, key: str) -> None:
        self._conn.execute(
            f"DELETE FROM {self._s}.documents WHERE namespace = %s AND key = %s",
            (namespace, key),
        )

    def index(self, docs: Sequence[SearchDoc]) -> None:
        docs = list({(d.namespace, d.doc_id): d for d in docs}.values())  # last one wins
        by_ns: dict[str, list[SearchDoc]] = {}
        for d in docs:
            by_ns.setdefault(d.namespace, []).append(d)
        for ns, group in by_ns.items():
            cols: dict[str, list[Any]] = {k: [] for k in ("ids", "scopes", "sids", "metas")}
            cols.update(lens=[], tsvs=[])
            key_rows: list[tuple[str, str, str]] = []
            for d in group:
                for k in check_keys(d.keys, f"search document {ns}/{d.doc_id}"):
                    key_rows.append((d.session_id, k, d.doc_id))
                tsv, length = encode_fields(d.fields, doc_tags(ns, d.session_id, d.scope))
                cols["ids"].append(d.doc_id)
                cols["scopes"].append(d.scope)
                cols["sids"].append(d.session_id)
                cols["metas"].append(dumps(d.meta, f"search document {ns}/{d.doc_id} meta"))
                cols["lens"].append(length)
                cols["tsvs"].append(tsv)
            self._use(f"index {len(group)} {ns!r} search documents")
            self._conn.execute(_INDEX_SQL.replace("{s}", self._s), {"ns": ns, **cols})
            # a document indexed again gets its new keys only
            self._conn.execute(
                f"DELETE FROM {self._s}.search_keys WHERE namespace = %s "
                "AND doc_id = ANY(%s::text[])",
                (ns, cols["ids"]),
            )
            self._insert_keys(ns, key_rows)
            self.rows += len(group)

    def _insert_keys(self, namespace: str, rows: Sequence[tuple[str, str, str]]) -> None:
        if not rows:
            return
        self._conn.execute(
            f"INSERT INTO {self._s}.search_keys (session_id, namespace, key, doc_id) "
            "SELECT r.sid, %s, r.key, r.doc FROM unnest(%s::text[], %s::text[], %s::text[]) "
            "AS r(sid, key, doc) ON CONFLICT DO NOTHING",
            (namespace, [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]),
        )
        self.rows += len(rows)

    def unindex(self, namespace: str, *, session_id: str) -> None:
        self._use(f"unindex {namespace!r} of session {session_id!r}")
        self._conn.execute(
            f"WITH gone AS (DELETE FROM {self._s}.search_docs WHERE namespace = %s "
            f"AND session_id = %s RETURNING namespace, doc_len) {subtract_sql(self._s)}",
            (namespace, session_id),
        )
        self._conn.execute(
            f"DELETE FROM {self._s}.search_keys WHERE session_id = %s AND namespace = %s",
            (session_id, namespace),
        )

    def add_keys(self, namespace: str, session_id: str, keys: Mapping[str, Sequence[str]]) -> None:
        rows = [
            (session_id, k, doc_id)
            for doc_id, ks in keys.items()
            for k in check_keys(ks, f"keys of {namespace}/{doc_id}")
        ]
        self._use(f"add {len(rows)} {namespace!r} keys of session {session_id!r}")
        self._insert_keys(namespace, rows)

    def update_meta(self, namespace: str, metas: Mapping[str, Mapping[str, JSONLike]]) -> None:
        if not metas:
            return
        ids = list(metas)
        texts = [dumps(metas[d], f"meta of {namespace}/{d}") for d in ids]
        self._use(f"update the meta of {len(ids)} {namespace!r} documents")
        self._conn.execute(
            f"UPDATE {self._s}.search_docs AS d SET meta = u.meta::json "
            "FROM unnest(%s::text[], %s::text[]) AS u(id, meta) "
            "WHERE d.namespace = %s AND d.doc_id = u.id",
            (ids, texts, namespace),
        )


#: Upsert a namespace's documents and record what they change in the index statistics
#: (an appended delta row: writers never wait on one another for the statistics).
_INDEX_SQL = """
WITH old AS (
    SELECT count(*) AS n, coalesce(sum(doc_len), 0) AS len FROM {s}.search_docs
    WHERE namespace = %(ns)s AND doc_id = ANY(%(ids)b::text[])),
up AS (
    INSERT INTO {s}.search_docs (namespace, doc_id, scope, session_id, meta, doc_len, tsv)
    SELECT %(ns)s, d.id, d.scope, d.sid, d.meta::json, d.len, d.tsv::tsvector
    FROM unnest(%(ids)b::text[], %(scopes)b::text[], %(sids)b::text[], %(metas)b::text[],
                %(lens)b::integer[], %(tsvs)b::text[]) AS d(id, scope, sid, meta, len, tsv)
    ON CONFLICT (namespace, doc_id) DO UPDATE SET scope = excluded.scope,
        session_id = excluded.session_id, meta = excluded.meta, doc_len = excluded.doc_len,
        tsv = excluded.tsv
    RETURNING doc_len)
INSERT INTO {s}.search_deltas (namespace, docs, tokens)
SELECT %(ns)s, (SELECT count(*) FROM up) - old.n,
       (SELECT coalesce(sum(doc_len), 0) FROM up) - old.len
FROM old
"""

#: After ``WITH gone AS (DELETE ... RETURNING namespace, doc_len)``: subtract them from the
#: statistics of their namespaces.
_SUBTRACT = (
    "INSERT INTO {s}.search_deltas (namespace, docs, tokens) "
    "SELECT namespace, -count(*), -sum(doc_len) FROM gone GROUP BY namespace"
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

    def put_many(self, datas: Sequence[bytes]) -> list[str]:
        """Every blob in one transaction (one commit for the batch)."""
        raws = [check_bytes(d) for d in datas]
        digests = [sha256_hex(r) for r in raws]
        rows = list({d: (d, len(r), r) for d, r in zip(digests, raws, strict=True)}.values())

        def put(conn: Conn) -> None:
            with conn.cursor() as cur:
                cur.executemany(
                    f"INSERT INTO {self._s}.blobs (sha256, size, data) VALUES (%s, %s, %s) "
                    "ON CONFLICT (sha256) DO NOTHING",
                    rows,
                )

        if rows:
            self._store._run(f"store {len(rows)} blobs", put)
        return digests

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


def delete_rows(conn: Conn, s: str, session_id: str) -> None:
    """Every row of a session, in the connection's current transaction (the session row
    locked first, as an append locks it)."""
    conn.execute(f"SELECT 1 FROM {s}.sessions WHERE session_id = %s FOR UPDATE", (session_id,))
    pg_branches.keep_branches(conn, s, session_id)  # its branches take the events they share
    conn.execute(f"DELETE FROM {s}.events WHERE session_id = %s", (session_id,))
    conn.execute(f"DELETE FROM {s}.search_keys WHERE session_id = %s", (session_id,))
    conn.execute(
        f"WITH gone AS (DELETE FROM {s}.search_docs WHERE session_id = %s "
        f"RETURNING namespace, doc_len) {subtract_sql(s)}",
        (session_id,),
    )
    conn.execute(
        f"DELETE FROM {s}.documents WHERE key = %s OR (left(key, length(%s) + 1) = %s || '/')",
        (session_id, session_id, session_id),
    )
    conn.execute(f"DELETE FROM {s}.sessions WHERE session_id = %s", (session_id,))


def subtract_sql(s: str) -> str:
    """SQL that follows ``WITH gone AS (DELETE FROM search_docs ... RETURNING namespace,
    doc_len)``."""
    return _SUBTRACT.replace("{s}", s)


__all__ = ["EVENT_COLS", "PgBlobStore", "PgTransaction", "dumps", "subtract_sql"]
