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
from dataclasses import dataclass, field
from typing import Any

from ..errors import StorageError
from .base import (
    JSON,
    BlobCorruptError,
    BlobNotFoundError,
    ConcurrentWriteError,
    Event,
    EventHead,
    NewEvent,
    SearchDoc,
    SearchHit,
    SessionInfo,
    check_append,
    check_keys,
    check_text,
)
from .branches import BranchSearch, Chain, check_branch, relink, segments, walk_chain
from .keys import KeyTable
from .text import bm25_scores, query_terms, split_fields
from .util import check_bytes, check_sha, sha256_hex, utc_now


def _frozen(value: Mapping[str, JSON], what: str) -> dict[str, JSON]:
    """A deep copy through JSON: what a real backend would store (and it must be JSON)."""
    try:
        out = json.loads(json.dumps(value, ensure_ascii=False))
    except (TypeError, ValueError) as exc:
        raise StorageError(f"{what} is not JSON-serializable ({exc})") from None
    if not isinstance(out, dict):
        raise StorageError(f"{what} must be a JSON object")
    return out


def _copied(value: JSON, what: str) -> JSON:
    """A deep copy of any JSON value through JSON (a head or detail may be an array)."""
    try:
        return json.loads(json.dumps(value, ensure_ascii=False))
    except (TypeError, ValueError) as exc:
        raise StorageError(f"{what} is not JSON-serializable ({exc})") from None


@dataclass
class _Session:
    agent_id: str
    created_at: str
    updated_at: str
    title: str
    events: list[Event] = field(default_factory=list)
    #: the (head, detail) of each event (same positions as ``events``)
    heads: list[tuple[JSON, JSON]] = field(default_factory=list)
    messages: int = 0
    #: a branch: the parent whose first ``fork_at`` events it shares; ``events`` and ``heads``
    #: hold its own events only (seq ``fork_at`` on)
    parent: str | None = None
    fork_at: int = 0

    @property
    def count(self) -> int:
        return self.fork_at + len(self.events)


@dataclass
class _Doc:
    doc: SearchDoc
    body: Counter[str]
    hints: Counter[str]
    length: int


class MemoryBlobs:
    def __init__(self, owner: MemoryStore) -> None:
        self._owner = owner
        self._data: dict[str, bytes] = {}

    def put(self, data: bytes) -> str:
        raw = check_bytes(data)
        sha = sha256_hex(raw)
        with self._owner._lock:
            self._owner._check_open()
            self._data.setdefault(sha, raw)
        return sha

    def put_many(self, datas: Sequence[bytes]) -> list[str]:
        return [self.put(d) for d in datas]

    def get(self, sha256: str) -> bytes:
        check_sha(sha256)
        with self._owner._lock:
            self._owner._check_open()
            data = self._data.get(sha256)
        if data is None:
            raise BlobNotFoundError(f"no blob {sha256[:16]}… in {self._owner.url}")
        if sha256_hex(data) != sha256:
            raise BlobCorruptError(f"blob {sha256[:16]}… does not match its sha256")
        return data

    def has(self, sha256: str) -> bool:
        check_sha(sha256)
        with self._owner._lock:
            return sha256 in self._data

    def size(self, sha256: str) -> int | None:
        check_sha(sha256)
        with self._owner._lock:
            data = self._data.get(sha256)
        return None if data is None else len(data)


