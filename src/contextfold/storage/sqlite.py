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
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
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
from .sqlite_schema import (
    DB_NAME,
    FTS,
    SCHEMA_VERSION,
    cannot_write,
    create_or_migrate,
    fts5_available,
    fts_table,
    session_tag,
    version_of,
)
from .sqlite_search import doc_metas, fts_search, key_lookup, scan_search
from .sqlite_write import SQLiteTransaction
from .text import query_terms
from .util import unpack

_DECODER = json.JSONDecoder()
BUSY_MS = 10_000
#: BEGIN IMMEDIATE is retried this long (seconds) on a busy database before giving up.
LOCK_PATIENCE = 120.0


def _busy(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


class SQLiteStore(BranchSearch):
    """SQLite (WAL) + blob files under ``root``. See the module docstring."""

    def __init__(self, root: str | Path, *, fts5: bool | None = None) -> None:
        self.root = Path(root)
        self.path = self.root / DB_NAME
        self.fts5 = fts5_available() if fts5 is None else fts5
        self.read_only = False
        self._blobs = FileBlobs(self.root)
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False
        self._fts_known: set[str] = set()
        self._init()

    def _fts(self, con: sqlite3.Connection, namespace: str, *, create: bool) -> str | None:
        """The FTS5 table of a namespace (created inside the caller's transaction)."""
        table = fts_table(namespace)
        if table in self._fts_known:
            return table
        if con.execute("SELECT 1 FROM sqlite_master WHERE name=?", (table,)).fetchone():
            if not con.in_transaction:  # a table made by an open transaction may roll back
                self._fts_known.add(table)
            return table
        if not create:
            return None
        con.execute(FTS.format(table=table))
        return table

    # ------------------------------------------------------------------ connections
    @property
    def url(self) -> str:
        return f"sqlite:///{self.path}"

    @property
    def blobs(self) -> FileBlobs:
        return self._blobs

    def _connect(self) -> sqlite3.Connection:
        if self.read_only:
            # a WAL database on a read-only mount may not be able to create its -shm file:
            # then read it as immutable (nobody can be writing to a read-only mount)
            for mode in ("mode=ro", "immutable=1"):
                con = sqlite3.connect(f"file:{self.path}?{mode}", uri=True, check_same_thread=False)
                try:
                    con.execute("SELECT count(*) FROM sqlite_master").fetchone()
                    break
                except sqlite3.Error:
                    con.close()
                    if mode == "immutable=1":
                        raise
        else:
            con = sqlite3.connect(
                self.path, timeout=BUSY_MS / 1000, isolation_level=None, check_same_thread=False
            )
        con.isolation_level = None
        con.execute(f"PRAGMA busy_timeout={BUSY_MS}")
        if not self.read_only:
            con.execute("PRAGMA synchronous=NORMAL")
        return con

    def _init(self) -> None:
        # the schema is created in one transaction: a failed first open (a full disk) leaves
        # no tables at all, and the next open creates them once space is back
        self._create_or_migrate(existed=self.path.exists())
        self._read_meta()

    def _create_or_migrate(self, *, existed: bool) -> None:
        """Create the tables or migrate them, in one transaction (all or nothing); an
        existing database that cannot be written here is served read-only."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            con = self._connect()
            try:
                self._retry(lambda: con.execute("PRAGMA journal_mode=WAL"))
                if version_of(con) != SCHEMA_VERSION:  # new, or written by an older release
                    self._retry(lambda: con.execute("BEGIN IMMEDIATE"))
                    try:
                        create_or_migrate(con, self.fts5)
                        con.execute("COMMIT")
                    except BaseException as exc:
                        with contextlib.suppress(sqlite3.Error):
                            con.execute("ROLLBACK")
                        if isinstance(exc, sqlite3.Error) and not cannot_write(exc):
                            # (a full disk, a damaged file): not a workspace to serve read-only
                            raise StorageError(
                                f"cannot bring the store {self.path} to schema "
                                f"{SCHEMA_VERSION}: {exc}"
                            ) from exc
                        raise
            finally:
                con.close()
        except StorageError:
            raise
        except (OSError, sqlite3.Error) as exc:
            if not existed or not self.path.is_file():
                raise StorageError(f"cannot create the store {self.path}: {exc}") from exc
            self.read_only = True  # an existing database we cannot write: serve reads

    def _read_meta(self) -> None:
        try:
            version = (
                self._con().execute("SELECT value FROM store_meta WHERE key='schema'").fetchone()
            )
            mode = self._con().execute("SELECT value FROM store_meta WHERE key='fts5'").fetchone()
            # the index is kept the way the database was created (FTS5 or the plain table)
            self.fts5 = mode is not None and mode[0] == "1" and fts5_available()
        except sqlite3.Error as exc:
            raise StorageError(f"cannot open the store {self.path}: {exc}") from exc
        if version is None or int(version[0]) > SCHEMA_VERSION:
            raise StorageError(
                f"{self.path} has schema {version[0] if version else 'unknown'}; this contextfold "
                f"reads schema {SCHEMA_VERSION} (upgrade contextfold)"
            )
        #: a read-only workspace of an older release has no head column: heads read as None
        self._heads = int(version[0]) >= 2
        #: ... and no detail column before version 4 (its message heads hold the details)
        self._details = int(version[0]) >= 4
        #: a read-only database of an older version may have no key table: lookups find nothing
        self._keys_table = int(version[0]) >= 3
        #: ... and no branches before version 5 (every session stands alone)
        self._branches = int(version[0]) >= 5

    def _con(self) -> sqlite3.Connection:
        if self._closed:
            raise StorageError(f"the store {self.path} is closed")
        con: sqlite3.Connection | None = getattr(self._local, "con", None)
        if con is None:
            try:
                con = self._connect()
            except sqlite3.Error as exc:
                raise StorageError(f"cannot open {self.path}: {exc}") from exc
            self._local.con = con
            with self._lock:
                self._all.append(con)
        return con

    @staticmethod
    def _retry(fn: Any) -> Any:
        deadline = time.monotonic() + LOCK_PATIENCE
        delay = 0.005
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                if not _busy(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.1)

    @contextlib.contextmanager
    def _reading(self, what: str) -> Iterator[sqlite3.Connection]:
        try:
            yield self._con()
        except (sqlite3.Error, UnicodeEncodeError) as exc:  # (lone surrogates in a name)
            raise StorageError(f"{what} failed in {self.path}: {exc}") from exc

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
        if self.fts5:
            namespaces = con.execute(
                f"SELECT DISTINCT namespace FROM search_docs WHERE {where}", args
            ).fetchall()
            for (ns,) in namespaces:
                table = self._fts(con, ns, create=False)
                if table is None:
                    continue
                rows = con.execute(
                    f"SELECT id, body, hints, tags FROM search_docs WHERE namespace=? AND ({where})",
                    [ns, *args],
                ).fetchall()
                # (the indexed text is kept compressed: the contentless index needs it back
                # to take a document out)
                con.executemany(
                    f"INSERT INTO {table}({table}, rowid, body, hints, tags) "
                    "VALUES ('delete', ?, ?, ?, ?)",
                    [(r[0], unpack(r[1]), r[2], r[3]) for r in rows],
                )
        con.execute(f"DELETE FROM search_docs WHERE {where}", args)

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
            value = json.loads(row[0])
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
                value = json.loads(text)
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

    # ------------------------------------------------------------------ closing
    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns, self._all = self._all, []
        for con in conns:
            with contextlib.suppress(sqlite3.Error):
                con.close()
        self._local = threading.local()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["FileBlobs", "SQLiteStore", "fts5_available"]
