"""The embedded store's write transaction: appends, documents, the search index and its
lookup keys, inside the ``BEGIN IMMEDIATE`` transaction :meth:`SQLiteStore.transaction` holds.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ..errors import StorageError
from .base import (
    JSON,
    ConcurrentWriteError,
    Event,
    NewEvent,
    SearchDoc,
    check_append,
    check_keys,
    check_text,
)
from .sqlite_schema import session_tag
from .text import split_fields
from .util import utc_now

if TYPE_CHECKING:
    from .sqlite import SQLiteStore


def dump_json(value: JSON, what: str) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates (undecodable bytes): keep them escaped
            text = json.dumps(value, ensure_ascii=True, separators=(",", ":"))
        return text
    except (TypeError, ValueError) as exc:
        raise StorageError(f"{what} is not JSON-serializable ({exc})") from None


class SQLiteTransaction:
    def __init__(self, store: SQLiteStore, con: sqlite3.Connection) -> None:
        self._store = store
        self._con = con

    def delete_session(self, session_id: str) -> None:
        """Delete the session and everything filed under it, in this transaction (so a new
        session of the same id can be written in its place atomically)."""
        self._store._delete_rows(self._con, session_id)

    def append(
        self,
        session_id: str,
        events: Sequence[NewEvent],
        *,
        expected_seq: int,
        agent_id: str,
        title: str | None = None,
    ) -> list[Event]:
        check_append(session_id, agent_id, expected_seq, title)
        con = self._con
        row = con.execute(
            "SELECT agent_id, events, title FROM sessions WHERE session_id=?", (session_id,)
        ).fetchone()
        actual = int(row[1]) if row else 0
        if actual != expected_seq:
            raise ConcurrentWriteError(session_id, expected_seq, actual)
        now = utc_now()
        if row is not None and row[0] != agent_id:
            raise StorageError(
                f"session {session_id!r} belongs to agent {row[0]!r}, not {agent_id!r}"
            )
        out: list[Event] = []
        rows: list[tuple[str, int, str, str, str, str | None, str | None]] = []
        for i, ev in enumerate(events):
            what = f"event {ev.kind!r} of session {session_id!r}"
            text = dump_json(ev.data, what)
            head = None if ev.head is None else dump_json(ev.head, f"the head of {what}")
            detail = None if ev.detail is None else dump_json(ev.detail, f"the detail of {what}")
            rows.append((session_id, actual + i, ev.kind, now, text, head, detail))
            out.append(
                Event(
                    session_id=session_id,
                    seq=actual + i,
                    kind=ev.kind,
                    ts=now,
                    data=json.loads(text),
                )
            )
        con.executemany(
            "INSERT INTO events (session_id, seq, kind, ts, data, head, detail) "
            "VALUES (?,?,?,?,?,?,?)",
            rows,
        )
        n_msg = sum(1 for e in out if e.kind == "message")
        if row is None:
            con.execute(
                "INSERT INTO sessions VALUES (?,?,?,?,?,?,?)",
                (session_id, agent_id, now, now, title or "", len(out), n_msg),
            )
        else:
            con.execute(
                "UPDATE sessions SET events=events+?, messages=messages+?, updated_at=?, "
                "title=CASE WHEN title='' THEN ? ELSE title END WHERE session_id=?",
                (len(out), n_msg, now, title or "", session_id),
            )
        return out

    def put_doc(self, namespace: str, key: str, value: Mapping[str, JSON]) -> None:
        check_text(namespace, "document namespace")
        check_text(key, "document key")
        text = dump_json(value, f"document {namespace}/{key}")
        self._con.execute("INSERT OR REPLACE INTO docs VALUES (?,?,?)", (namespace, key, text))

    def delete_doc(self, namespace: str, key: str) -> None:
        check_text(namespace, "document namespace")
        check_text(key, "document key")
        self._con.execute("DELETE FROM docs WHERE namespace=? AND key=?", (namespace, key))

    def index(self, docs: Sequence[SearchDoc]) -> None:
        con = self._con
        fts = self._store.fts5
        for d in docs:
            meta = dump_json(d.meta, f"search document {d.namespace}/{d.doc_id}")
            keys = check_keys(d.keys, f"search document {d.namespace}/{d.doc_id}")
            body, hints = split_fields(d.fields)
            tags = session_tag(d.namespace, d.session_id)
            old = con.execute(
                "SELECT id, body, hints, tags FROM search_docs WHERE namespace=? AND doc_id=?",
                (d.namespace, d.doc_id),
            ).fetchone()
            table = self._store._fts(con, d.namespace, create=True) if fts else ""
            if old is not None:
                if fts:
                    con.execute(
                        f"INSERT INTO {table}({table}, rowid, body, hints, tags) "
                        "VALUES('delete', ?, ?, ?, ?)",
                        old,
                    )
                con.execute("DELETE FROM search_docs WHERE id=?", (old[0],))
            cur = con.execute(
                "INSERT INTO search_docs(namespace, doc_id, scope, session_id, meta, body, hints, "
                "tags) VALUES (?,?,?,?,?,?,?,?)",
                (d.namespace, d.doc_id, d.scope, d.session_id, meta, body, hints, tags),
            )
            if fts:
                con.execute(
                    f"INSERT INTO {table}(rowid, body, hints, tags) VALUES (?,?,?,?)",
                    (cur.lastrowid, body, hints, tags),
                )
            con.execute(
                "DELETE FROM search_keys WHERE namespace=? AND doc_id=?", (d.namespace, d.doc_id)
            )
            if keys:
                con.executemany(
                    "INSERT OR IGNORE INTO search_keys VALUES (?,?,?,?)",
                    [(d.session_id, d.namespace, k, d.doc_id) for k in keys],
                )

    def unindex(self, namespace: str, *, session_id: str) -> None:
        self._store._unindex(self._con, "namespace=? AND session_id=?", (namespace, session_id))
        self._con.execute(
            "DELETE FROM search_keys WHERE session_id=? AND namespace=?", (session_id, namespace)
        )

    def add_keys(self, namespace: str, session_id: str, keys: Mapping[str, Sequence[str]]) -> None:
        rows = [
            (session_id, namespace, k, doc_id)
            for doc_id, ks in keys.items()
            for k in check_keys(ks, f"keys of {namespace}/{doc_id}")
        ]
        rows.sort()  # in primary-key order: far fewer B-tree pages touched per row
        self._con.executemany("INSERT OR IGNORE INTO search_keys VALUES (?,?,?,?)", rows)

    def update_meta(self, namespace: str, metas: Mapping[str, Mapping[str, JSON]]) -> None:
        rows = [(dump_json(m, f"meta of {namespace}/{d}"), namespace, d) for d, m in metas.items()]
        self._con.executemany("UPDATE search_docs SET meta=? WHERE namespace=? AND doc_id=?", rows)
