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
from ..jsontypes import JSONLike
from .base import (
    JSON,
    BlobCorruptError,
    BlobNotFoundError,
    Event,
    SearchDoc,
    check_keys,
)
from .base_write import Append, WriteTransaction, check_claim, dump_json
from .text import split_fields
from .util import check_bytes, check_sha, sha256_hex, utc_now

if TYPE_CHECKING:
    from .memory import MemoryStore


def _frozen(value: Mapping[str, JSONLike], what: str) -> dict[str, JSON]:
    """A deep copy through JSON: what a real backend would store (and it must be JSON)."""
    return _object(dump_json(value, what), what)


def _object(text: str, what: str) -> dict[str, JSON]:
    out = json.loads(text)
    if not isinstance(out, dict):
        raise StorageError(f"{what} must be a JSON object")
    return out


def _copied(text: str | None) -> JSON:
    """A stored head or detail (any JSON value) read back from its text."""
    return None if text is None else json.loads(text)


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


class _MemoryTransaction(WriteTransaction):
    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        self._sessions: dict[str, _Session] = {}  # staged copies of touched sessions
        self._docs: dict[tuple[str, str], dict[str, JSON] | None] = {}
        self._index: list[tuple[str, Any]] = []
        self._deleted: list[str] = []  # sessions deleted first, when this commits

    def _delete_session(self, session_id: str) -> None:
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
        copy = dataclasses.replace(cur, events=list(cur.events), heads=list(cur.heads))
        self._sessions[session_id] = copy
        return copy

    def _owner(self, session_id: str) -> tuple[int, str] | None:
        sess = self._session(session_id)
        return None if sess is None else (sess.count, sess.agent_id)

    def _branch(self, session_id: str, parent_id: str, at: int, agent_id: str, title: str) -> None:
        shared = self._store._composed(parent_id, stop=at, view=self._session)
        now = utc_now()
        self._sessions[session_id] = _Session(
            agent_id=agent_id,
            created_at=now,
            updated_at=now,
            title=title,
            messages=sum(1 for e, _ in shared if e.kind == "message"),
            parent=parent_id,
            fork_at=at,
        )

    def _append(self, a: Append) -> list[Event]:
        session_id = a.session_id
        sess = self._session(session_id)
        check_claim(a, None if sess is None else (sess.count, sess.agent_id))
        now = utc_now()
        if sess is None:
            sess = _Session(agent_id=a.agent_id, created_at=now, updated_at=now, title="")
            self._sessions[session_id] = sess
        out = [
            Event(
                session_id=session_id,
                seq=e.seq,
                kind=e.kind,
                ts=now,
                data=_object(e.data, f"event {e.kind!r} of session {session_id!r}"),
            )
            for e in a.encoded
        ]
        sess.events.extend(out)
        sess.heads.extend((_copied(e.head), _copied(e.detail)) for e in a.encoded)
        sess.messages += sum(1 for e in out if e.kind == "message")
        sess.updated_at = now
        if a.title and not sess.title:
            sess.title = a.title
        return out

    def _put_doc(self, namespace: str, key: str, text: str) -> None:
        self._docs[(namespace, key)] = _object(text, f"document {namespace}/{key}")

    def _delete_doc(self, namespace: str, key: str) -> None:
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

    def update_meta(self, namespace: str, metas: Mapping[str, Mapping[str, JSONLike]]) -> None:
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
