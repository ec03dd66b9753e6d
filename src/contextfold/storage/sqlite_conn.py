"""The embedded store's connections: one per thread, the schema brought up to date on open,
busy databases waited for, and the full-text segments merged on close.

Every thread gets its own connection (closed by ``close``); a busy database is waited for
(``busy_timeout``) and ``BEGIN IMMEDIATE`` retried, so "database is locked" never reaches the
caller. A workspace that cannot be written opens read-only.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..errors import StorageError
from .files import FileBlobs
from .sqlite_schema import (
    DB_NAME,
    FTS,
    SCHEMA_VERSION,
    cannot_write,
    create_or_migrate,
    fts5_available,
    fts_table,
    version_of,
)

BUSY_MS = 10_000
#: BEGIN IMMEDIATE is retried this long (seconds) on a busy database before giving up.
LOCK_PATIENCE = 120.0


def _busy(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


#: Pages of full-text segments merged on close at most (bounded work; a small store's index
#: ends as one segment, without the rows replaced documents left behind).
MERGE_PAGES = 2000


def merge_segments(store: SQLiteConnections, tables: Iterable[str]) -> None:
    """Merge the FTS5 segments of ``tables`` (a few thousand pages at most): documents indexed
    one unit at a time leave many small segments, and a replaced document's old rows stay in
    them until a merge reaches them. Best effort: a busy or read-only database is left as is."""
    if store.read_only:
        return
    try:
        con = store._con()
        for table in sorted(tables):
            store._retry(lambda: con.execute("BEGIN IMMEDIATE"))
            try:
                con.execute(
                    f"INSERT INTO {table}({table}, rank) VALUES('merge', ?)", (-MERGE_PAGES,)
                )
                con.execute("COMMIT")
            except sqlite3.Error:
                con.execute("ROLLBACK")
                raise
    except (sqlite3.Error, StorageError):
        return


class SQLiteConnections:
    """Connections, schema and closing of :class:`~contextfold.storage.sqlite.SQLiteStore`."""

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
        #: FTS5 tables this store wrote to: their segments are merged on close.
        self._fts_written: set[str] = set()
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

    # ------------------------------------------------------------------ closing
    def close(self) -> None:
        with self._lock:
            written, self._fts_written = self._fts_written, set()
        if written and not self._closed:
            merge_segments(self, written)
        with self._lock:
            self._closed = True
            conns, self._all = self._all, []
        for con in conns:
            with contextlib.suppress(sqlite3.Error):
                con.close()
        self._local = threading.local()
