"""In-memory backend: the whole protocol in dicts, for tests and notebooks.

Thread-safe (one re-entrant lock). A transaction holds the lock from start to end, so it is
serialized with every other transaction of the store and nothing it writes is visible before
it commits; an exception discards what it staged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

from ..errors import StorageError
from .base import (
    JSON,
    Event,
    EventHead,
    SearchHit,
    SessionInfo,
    Transaction,
)
from .branches import BranchSearch, Chain, relink, segments, walk_chain
from .keys import KeyTable
from .memory_write import MemoryBlobs, _Doc, _MemoryTransaction, _Session
from .text import bm25_scores, query_terms


class MemoryStore(BranchSearch):
    """Everything in process memory; gone when the object is."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._sessions: dict[str, _Session] = {}
        self._docs: dict[tuple[str, str], dict[str, JSON]] = {}
        self._index: dict[tuple[str, str], _Doc] = {}
        #: exact lookup keys per (namespace, session)
        self._keys: dict[tuple[str, str], KeyTable] = {}
        self._blobs = MemoryBlobs(self)
        self._closed = False
        self._local = threading.local()

    @property
    def url(self) -> str:
        return "memory://"

    def _table(self, namespace: str, session_id: str) -> KeyTable:
        table = self._keys.get((namespace, session_id))
        if table is None:
            table = self._keys[(namespace, session_id)] = KeyTable()
        return table

    @property
    def blobs(self) -> MemoryBlobs:
        return self._blobs

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError("the in-memory store is closed")

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Transaction]:
        with self._lock:
            self._check_open()
            outer = getattr(self._local, "txn", None)
            if outer is not None:  # nested: part of the enclosing unit
                yield outer
                return
            txn = _MemoryTransaction(self)
            self._local.txn = txn
            try:
                yield txn
                txn._commit()
            finally:
                self._local.txn = None

    def _composed(
        self,
        session_id: str,
        *,
        start: int = 0,
        stop: int | None = None,
        view: Any = None,
    ) -> list[tuple[Event, tuple[JSON, JSON]]]:
        """The events ``start <= seq < stop`` of a session as it reads (a branch's shared
        prefix included, labelled with ``session_id``), each with its (head, detail)."""
        get = view or self._view

        def link(sid: str) -> tuple[str | None, int] | None:
            s = get(sid)
            return None if s is None else (s.parent, s.fork_at)

        out: list[tuple[Event, tuple[JSON, JSON]]] = []
        for owner, lo, hi in segments(walk_chain(session_id, link), start, stop):
            sess = get(owner)
            if sess is None:
                continue
            a = lo - sess.fork_at
            b = None if hi is None else max(hi - sess.fork_at, 0)
            for ev, hd in zip(sess.events[a:b], sess.heads[a:b], strict=True):
                if owner != session_id:
                    ev = dataclasses.replace(ev, session_id=session_id)
                out.append((ev, hd))
        return out

    def _view(self, session_id: str) -> _Session | None:
        txn = getattr(self._local, "txn", None)
        if txn is not None and session_id in txn._sessions:
            sess: _Session | None = txn._sessions[session_id]
            return sess
        return self._sessions.get(session_id)

    def head(self, session_id: str) -> int:
        with self._lock:
            self._check_open()
            sess = self._view(session_id)
            return sess.count if sess else 0

    def read(
        self,
        session_id: str,
        *,
        start: int = 0,
        stop: int | None = None,
        kinds: Sequence[str] | None = None,
    ) -> Iterator[Event]:
        with self._lock:
            self._check_open()
            events = [e for e, _ in self._composed(session_id, start=start, stop=stop)]
        wanted = set(kinds) if kinds is not None else None
        return iter([e for e in events if wanted is None or e.kind in wanted])

    def read_heads(
        self,
        session_id: str,
        *,
        start: int = 0,
        stop: int | None = None,
        kinds: Sequence[str] | None = None,
        details: bool = False,
    ) -> list[EventHead]:
        with self._lock:
            self._check_open()
            pairs = self._composed(session_id, start=start, stop=stop)
        wanted = set(kinds) if kinds is not None else None
        return [
            EventHead(seq=e.seq, kind=e.kind, head=h, detail=d if details else None)
            for e, (h, d) in pairs
            if wanted is None or e.kind in wanted
        ]

    def read_last(
        self, session_id: str, n: int, *, kinds: Sequence[str] | None = None
    ) -> list[Event]:
        if n <= 0:
            return []
        with self._lock:
            self._check_open()
            events = [e for e, _ in self._composed(session_id)]
            wanted = set(kinds) if kinds is not None else None
            out: list[Event] = []
            for e in reversed(events):
                if wanted is None or e.kind in wanted:
                    out.append(e)
                    if len(out) >= n:
                        break
        out.reverse()
        return out

    def _info(self, session_id: str, s: _Session) -> SessionInfo:
        return SessionInfo(
            session_id=session_id,
            agent_id=s.agent_id,
            created_at=s.created_at,
            updated_at=s.updated_at,
            title=s.title,
            events=s.count,
            messages=s.messages,
            parent_id=s.parent,
            fork_at=s.fork_at,
        )

    def session(self, session_id: str) -> SessionInfo | None:
        with self._lock:
            self._check_open()
            s = self._view(session_id)
            return self._info(session_id, s) if s else None

    def sessions(self, agent_ids: Sequence[str] | None = None) -> list[SessionInfo]:
        with self._lock:
            self._check_open()
            out = [
                self._info(sid, s)
                for sid, s in self._sessions.items()
                if agent_ids is None or s.agent_id in agent_ids
            ]
        out.sort(key=lambda i: (i.updated_at, i.session_id), reverse=True)
        return out

    def branches(self, session_id: str) -> list[str]:
        with self._lock:
            self._check_open()
            return sorted(sid for sid, s in self._sessions.items() if s.parent == session_id)

    def _keep_branches(self, session_id: str, gone: _Session) -> None:
        """Before ``session_id`` is deleted: its branches take the events they share with it."""
        for sid in self.branches(session_id):
            child = self._sessions[sid]
            parent, fork_at, lo, hi = relink(gone.fork_at, gone.parent, child.fork_at)
            moved = [
                (dataclasses.replace(e, session_id=sid), hd)
                for e, hd in self._composed(session_id, start=lo, stop=hi)
            ]
            child.events[:0] = [e for e, _ in moved]
            child.heads[:0] = [hd for _, hd in moved]
            child.parent, child.fork_at = parent, fork_at

    def delete_session(self, session_id: str) -> None:
        with self._lock:
            self._check_open()
            self._drop_session(session_id)

    def _drop_session(self, session_id: str) -> None:
        with self._lock:
            gone = self._sessions.get(session_id)
            if gone is not None:
                self._keep_branches(session_id, gone)
            self._sessions.pop(session_id, None)
            prefix = f"{session_id}/"
            for k in [k for k in self._docs if k[1].startswith(prefix)]:
                del self._docs[k]
            for k in [k for k, v in self._index.items() if v.doc.session_id == session_id]:
                del self._index[k]
            for k in [k for k in self._keys if k[1] == session_id]:
                del self._keys[k]

    def get_doc(self, namespace: str, key: str) -> dict[str, JSON] | None:
        with self._lock:
            self._check_open()
            txn = getattr(self._local, "txn", None)
            if txn is not None and (namespace, key) in txn._docs:
                staged = txn._docs[(namespace, key)]
                return json.loads(json.dumps(staged)) if staged is not None else None
            value = self._docs.get((namespace, key))
            return json.loads(json.dumps(value)) if value is not None else None

    def docs(self, namespace: str, *, prefix: str = "") -> dict[str, dict[str, JSON]]:
        with self._lock:
            self._check_open()
            return {
                k: json.loads(json.dumps(v))
                for (ns, k), v in sorted(self._docs.items())
                if ns == namespace and k.startswith(prefix)
            }

    def _chain_of(self, session_id: str) -> Chain:
        with self._lock:

            def link(sid: str) -> tuple[str | None, int] | None:
                s = self._view(sid)
                return None if s is None else (s.parent, s.fork_at)

            return walk_chain(session_id, link)

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
        if not terms or limit <= 0:
            return []
        with self._lock:
            self._check_open()
            # statistics per namespace, as the SQLite backend keeps one index per namespace
            everything = [d for d in self._index.values() if d.doc.namespace == namespace]
        total = len(everything)
        avg = sum(d.length for d in everything) / total if total else 1.0
        df: Counter[str] = Counter()
        wanted = set(terms)
        for d in everything:
            df.update(wanted & (d.body.keys() | d.hints.keys()))
        picked = {
            i: (d.body, d.hints, d.length)
            for i, d in enumerate(everything)
            if d.doc.namespace == namespace
            and (scopes is None or d.doc.scope in scopes)
            and (session_id is None or d.doc.session_id == session_id)
        }
        scores = bm25_scores(terms, picked, total_docs=total, avg_len=avg, doc_freq=df)
        ranked = sorted(scores.items(), key=lambda kv: (-kv[1], everything[kv[0]].doc.doc_id))
        return [
            SearchHit(
                doc_id=everything[i].doc.doc_id,
                session_id=everything[i].doc.session_id,
                score=score,
                # frozen through JSON when indexed
                meta=dict(cast("Mapping[str, JSON]", everything[i].doc.meta)),
            )
            for i, score in ranked[:limit]
        ]

    def _lookup(
        self,
        namespace: str,
        *,
        session_id: str,
        keys: Sequence[str] = (),
        prefixes: Sequence[str] = (),
    ) -> list[tuple[str, str]]:
        with self._lock:
            self._check_open()
            table = self._keys.get((namespace, session_id))
            return table.lookup(keys, prefixes) if table is not None else []

    def metas(self, namespace: str, doc_ids: Sequence[str]) -> dict[str, dict[str, JSON]]:
        with self._lock:
            self._check_open()
            found = [self._index.get((namespace, d)) for d in dict.fromkeys(doc_ids)]
            return {
                d.doc.doc_id: json.loads(json.dumps(d.doc.meta)) for d in found if d is not None
            }

    def close(self) -> None:
        with self._lock:
            self._closed = True


__all__ = ["MemoryStore"]
