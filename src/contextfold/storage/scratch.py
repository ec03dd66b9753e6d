"""A session built in memory first, then written into a store in one transaction.

``contextfold compact`` builds its session here (messages, compaction, evidence, memory), and
only once all of it succeeded writes it into the store the user named, in one transaction that
may also delete the session it replaces: a failure at any point leaves the stored session
exactly as it was.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..errors import StorageError
from ..jsontypes import JSONLike
from .base import Event, NewEvent, SearchDoc, Store, Transaction, put_blobs
from .memory import MemoryStore

#: one recorded write: the Transaction method's name, its positional and keyword arguments
_Write = tuple[str, tuple[Any, ...], dict[str, Any]]


class _Recorder:
    """A transaction of the scratch store that also notes each write."""

    def __init__(self, txn: Transaction, writes: list[_Write]) -> None:
        self._txn = txn
        self._writes = writes

    def _note(self, name: str, *args: Any, **kwargs: Any) -> Any:
        result = getattr(self._txn, name)(*args, **kwargs)
        self._writes.append((name, copy.deepcopy(args), copy.deepcopy(kwargs)))
        return result

    def delete_session(self, session_id: str) -> None:
        self._note("delete_session", session_id)

    def branch(
        self,
        session_id: str,
        *,
        parent_id: str,
        at: int,
        agent_id: str,
        title: str | None = None,
    ) -> None:
        self._note("branch", session_id, parent_id=parent_id, at=at, agent_id=agent_id, title=title)

    def append(
        self,
        session_id: str,
        events: Sequence[NewEvent],
        *,
        expected_seq: int,
        agent_id: str,
        title: str | None = None,
    ) -> list[Event]:
        out: list[Event] = self._note(
            "append",
            session_id,
            list(events),
            expected_seq=expected_seq,
            agent_id=agent_id,
            title=title,
        )
        return out

    def put_doc(self, namespace: str, key: str, value: Mapping[str, JSONLike]) -> None:
        self._note("put_doc", namespace, key, value)

    def delete_doc(self, namespace: str, key: str) -> None:
        self._note("delete_doc", namespace, key)

    def index(self, docs: Sequence[SearchDoc]) -> None:
        self._note("index", list(docs))

    def unindex(self, namespace: str, *, session_id: str) -> None:
        self._note("unindex", namespace, session_id=session_id)

    def add_keys(self, namespace: str, session_id: str, keys: Mapping[str, Sequence[str]]) -> None:
        self._note("add_keys", namespace, session_id, keys)

    def update_meta(self, namespace: str, metas: Mapping[str, Mapping[str, JSONLike]]) -> None:
        self._note("update_meta", namespace, metas)


class ScratchStore(MemoryStore):
    """An in-memory store for one new session that remembers every committed write, so that
    :meth:`write_into` can write the same session into another store at once."""

    def __init__(self, session_id: str) -> None:
        super().__init__()
        self.session_id = session_id
        self._writes: list[_Write] = []

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Transaction]:
        nested: list[_Write] | None = getattr(self._local, "recording", None)
        if nested is not None:  # part of the enclosing unit: noted with it
            with super().transaction() as txn:
                yield _Recorder(txn, nested)
            return
        writes: list[_Write] = []
        self._local.recording = writes
        try:
            with super().transaction() as txn:
                yield _Recorder(txn, writes)
        finally:
            self._local.recording = None
        self._writes.extend(writes)  # only what was committed

    def write_into(self, target: Store, *, replace: bool) -> None:
        """Write the session into ``target`` in one transaction; with ``replace``, the
        session of the same id stored there is deleted in that transaction. Documents shared
        with other sessions (memory facts, keyed by their text) that ``target`` already holds
        are left as they are. Raises StorageError (nothing written) when it fails, and
        ConcurrentWriteError when ``replace`` is off and the session exists by now."""
        sid = self.session_id
        for name, args, _ in self._writes:
            if name == "append" and args[0] != sid:
                raise StorageError(f"internal: the scratch session {sid!r} wrote {args[0]!r}")
        own = f"{sid}/"
        shared = {
            (args[0], args[1])
            for name, args, _ in self._writes
            if name == "put_doc" and not args[1].startswith(own)
        }
        kept = {key for key in shared if target.get_doc(*key) is not None}
        blobs = list(self.blobs._data.values())
        if blobs:  # content-addressed: one left over by a failed write harms nothing
            put_blobs(target.blobs, blobs)
        with target.transaction() as txn:
            if replace:
                txn.delete_session(sid)
            for name, args, kwargs in self._writes:
                if name == "put_doc" and (args[0], args[1]) in kept:
                    continue
                getattr(txn, name)(*args, **kwargs)


__all__ = ["ScratchStore"]