class _MemoryTransaction:
    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        self._sessions: dict[str, _Session] = {}  # staged copies of touched sessions
        self._docs: dict[tuple[str, str], dict[str, JSON] | None] = {}
        self._index: list[tuple[str, Any]] = []
        self._deleted: list[str] = []  # sessions deleted first, when this commits

    def delete_session(self, session_id: str) -> None:
        """Delete the session in this transaction (writes after this one start it afresh)."""
        if self._sessions or self._docs or self._index:
            raise StorageError("internal: delete_session must come first in a transaction")
        self._deleted.append(session_id)

    def _session(self, session_id: str) -> _Session | None:
        if session_id in self._sessions:
            return self._sessions[session_id]
        if session_id in self._deleted:
            return None
        cur = self._store._sessions.get(session_id)
        if cur is None:
            return None
        copy = _Session(
            agent_id=cur.agent_id,
            created_at=cur.created_at,
            updated_at=cur.updated_at,
            title=cur.title,
            events=list(cur.events),
            heads=list(cur.heads),
            messages=cur.messages,
            parent=cur.parent,
            fork_at=cur.fork_at,
        )
        self._sessions[session_id] = copy
        return copy

    def branch(
        self,
        session_id: str,
        *,
        parent_id: str,
        at: int,
        agent_id: str,
        title: str | None = None,
    ) -> None:
        check_append(session_id, agent_id, 0, title)
        existing = self._session(session_id)
        if existing is not None:
            raise ConcurrentWriteError(session_id, 0, existing.count)
        parent = self._session(parent_id) if isinstance(parent_id, str) and parent_id else None
        at = check_branch(
            session_id,
            parent_id,
            at,
            parent_events=parent.count if parent else None,
            parent_agent=parent.agent_id if parent else None,
            agent_id=agent_id,
        )
        shared = self._store._composed(parent_id, stop=at, view=self._session)
        now = utc_now()
        self._sessions[session_id] = _Session(
            agent_id=agent_id,
            created_at=now,
            updated_at=now,
            title=title or "",
            messages=sum(1 for e, _ in shared if e.kind == "message"),
            parent=parent_id,
            fork_at=at,
        )

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
        sess = self._session(session_id)
        actual = sess.count if sess is not None else 0
        if actual != expected_seq:
            raise ConcurrentWriteError(session_id, expected_seq, actual)
        now = utc_now()
        if sess is None:
            sess = _Session(agent_id=agent_id, created_at=now, updated_at=now, title="")
            self._sessions[session_id] = sess
        elif sess.agent_id != agent_id:
            raise StorageError(
                f"session {session_id!r} belongs to agent {sess.agent_id!r}, not {agent_id!r}"
            )
        out: list[Event] = []
        heads: list[tuple[JSON, JSON]] = []
        for i, ev in enumerate(events):
            what = f"event {ev.kind!r} of session {session_id!r}"
            data = _frozen(ev.data, what)
            head = None if ev.head is None else _copied(ev.head, f"the head of {what}")
            detail = None if ev.detail is None else _copied(ev.detail, f"the detail of {what}")
            heads.append((head, detail))
            out.append(
                Event(session_id=session_id, seq=actual + i, kind=ev.kind, ts=now, data=data)
            )
        sess.events.extend(out)
        sess.heads.extend(heads)
        sess.messages += sum(1 for e in out if e.kind == "message")
        sess.updated_at = now
        if title and not sess.title:
            sess.title = title
        return out

    def put_doc(self, namespace: str, key: str, value: Mapping[str, JSON]) -> None:
        check_text(namespace, "document namespace")
        check_text(key, "document key")
        self._docs[(namespace, key)] = _frozen(value, f"document {namespace}/{key}")

    def delete_doc(self, namespace: str, key: str) -> None:
        check_text(namespace, "document namespace")
        check_text(key, "document key")
        self._docs[(namespace, key)] = None

    def index(self, docs: Sequence[SearchDoc]) -> None:
        for d in docs:
            meta = _frozen(d.meta, f"search document {d.namespace}/{d.doc_id}")
            body, hints = split_fields(d.fields)
            bc, hc = Counter(body.split()), Counter(hints.split())
            doc = SearchDoc(
                namespace=d.namespace,
                doc_id=d.doc_id,
                scope=d.scope,
                session_id=d.session_id,
                fields=dict(d.fields),
                meta=meta,
                keys=tuple(check_keys(d.keys, f"search document {d.namespace}/{d.doc_id}")),
            )
            self._index.append(("put", _Doc(doc, bc, hc, sum(bc.values()) + sum(hc.values()))))

    def unindex(self, namespace: str, *, session_id: str) -> None:
        self._index.append(("drop", (namespace, session_id)))

    def add_keys(self, namespace: str, session_id: str, keys: Mapping[str, Sequence[str]]) -> None:
        checked = {
            doc_id: check_keys(ks, f"keys of {namespace}/{doc_id}") for doc_id, ks in keys.items()
        }
        self._index.append(("keys", (namespace, session_id, checked)))

    def update_meta(self, namespace: str, metas: Mapping[str, Mapping[str, JSON]]) -> None:
        frozen = {d: _frozen(m, f"meta of {namespace}/{d}") for d, m in metas.items()}
        self._index.append(("meta", (namespace, frozen)))

    def _commit(self) -> None:
        st = self._store
        for session_id in self._deleted:
            st._drop_session(session_id)
        st._sessions.update(self._sessions)
        for key, value in self._docs.items():
            if value is None:
                st._docs.pop(key, None)
            else:
                st._docs[key] = value
        for op, arg in self._index:
            if op == "put":
                ns, doc_id = arg.doc.namespace, arg.doc.doc_id
                old = st._index.get((ns, doc_id))
                if old is not None:
                    st._table(ns, old.doc.session_id).drop(doc_id)
                table = st._table(ns, arg.doc.session_id)
                table.drop(doc_id)
                table.add(doc_id, arg.doc.keys)
                st._index[(ns, doc_id)] = arg
            elif op == "keys":
                ns, sid, keys = arg
                table = st._table(ns, sid)
                for doc_id, ks in keys.items():
                    table.add(doc_id, ks)
            elif op == "meta":
                ns, metas = arg
                for doc_id, meta in metas.items():
                    cur = st._index.get((ns, doc_id))
                    if cur is not None:
                        cur.doc = dataclasses.replace(cur.doc, meta=meta)
            else:
                ns, sid = arg
                for k in [
                    k for k, v in st._index.items() if k[0] == ns and v.doc.session_id == sid
                ]:
                    del st._index[k]
                st._keys.pop((ns, sid), None)


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
    def transaction(self) -> Iterator[_MemoryTransaction]:
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
                meta=dict(everything[i].doc.meta),
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
