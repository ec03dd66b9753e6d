"""Embedded backend: one SQLite database in WAL mode plus blob files, under a workspace folder.

Layout::

    <workspace>/store.sqlite   events, sessions, documents, search index (FTS5, bm25())
    <workspace>/blobs/ab/<sha256>   content-addressed bytes, written tmp + fsync + rename

Every thread gets its own connection (closed by :meth:`SQLiteStore.close`). A transaction is
``BEGIN IMMEDIATE`` (it takes the write lock at once, so the expected-sequence check and the
append are one step for every process); a busy database is waited for (``busy_timeout``) and
retried, so "database is locked" never reaches the caller. Without FTS5 the index falls back
to a plain table scanned with LIKE and ranked by the same BM25 in Python.

A workspace that cannot be written (read-only mount, permissions) opens read-only: reads and
searches work, writes raise :class:`StorageError`.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

from ..errors import StorageError
from .base import (
    JSON,
    Event,
    EventHead,
    SearchHit,
    SessionInfo,
)
from .branches import BranchSearch, Chain, relink, segments, walk_chain
from .files import FileBlobs
from .sqlite_bodies import read_rows, release
from .sqlite_conn import SQLiteConnections
from .sqlite_schema import fts5_available, session_tag
from .sqlite_search import doc_metas, fts_search, key_lookup, scan_search
from .sqlite_write import SQLiteTransaction
from .text import query_terms
from .util import unpack

_DECODER = json.JSONDecoder()


class SQLiteStore(SQLiteConnections, BranchSearch):
    """SQLite (WAL) + blob files under ``root``. See the module docstring."""

    # ------------------------------------------------------------------ transactions
    @contextlib.contextmanager
    def transaction(self) -> Iterator[SQLiteTransaction]:
        con = self._con()
        outer: SQLiteTransaction | None = getattr(self._local, "txn", None)
        if outer is not None:  # nested: part of the enclosing unit
            yield outer
            return
        if self.read_only:
            raise StorageError(f"the workspace {self.root} is read-only; nothing can be written")
        try:
            self._retry(lambda: con.execute("BEGIN IMMEDIATE"))
        except sqlite3.Error as exc:
            raise StorageError(f"cannot start a write in {self.path}: {exc}") from exc
        txn = SQLiteTransaction(self, con)
        self._local.txn = txn
        try:
            yield txn
            self._retry(lambda: con.execute("COMMIT"))
        except BaseException as exc:
            with contextlib.suppress(sqlite3.Error):
                con.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error | UnicodeEncodeError):
                raise StorageError(f"writing to {self.path} failed: {exc}") from exc
            raise
        finally:
            self._local.txn = None

    # ------------------------------------------------------------------ events
    def head(self, session_id: str) -> int:
        with self._reading("reading the head of a session") as con:
            row = con.execute(
                "SELECT events FROM sessions WHERE session_id=?", (session_id,)
            ).fetchone()
        return int(row[0]) if row else 0

    @staticmethod
    def _event(row: Sequence[Any], session_id: str) -> Event:
        return Event(
            session_id=session_id,
            seq=row[0],
            kind=row[1],
            ts=row[2],
            data=json.loads(unpack(row[3])),
        )

    def _chain(self, con: sqlite3.Connection, session_id: str) -> Chain:
        """The session and the parents whose events it shares (see :mod:`.branches`)."""
        if not self._branches:
            return [(session_id, 0)]

        def link(sid: str) -> tuple[str | None, int] | None:
            row: tuple[str | None, int] | None = con.execute(
                "SELECT parent_id, fork_at FROM sessions WHERE session_id=?", (sid,)
            ).fetchone()
            return row

        return walk_chain(session_id, link)

    @staticmethod
    def _segment_sql(
        columns: str, owner: str, lo: int, hi: int | None, kinds: Sequence[str] | None
    ) -> tuple[str, list[Any]]:
        sql = f"SELECT {columns} FROM events WHERE session_id=? AND seq>=?"
        args: list[Any] = [owner, lo]
        if hi is not None:
            sql += " AND seq<?"
            args.append(hi)
        if kinds is not None:
            sql += f" AND kind IN ({','.join('?' * len(kinds))})"
            args.extend(kinds)
        return sql, args

    def _range_rows(
        self,
        columns: str,
        session_id: str,
        start: int,
        stop: int | None,
        kinds: Sequence[str] | None,
    ) -> list[Any]:
        """Rows of the session's events with ``start <= seq < stop`` (of those kinds), in
        order: a branch's shared prefix from its parents' rows."""
        if kinds is not None and not kinds:
            return []
        rows: list[Any] = []
        with self._reading(f"reading session {session_id!r}") as con:
            for owner, lo, hi in segments(self._chain(con, session_id), start, stop):
                sql, args = self._segment_sql(columns, owner, lo, hi, kinds)
                rows += con.execute(sql + " ORDER BY seq", args).fetchall()
        return rows

    def read(
        self,
        session_id: str,
        *,
        start: int = 0,
        stop: int | None = None,
        kinds: Sequence[str] | None = None,
    ) -> Iterator[Event]:
        rows = self._range_rows("seq, kind, ts, data", session_id, start, stop, kinds)
        try:
            return iter([self._event(r, session_id) for r in rows])
        except ValueError as exc:
            raise StorageError(f"session {session_id!r} has a damaged event: {exc}") from exc

    def read_heads(
        self,
        session_id: str,
        *,
        start: int = 0,
        stop: int | None = None,
        kinds: Sequence[str] | None = None,
        details: bool = False,
    ) -> list[EventHead]:
        head = "head" if self._heads else "NULL"
        if not details:
            rows = self._range_rows(f"seq, kind, {head}", session_id, start, stop, kinds)
        else:
            detail = "detail" if self._details else "NULL"
            rows = self._range_rows(f"seq, kind, {head}, {detail}", session_id, start, stop, kinds)
        decode = _DECODER.raw_decode  # no whitespace checks: the store wrote the text
        try:
            if not details:
                return [
                    EventHead(r[0], r[1], decode(r[2])[0] if r[2] is not None else None)
                    for r in rows
                ]
            return [
                EventHead(
                    r[0],
                    r[1],
                    decode(r[2])[0] if r[2] is not None else None,
                    decode(r[3])[0] if r[3] is not None else None,
                )
                for r in rows
            ]
        except ValueError as exc:
            raise StorageError(f"session {session_id!r} has a damaged event head: {exc}") from exc

    def read_last(
        self, session_id: str, n: int, *, kinds: Sequence[str] | None = None
    ) -> list[Event]:
        if n <= 0:
            return []
        if kinds is not None and not kinds:
            return []
        rows: list[Any] = []
        try:
            with self._reading(f"reading session {session_id!r}") as con:
                for owner, lo, hi in reversed(segments(self._chain(con, session_id), 0, None)):
                    sql, args = self._segment_sql("seq, kind, ts, data", owner, lo, hi, kinds)
                    rows += con.execute(sql + " ORDER BY seq DESC LIMIT ?", [*args, n - len(rows)])
                    if len(rows) >= n:
                        break
            return [self._event(r, session_id) for r in reversed(rows)]
        except ValueError as exc:
            raise StorageError(f"session {session_id!r} has a damaged event: {exc}") from exc

    @staticmethod
    def _info(row: Sequence[Any]) -> SessionInfo:
        return SessionInfo(
            session_id=row[0],
            agent_id=row[1],
            created_at=row[2],
            updated_at=row[3],
            title=row[4],
            events=int(row[5]),
            messages=int(row[6]),
            parent_id=row[7] if len(row) > 7 else None,
            fork_at=int(row[8]) if len(row) > 8 else 0,
        )

    @property
    def _session_cols(self) -> str:
        cols = "session_id, agent_id, created_at, updated_at, title, events, messages"
        return cols + ", parent_id, fork_at" if self._branches else cols

    def session(self, session_id: str) -> SessionInfo | None:
        with self._reading("reading a session") as con:
            row = con.execute(
                f"SELECT {self._session_cols} FROM sessions WHERE session_id=?", (session_id,)
            ).fetchone()
        return self._info(row) if row else None

    def branches(self, session_id: str) -> list[str]:
        if not self._branches:
            return []
        with self._reading("listing branches") as con:
            rows = con.execute(
                "SELECT session_id FROM sessions WHERE parent_id=? ORDER BY session_id",
                (session_id,),
            ).fetchall()
        return [str(r[0]) for r in rows]

    def sessions(self, agent_ids: Sequence[str] | None = None) -> list[SessionInfo]:
        sql = f"SELECT {self._session_cols} FROM sessions"
        args: list[Any] = []
        if agent_ids is not None:
            if not agent_ids:
                return []
            sql += f" WHERE agent_id IN ({','.join('?' * len(agent_ids))})"
            args.extend(agent_ids)
        sql += " ORDER BY updated_at DESC, session_id DESC"
        with self._reading("listing sessions") as con:
            return [self._info(r) for r in con.execute(sql, args).fetchall()]

    def _unindex(self, con: sqlite3.Connection, where: str, args: Sequence[Any]) -> None:
        """Take the documents ``where`` selects (unprefixed columns of ``search_docs``) out
        of the index, with the shared bodies only they named."""
        shared: list[int | None] = []
        if self.fts5:
            namespaces = con.execute(
                f"SELECT DISTINCT namespace FROM search_docs WHERE {where}", args
            ).fetchall()
            for (ns,) in namespaces:
                table = self._fts(con, ns, create=False)
                if table is None:
                    continue
                rows = read_rows(con, f"d.namespace=? AND ({where})", [ns, *args])
                # (the indexed text is kept compressed: the contentless index needs it back
                # to take a document out)
                con.executemany(
                    f"INSERT INTO {table}({table}, rowid, body, hints, tags) "
                    "VALUES ('delete', ?, ?, ?, ?)",
                    [r[:4] for r in rows],
                )
                shared.extend(r[4] for r in rows)
        con.execute(f"DELETE FROM search_docs WHERE {where}", args)
        release(con, shared)

    def _keep_branches(self, con: sqlite3.Connection, session_id: str) -> None:
        """Before ``session_id`` is deleted: its branches take the events they share with it
        (see :func:`.branches.relink`)."""
        row = con.execute(
            "SELECT parent_id, fork_at FROM sessions WHERE session_id=?", (session_id,)
        ).fetchone()
        if row is None:
            return
        for child, child_fork in con.execute(
            "SELECT session_id, fork_at FROM sessions WHERE parent_id=?", (session_id,)
        ).fetchall():
            parent, fork_at, lo, hi = relink(int(row[1]), row[0], int(child_fork))
            con.execute(
                "INSERT INTO events (session_id, seq, kind, ts, data, head, detail) "
                "SELECT ?, seq, kind, ts, data, head, detail FROM events "
                "WHERE session_id=? AND seq>=? AND seq<?",
                (child, session_id, lo, hi),
            )
            con.execute(
                "UPDATE sessions SET parent_id=?, fork_at=? WHERE session_id=?",
                (parent, fork_at, child),
            )

    def delete_session(self, session_id: str) -> None:
        with self.transaction() as txn:
            txn.delete_session(session_id)

    def _delete_rows(self, con: sqlite3.Connection, session_id: str) -> None:
        """Every row of a session, in the caller's transaction (its branches first take the
        events they share with it)."""
        self._keep_branches(con, session_id)
        con.execute("DELETE FROM events WHERE session_id=?", (session_id,))
        con.execute("DELETE FROM sessions WHERE session_id=?", (session_id,))
        con.execute(
            "DELETE FROM docs WHERE substr(key, 1, ?)=?",
            (len(session_id) + 1, session_id + "/"),
        )
        self._unindex(con, "session_id=?", (session_id,))
        con.execute("DELETE FROM search_keys WHERE session_id=?", (session_id,))

    # ------------------------------------------------------------------ documents
    def get_doc(self, namespace: str, key: str) -> dict[str, JSON] | None:
        with self._reading(f"reading document {namespace}/{key}") as con:
            row = con.execute(
                "SELECT value FROM docs WHERE namespace=? AND key=?", (namespace, key)
            ).fetchone()
        if row is None:
            return None
        try:
            value = json.loads(unpack(row[0]))
        except ValueError as exc:
            raise StorageError(f"document {namespace}/{key} is damaged: {exc}") from exc
        return value if isinstance(value, dict) else None

    def docs(self, namespace: str, *, prefix: str = "") -> dict[str, dict[str, JSON]]:
        with self._reading(f"reading documents {namespace}/{prefix}*") as con:
            rows = con.execute(
                "SELECT key, value FROM docs WHERE namespace=? AND substr(key, 1, ?)=? "
                "ORDER BY key",
                (namespace, len(prefix), prefix),
            ).fetchall()
        out: dict[str, dict[str, JSON]] = {}
        for key, text in rows:
            with contextlib.suppress(ValueError):
                value = json.loads(unpack(text))
                if isinstance(value, dict):
                    out[key] = value
        return out

    # ------------------------------------------------------------------ search
    def _chain_of(self, session_id: str) -> Chain:
        with self._reading(f"reading the branches of {session_id!r}") as con:
            return self._chain(con, session_id)

    def _search(
        self,
        namespace: str,
        query: str,
        *,
        scopes: Sequence[str] | None = None,
        session_id: str | None = None,
        limit: int = 10,
    ) -> list[SearchHit]:
        terms = query_terms(query)
        if not terms or limit <= 0 or (scopes is not None and not scopes):
            return []
        where = "d.namespace=?"
        args: list[Any] = [namespace]
        if scopes is not None:
            where += f" AND d.scope IN ({','.join('?' * len(scopes))})"
            args.extend(scopes)
        if session_id is not None:
            where += " AND d.session_id=?"
            args.append(session_id)
        with self._reading(f"searching {namespace}") as con:
            if not self.fts5:
                return scan_search(con, terms, where, args, limit)
            table = self._fts(con, namespace, create=False)
            if table is None:
                return []
            tag = session_tag(namespace, session_id) if session_id is not None else None
            return fts_search(con, table, terms, tag, where, args, limit, narrowed=scopes is None)

    def _lookup(
        self,
        namespace: str,
        *,
        session_id: str,
        keys: Sequence[str] = (),
        prefixes: Sequence[str] = (),
    ) -> list[tuple[str, str]]:
        if not self._keys_table:
            return []
        with self._reading(f"looking up keys of {namespace}") as con:
            return key_lookup(con, namespace, session_id, keys, prefixes)

    def metas(self, namespace: str, doc_ids: Sequence[str]) -> dict[str, dict[str, JSON]]:
        with self._reading(f"reading {namespace} documents") as con:
            try:
                return doc_metas(con, namespace, doc_ids)
            except ValueError as exc:
                raise StorageError(f"a {namespace} document is damaged: {exc}") from exc

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["FileBlobs", "SQLiteStore", "fts5_available"]
