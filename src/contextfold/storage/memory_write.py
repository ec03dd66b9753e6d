"""The in-memory store's sessions, documents, blobs and transactions (see
:mod:`contextfold.storage.memory`): a transaction stages its writes and applies them all at
commit, under the store's lock."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import StorageError
from .base import (
    JSON,
    BlobCorruptError,
    BlobNotFoundError,
    ConcurrentWriteError,
    Event,
    NewEvent,
    SearchDoc,
    check_append,
    check_keys,
    check_text,
)
from .branches import check_branch
from .text import split_fields
from .util import check_bytes, check_sha, sha256_hex, utc_now

if TYPE_CHECKING:
    from .memory import MemoryStore


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
