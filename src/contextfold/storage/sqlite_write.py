"""The embedded store's write transaction: appends, documents, the search index and its
lookup keys, inside the ``BEGIN IMMEDIATE`` transaction :meth:`SQLiteStore.transaction` holds.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, cast

from ..jsontypes import JSON, JSONLike
from .base import Event, SearchDoc, check_keys
from .base_write import Append, WriteTransaction, check_claim, dump_json
from .sqlite_bodies import IndexedRow, read_rows, release, share
from .sqlite_schema import session_tag
from .text import split_fields
from .util import pack, pack_many, utc_now

if TYPE_CHECKING:
    from .sqlite import SQLiteStore

#: document ids per lookup statement (SQLite's default limit is 32,766 parameters)
_CHUNK = 500


class SQLiteTransaction(WriteTransaction):
    def __init__(self, store: SQLiteStore, con: sqlite3.Connection) -> None:
        self._store = store
        self._con = con

    def _delete_session(self, session_id: str) -> None:
        self._store._delete_rows(self._con, session_id)

    def _owner(self, session_id: str) -> tuple[int, str] | None:
        row = self._con.execute(
            "SELECT events, agent_id FROM sessions WHERE session_id=?", (session_id,)
        ).fetchone()
        return None if row is None else (int(row[0]), row[1])

    def _append(self, a: Append) -> list[Event]:
        session_id, con = a.session_id, self._con
        found = self._owner(session_id)
        check_claim(a, found)
        now = utc_now()
        packed = pack_many([e.data for e in a.encoded])
        con.executemany(
            "INSERT INTO events (session_id, seq, kind, ts, data, head, detail) "
            "VALUES (?,?,?,?,?,?,?)",
            [
                (session_id, e.seq, e.kind, now, data, e.head, e.detail)
                for e, data in zip(a.encoded, packed, strict=True)
            ],
        )
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
        n_msg = sum(1 for e in out if e.kind == "message")
        if found is None:
            con.execute(
                "INSERT INTO sessions (session_id, agent_id, created_at, updated_at, title, events, "
                "messages) VALUES (?,?,?,?,?,?,?)",
                (session_id, a.agent_id, now, now, a.title, len(out), n_msg),
            )
        else:
            con.execute(
                "UPDATE sessions SET events=events+?, messages=messages+?, updated_at=?, "
                "title=CASE WHEN title='' THEN ? ELSE title END WHERE session_id=?",
                (len(out), n_msg, now, a.title, session_id),
            )
        return out

    def _branch(self, session_id: str, parent_id: str, at: int, agent_id: str, title: str) -> None:
        messages = sum(
            1 for r in self._store._range_rows("kind", parent_id, 0, at, ["message"]) if r
        )
        now = utc_now()
        self._con.execute(
            "INSERT INTO sessions (session_id, agent_id, created_at, updated_at, title, events, "
            "messages, parent_id, fork_at) VALUES (?,?,?,?,?,?,?,?,?)",
            (session_id, agent_id, now, now, title, at, messages, parent_id, at),
        )

    def _put_doc(self, namespace: str, key: str, text: str) -> None:
        self._con.execute(
            "INSERT OR REPLACE INTO docs VALUES (?,?,?)", (namespace, key, pack(text))
        )

    def _delete_doc(self, namespace: str, key: str) -> None:
        self._con.execute("DELETE FROM docs WHERE namespace=? AND key=?", (namespace, key))

    def index(self, docs: Sequence[SearchDoc]) -> None:
        """Index ``docs`` (a document indexed again replaces its row, its keys too; of two with
        one id in ``docs`` the last wins), a namespace at a time with one statement per kind
        of row: a unit that indexes thousands of messages costs a few C loops, not five
        statements per document."""
        by_ns: dict[str, dict[str, tuple[SearchDoc, str, list[str], str, str, str]]] = {}
        for d in docs:
            what = f"search document {d.namespace}/{d.doc_id}"
            meta = dump_json(d.meta, what)
            keys = check_keys(d.keys, what)
            body, hints = split_fields(d.fields)
            tags = session_tag(d.namespace, d.session_id)
            by_ns.setdefault(d.namespace, {})[d.doc_id] = (d, meta, keys, body, hints, tags)
        for ns, group in by_ns.items():
            self._index_namespace(ns, group)

    def _index_namespace(
        self, ns: str, group: Mapping[str, tuple[SearchDoc, str, list[str], str, str, str]]
    ) -> None:
        con = self._con
        table = self._store._fts(con, ns, create=True) if self._store.fts5 else None
        if table:
            self._store._fts_written.add(table)
        ids = list(group)
        old: list[IndexedRow] = []
        for i in range(0, len(ids), _CHUNK):
            part = ids[i : i + _CHUNK]
            where = f"d.namespace=? AND d.doc_id IN ({','.join('?' * len(part))})"
            old.extend(read_rows(con, where, (ns, *part)))
        if old:
            if table:
                con.executemany(
                    f"INSERT INTO {table}({table}, rowid, body, hints, tags) "
                    "VALUES('delete', ?, ?, ?, ?)",
                    [r[:4] for r in old],
                )
            con.executemany("DELETE FROM search_docs WHERE id=?", [(r[0],) for r in old])
        # the rowids SQLite would give (max + 1 ...; the write lock is held): the FTS rows
        # name them
        top = con.execute("SELECT coalesce(max(id), 0) FROM search_docs").fetchone()[0]
        rows = [
            (top + 1 + j, ns, d.doc_id, d.scope, d.session_id, meta, body, hints, tags)
            for j, (d, meta, _keys, body, hints, tags) in enumerate(group.values())
        ]
        # with FTS5 the text is only read back to take the document out of the contentless
        # index: kept compressed, a long one once for every document of the same text
        # (sqlite_bodies); the scan without FTS5 reads it as text
        stored = share(con, [r[6] for r in rows]) if table else [(r[6], None) for r in rows]
        con.executemany(
            "INSERT INTO search_docs(id, namespace, doc_id, scope, session_id, meta, body, "
            "hints, tags, body_id) VALUES (?,?,?,?,?,?,?,?,?,?)",
            [(*r[:6], body, *r[7:], key) for r, (body, key) in zip(rows, stored, strict=True)],
        )
        release(con, [r[4] for r in old])
        if table:
            con.executemany(
                f"INSERT INTO {table}(rowid, body, hints, tags) VALUES (?,?,?,?)",
                [(r[0], r[6], r[7], r[8]) for r in rows],
            )
        con.executemany(
            "DELETE FROM search_keys WHERE namespace=? AND doc_id=?", [(ns, i) for i in ids]
        )
        key_rows = sorted(
            (d.session_id, ns, k, d.doc_id) for d, _m, keys, *_ in group.values() for k in keys
        )
        if key_rows:
            con.executemany("INSERT OR IGNORE INTO search_keys VALUES (?,?,?,?)", key_rows)

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

    def update_meta(self, namespace: str, metas: Mapping[str, Mapping[str, JSONLike]]) -> None:
        rows = [(dump_json(m, f"meta of {namespace}/{d}"), namespace, d) for d, m in metas.items()]
        self._con.executemany("UPDATE search_docs SET meta=? WHERE namespace=? AND doc_id=?", rows)
