"""Search index over the raw session logs: ``<ws>/index.sqlite`` (stdlib sqlite3, FTS5).

The logs are the truth; the index is a cache that can always be rebuilt from them. It is
opened in WAL mode, caught up incrementally at open (per-session indexed seq and byte offset),
and rebuilt from every ``log.jsonl`` when it is missing, of an unknown schema, or corrupt.

Only text is indexed: message text plus tool-call names and the string values of their
arguments. Very long messages are indexed by head and tail (``max_chars`` / ``max_tool_chars``)
to keep the database small. The FTS table is *external content* (the text lives once, in the
``chunks`` table, which ``snippet()`` reads). Tokenizer: ``unicode61``; CJK characters are
split by spaces before indexing (and in queries), so Chinese/Japanese substrings match as
phrases. Without FTS5 the index falls back to a LIKE scan and says so in :attr:`problems`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ..errors import StorageError
from ..paths import Workspace, check_session_id
from .log import LogEntry, SessionLog, SessionMeta, list_session_ids
from .query import SearchHit, search_fts, search_like
from .text import (
    fts_query,
    join_cjk,
    make_snippet,
    message_search_text,
    scope_key,
    split_cjk,
    unzip_text,
    zip_text,
)

log = logging.getLogger(__name__)

SCHEMA_VERSION = 6


def fts5_available() -> bool:
    try:
        con = sqlite3.connect(":memory:")
        try:
            con.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
        finally:
            con.close()
    except sqlite3.Error:
        return False
    return True


class SessionIndex:
    """SQLite FTS5 index of all sessions of a workspace."""

    def __init__(
        self,
        workspace: Workspace,
        *,
        max_chars: int = 32_000,
        max_tool_chars: int = 8_000,
        use_fts5: bool | None = None,
        sync: bool = True,
        optimize_after: int = 20_000,
    ) -> None:
        self.workspace = workspace
        self.path: Path = workspace.index_path
        self.max_chars = max_chars
        self.max_tool_chars = max_tool_chars
        #: A sync that indexes at least this many messages merges the FTS5 segments after.
        self.optimize_after = optimize_after
        #: Warnings and repairs (rebuilds, fallback mode, damaged logs skipped), newest last.
        self.problems: list[str] = []
        self.fts5 = fts5_available() if use_fts5 is None else use_fts5
        if not self.fts5:
            self._warn(
                "SQLite FTS5 is not available in this Python build: session_search falls back "
                "to a slow LIKE scan without ranking quality or snippets from FTS5"
            )
        self._lock = threading.RLock()
        self._con = self._open()
        if sync:
            self.sync()

    # ------------------------------------------------------------------ open / schema

    def _warn(self, text: str) -> None:
        self.problems.append(text)
        log.warning("%s", text)

    def _connect(self) -> sqlite3.Connection:
        self.workspace.root.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        con.create_function("cf_unzip", 1, unzip_text, deterministic=True)
        con.create_function("cf_key", 2, scope_key, deterministic=True)
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=NORMAL")
        return con

    def _open(self) -> sqlite3.Connection:
        existed = self.path.exists()
        try:
            con = self._connect()
            version = con.execute("PRAGMA user_version").fetchone()[0]
            mode = self._meta_get(con, "mode") if version == SCHEMA_VERSION else None
            if existed and version == SCHEMA_VERSION and mode == self._mode():
                con.execute("SELECT count(*) FROM sessions").fetchone()
                return con
            con.close()
            if existed:
                self._warn(f"{self.path}: schema {version}/{mode} is not current; rebuilding")
        except sqlite3.DatabaseError as exc:
            self._warn(f"{self.path}: unreadable ({exc}); rebuilding from the session logs")
        self._remove_files()
        try:
            con = self._connect()
            self._create_schema(con)
        except (sqlite3.Error, OSError) as exc:
            raise StorageError(f"cannot create the session index {self.path}: {exc}") from exc
        return con

    def _mode(self) -> str:
        return "fts5" if self.fts5 else "like"

    @staticmethod
    def _meta_get(con: sqlite3.Connection, key: str) -> str | None:
        try:
            row = con.execute("SELECT value FROM index_meta WHERE key=?", (key,)).fetchone()
        except sqlite3.OperationalError:
            return None
        return str(row[0]) if row else None

    def _remove_files(self) -> None:
        for suffix in ("", "-wal", "-shm", "-journal"):
            p = self.path.with_name(self.path.name + suffix)
            try:
                p.unlink(missing_ok=True)
            except OSError as exc:
                raise StorageError(f"cannot remove damaged index {p}: {exc}") from exc

    def _create_schema(self, con: sqlite3.Connection) -> None:
        con.executescript(
            """
            CREATE TABLE IF NOT EXISTS index_meta(key TEXT PRIMARY KEY, value TEXT);
            CREATE TABLE IF NOT EXISTS sessions(
                session_id TEXT PRIMARY KEY, agent_id TEXT NOT NULL, created_at TEXT,
                updated_at TEXT, title TEXT, message_count INTEGER,
                indexed_seq INTEGER NOT NULL DEFAULT -1, log_offset INTEGER NOT NULL DEFAULT 0,
                log_size INTEGER NOT NULL DEFAULT -1);
            CREATE INDEX IF NOT EXISTS sessions_agent ON sessions(agent_id, updated_at);
            CREATE TABLE IF NOT EXISTS chunks(
                id INTEGER PRIMARY KEY, session_id TEXT NOT NULL, agent_id TEXT NOT NULL,
                seq INTEGER NOT NULL, role TEXT, ts TEXT, zbody BLOB);
            CREATE INDEX IF NOT EXISTS chunks_session ON chunks(session_id, seq);
            CREATE VIEW IF NOT EXISTS chunks_text AS
                SELECT id, cf_unzip(zbody) AS body, cf_key('a', agent_id) AS akey,
                       cf_key('s', session_id) AS skey FROM chunks;
            """
        )
        if self.fts5:
            # external content (the compressed text in ``chunks``, read through a view);
            # akey/skey are hashed agent/session tokens so scoped searches only rank their
            # own rows.
            con.execute(
                "CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(body, akey, skey, "
                "content='chunks_text', content_rowid='id', "
                "tokenize='unicode61 remove_diacritics 2')"
            )

        con.execute(
            "INSERT OR REPLACE INTO index_meta(key, value) VALUES ('mode', ?)", (self._mode(),)
        )
        con.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    # ------------------------------------------------------------------ write

    def _guard(self, fn: Any, *args: Any) -> Any:
        """Run ``fn`` under the lock; on corruption rebuild once and retry."""
        with self._lock:
            try:
                return fn(*args)
            except sqlite3.OperationalError:
                raise
            except sqlite3.DatabaseError as exc:
                self._warn(f"{self.path}: damaged ({exc}); rebuilding from the session logs")
                self._reset()
                self._sync_locked()
                return fn(*args)

    def _reset(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._con.close()
        self._remove_files()
        self._con = self._connect()
        self._create_schema(self._con)

    def add(self, session_id: str, agent_id: str, entries: Sequence[LogEntry]) -> None:
        """Index new entries of a session (entries already indexed are ignored)."""
        check_session_id(session_id)
        self._guard(self._add_locked, session_id, agent_id, entries, None)

    def _add_locked(
        self,
        session_id: str,
        agent_id: str,
        entries: Sequence[LogEntry],
        offsets: tuple[int, int] | None,
    ) -> None:
        con = self._con
        row = con.execute(
            "SELECT indexed_seq, agent_id FROM sessions WHERE session_id=?", (session_id,)
        ).fetchone()
        indexed = int(row[0]) if row else -1
        if row and row[1] != agent_id:
            agent_id = str(row[1])  # a session belongs to the agent that created it
        fresh = [e for e in entries if e.seq > indexed]
        meta = self._disk_meta(session_id)
        con.execute("BEGIN")
        try:
            if row is None:
                con.execute(
                    "INSERT INTO sessions(session_id, agent_id) VALUES (?, ?)",
                    (session_id, agent_id),
                )
            if fresh:
                self._insert_chunks(con, session_id, agent_id, fresh)
                indexed = max(indexed, max(e.seq for e in fresh))
            if meta is not None:
                con.execute(
                    "UPDATE sessions SET created_at=?, updated_at=?, title=?, message_count=? "
                    "WHERE session_id=?",
                    (meta.created_at, meta.updated_at, meta.title, meta.message_count, session_id),
                )
            elif fresh:
                title = next((e.message.text for e in fresh if e.message.role == "user"), "")[:120]
                con.execute(
                    "UPDATE sessions SET created_at=coalesce(created_at, ?), updated_at=?, "
                    "title=coalesce(nullif(title, ''), ?), message_count=? WHERE session_id=?",
                    (fresh[0].ts, fresh[-1].ts, title, indexed + 1, session_id),
                )
            con.execute(
                "UPDATE sessions SET indexed_seq=? WHERE session_id=?", (indexed, session_id)
            )
            if offsets is not None:
                con.execute(
                    "UPDATE sessions SET log_offset=?, log_size=? WHERE session_id=?",
                    (offsets[0], offsets[1], session_id),
                )
            elif meta is not None and meta.message_count == indexed + 1:
                size = self._log_size(session_id)
                con.execute(
                    "UPDATE sessions SET log_offset=?, log_size=? WHERE session_id=?",
                    (size, size, session_id),
                )
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise

    def _insert_chunks(
        self, con: sqlite3.Connection, session_id: str, agent_id: str, entries: Iterable[LogEntry]
    ) -> None:
        akey, skey = scope_key("a", agent_id), scope_key("s", session_id)
        for e in entries:
            body = message_search_text(
                e.message, max_chars=self.max_chars, max_tool_chars=self.max_tool_chars
            )
            if not body.strip():
                continue
            if self.fts5:
                body = split_cjk(body)
            cur = con.execute(
                "INSERT INTO chunks(session_id, agent_id, seq, role, ts, zbody) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (session_id, agent_id, e.seq, e.message.role, e.ts, zip_text(body)),
            )
            if self.fts5:
                con.execute(
                    "INSERT INTO chunks_fts(rowid, body, akey, skey) VALUES (?, ?, ?, ?)",
                    (cur.lastrowid, body, akey, skey),
                )

    def _disk_meta(self, session_id: str) -> SessionMeta | None:
        try:
            text = self.workspace.meta_path(session_id).read_text(encoding="utf-8")
            return SessionMeta.from_json(json.loads(text), where=session_id)
        except (OSError, ValueError, StorageError):
            return None

    def _log_size(self, session_id: str) -> int:
        try:
            return self.workspace.log_path(session_id).stat().st_size
        except OSError:
            return -1

    def sync(self) -> None:
        """Catch up with the logs on disk: index new lines, drop sessions that were deleted."""
        self._guard(self._sync_locked)

    def _sync_locked(self) -> None:
        on_disk = list_session_ids(self.workspace)
        known = {
            str(r[0]): (int(r[1]), int(r[2]), int(r[3]), str(r[4]))
            for r in self._con.execute(
                "SELECT session_id, indexed_seq, log_offset, log_size, agent_id FROM sessions"
            )
        }
        for sid in set(known) - set(on_disk):
            self._remove_locked(sid)
        added = 0
        for sid in on_disk:
            size = self._log_size(sid)
            state = known.get(sid)
            if state is not None and state[2] == size:
                continue
            added += self._sync_session(sid, state)
        if self.fts5 and added >= self.optimize_after:
            self._optimize_locked()

    def optimize(self) -> None:
        """Merge the FTS5 index segments into one (faster queries; seconds on big indexes)."""
        with self._lock:
            if self.fts5:
                self._optimize_locked()

    def _optimize_locked(self) -> None:
        self._con.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('optimize')")

    def _sync_session(self, sid: str, state: tuple[int, int, int, str] | None) -> int:
        slog = SessionLog(self.workspace, sid)
        agent = state[3] if state else slog.agent_id
        indexed, offset = (state[0], state[1]) if state else (-1, 0)
        try:
            if offset > 0:
                first = next(slog.iter_from(offset), None)
                if first is not None and first[0].seq != indexed + 1:
                    offset = 0  # stale offset (log rewritten): rescan, skipping indexed seqs
            batch: list[LogEntry] = []
            end = offset
            for entry, stop in slog.iter_from(offset):
                if entry.seq > indexed:
                    batch.append(entry)
                end = stop
        except StorageError as exc:
            self._warn(f"session {sid}: log is damaged, not indexed ({exc})")
            return 0
        self.problems.extend(p for p in slog.problems if p not in self.problems)
        self._add_locked(sid, agent, batch, (end, self._log_size(sid)))
        return len(batch)

    def rebuild(self) -> None:
        """Drop everything and index all logs again."""
        with self._lock:
            self._reset()
            self._sync_locked()

    def remove_session(self, session_id: str) -> None:
        check_session_id(session_id)
        self._guard(self._remove_locked, session_id)

    def _remove_locked(self, session_id: str) -> None:
        con = self._con
        con.execute("BEGIN")
        try:
            if self.fts5:
                con.execute(
                    "INSERT INTO chunks_fts(chunks_fts, rowid, body, akey, skey) "
                    "SELECT 'delete', id, cf_unzip(zbody), cf_key('a', agent_id), "
                    "cf_key('s', session_id) FROM chunks WHERE session_id=?",
                    (session_id,),
                )
            con.execute("DELETE FROM chunks WHERE session_id=?", (session_id,))
            con.execute("DELETE FROM sessions WHERE session_id=?", (session_id,))
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise

    # ------------------------------------------------------------------ read

    def list_sessions(self, agent_id: str | None) -> list[SessionMeta]:
        """Sessions of one agent (``None``: all agents), most recently updated first."""
        sql = (
            "SELECT session_id, agent_id, created_at, updated_at, title, message_count "
            "FROM sessions"
        )
        params: tuple[str, ...] = ()
        if agent_id is not None:
            sql += " WHERE agent_id=?"
            params = (agent_id,)
        sql += " ORDER BY updated_at DESC, session_id"
        rows = self._guard(lambda: self._con.execute(sql, params).fetchall())
        return [
            SessionMeta(
                session_id=r[0],
                agent_id=r[1],
                created_at=r[2] or "",
                updated_at=r[3] or "",
                title=r[4] or "",
                message_count=int(r[5] or 0),
            )
            for r in rows
        ]

    def session_agent(self, session_id: str) -> str | None:
        row = self._guard(
            lambda: self._con.execute(
                "SELECT agent_id FROM sessions WHERE session_id=?", (session_id,)
            ).fetchone()
        )
        return str(row[0]) if row else None

    def search(
        self,
        query: str,
        *,
        agent_id: str | None,
        limit: int = 10,
        session_id: str | None = None,
    ) -> list[SearchHit]:
        """Ranked hits for user text ``query`` (never raises for odd query syntax)."""
        if not isinstance(query, str) or not query.strip() or limit <= 0:
            return []
        if session_id is not None:
            check_session_id(session_id)
        result: list[SearchHit] = self._guard(
            self._search_locked, query, agent_id, min(limit, 1000), session_id
        )
        return result

    def _search_locked(
        self, query: str, agent_id: str | None, limit: int, session_id: str | None
    ) -> list[SearchHit]:
        if not self.fts5:
            return search_like(self._con, query, agent_id, limit, session_id)
        hits = search_fts(self._con, query, "AND", agent_id, limit, session_id, self._warn)
        if not hits and len(fts_query(query, op="OR").split(" OR ")) > 1:
            hits = search_fts(self._con, query, "OR", agent_id, limit, session_id, self._warn)
        return hits

    def size_bytes(self) -> int:
        """Size of the database on disk (main file plus WAL)."""
        total = 0
        for suffix in ("", "-wal"):
            p = self.path.with_name(self.path.name + suffix)
            if p.exists():
                total += p.stat().st_size
        return total

    def checkpoint(self) -> None:
        with self._lock:
            self._con.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def close(self) -> None:
        with self._lock, contextlib.suppress(sqlite3.Error):
            self._con.close()

    def __enter__(self) -> SessionIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = [
    "SearchHit",
    "SessionIndex",
    "fts5_available",
    "fts_query",
    "join_cjk",
    "make_snippet",
    "message_search_text",
    "scope_key",
    "split_cjk",
]
