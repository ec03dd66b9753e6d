"""One session's view of a Store: the writer's expected sequence and its unit of work.

Components (log, offloads, records, evidence, memory, state) never open transactions of their
own: they *emit* events, documents and index rows into the current **unit**. The manager opens
one unit per public call (``add_many``, one compaction, one state save); when the outermost
unit ends, everything it collected is committed in one :meth:`Store.transaction` with
``expected_seq`` = the head this writer last saw. A failure anywhere (including a conflict with
another writer) commits nothing. The blobs a unit stores are collected with it and written when
it commits, all together with one group commit (see ``FileBlobs.put_many``) and durable before
the rows that reference them are committed (the first blob of a unit that is not staged is
written at once: a blob store that cannot be written fails there) (content-addressed: an orphan left when the rows then
fail is harmless).

Outside a unit, each emit is committed on its own (a unit of one).

A **staged** unit (:meth:`SessionStore.staging`) is collected the same way but not committed when
it ends: :meth:`SessionStore.commit_staged` commits it later (e.g. while a model call is in
flight), and the next unit that has something to commit takes it along first, in the same
transaction, so the order of events never changes.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence

from ..errors import StorageError
from ..jsontypes import JSONLike
from .base import (
    ConcurrentWriteError,
    Event,
    EventHead,
    NewEvent,
    SearchDoc,
    Store,
    put_blobs,
)
from .util import check_bytes, sha256_hex


class _Unit:
    def __init__(self) -> None:
        self.events: list[NewEvent] = []
        self.docs: list[tuple[str, str, Mapping[str, JSONLike] | None]] = []
        self.index: list[SearchDoc] = []
        self.keys: list[tuple[str, Mapping[str, Sequence[str]]]] = []
        self.title: str | None = None
        self.after_commit: list[Callable[[], object]] = []
        #: the unit's blobs (sha256 -> bytes), written when it commits, before the rows
        self.blobs: dict[str, bytes] = {}
        #: a staged unit defers all its blobs; another writes its first blob at once (a blob
        #: store that cannot be written fails where the caller handles it, e.g. an offload
        #: that keeps its text) and defers the others
        self.staged = False
        self.probed = False

    def __bool__(self) -> bool:
        return bool(self.events or self.docs or self.index or self.keys or self.blobs)

    def absorb(self, later: _Unit) -> None:
        """Append what ``later`` collected (committed together, this unit's part first)."""
        self.events.extend(later.events)
        self.docs.extend(later.docs)
        self.index.extend(later.index)
        self.keys.extend(later.keys)
        if self.title is None:
            self.title = later.title
        self.after_commit.extend(later.after_commit)
        self.blobs.update(later.blobs)


class SessionStore:
    """Writer handle for one session of a store (used by one ContextManager)."""

    def __init__(self, store: Store, session_id: str, agent_id: str) -> None:
        self.store = store
        self.session_id = session_id
        info = store.session(session_id)
        #: The session belongs to the agent that created it (written with its first event).
        self.agent_id = info.agent_id if info is not None else agent_id
        #: Events this writer knows of: the expected sequence of its next append.
        self.head = info.events if info is not None else 0
        self._unit: _Unit | None = None
        #: a staged unit: applied in memory by its writer, not committed yet
        self._staged: _Unit | None = None
        self._depth = 0
        self._lock = threading.RLock()

    def refresh(self) -> None:
        """Forget what was not committed and catch up with the stored head."""
        self._staged = None
        info = self.store.session(self.session_id)
        self.head = info.events if info is not None else 0
        if info is not None:
            self.agent_id = info.agent_id

    # ------------------------------------------------------------------ the unit of work
    @contextlib.contextmanager
    def unit(self) -> Iterator[None]:
        """Everything emitted inside commits together when the outermost unit ends."""
        with self._lock:
            if self._depth == 0:
                self._unit = _Unit()
            self._depth += 1
            try:
                yield
            except BaseException:
                self._depth -= 1
                if self._depth == 0:
                    self._unit = None
                raise
            self._depth -= 1
            if self._depth == 0:
                unit, self._unit = self._unit, None
                assert unit is not None
                self._commit(unit)

    @contextlib.contextmanager
    def staging(self) -> Iterator[None]:
        """A unit whose end does not commit: what it collected waits for
        :meth:`commit_staged` (or goes first in the next unit that commits). Not nested in
        another unit (a second staging before the commit adds to the first)."""
        with self._lock:
            if self._depth:
                raise StorageError(f"internal: session {self.session_id!r} stages inside a unit")
            self._unit = _Unit()
            self._unit.staged = True
            self._depth = 1
            try:
                yield
            finally:
                self._depth = 0
                unit, self._unit = self._unit, None
            if unit and self._staged is not None:
                self._staged.absorb(unit)
            elif unit:
                self._staged = unit

    @property
    def has_staged(self) -> bool:
        """Whether a staged unit waits for :meth:`commit_staged`."""
        return self._staged is not None

    def commit_staged(self) -> None:
        """Commit the staged unit, if any (on failure it is dropped: the writer reloads)."""
        with self._lock:
            unit, self._staged = self._staged, None
            if unit is not None:
                self._commit(unit)

    @property
    def in_unit(self) -> bool:
        return self._unit is not None

    def _base(self) -> int:
        """The stored head plus the events of the staged unit."""
        return self.head + (len(self._staged.events) if self._staged is not None else 0)

    @property
    def next_seq(self) -> int:
        """The seq the next emitted event will get."""
        pending = len(self._unit.events) if self._unit is not None else 0
        return self._base() + pending

    def _commit(self, unit: _Unit) -> None:
        if not unit:
            return
        staged, self._staged = self._staged, None
        if staged is not None:  # it goes first, in the same transaction
            merged = _Unit()
            merged.absorb(staged)
            merged.absorb(unit)
            try:
                self._commit(merged)
            except BaseException:
                self._staged = staged  # still to be committed (or dropped by a reload)
                raise
            return
        try:
            if unit.blobs:  # content-addressed: an orphan is harmless
                put_blobs(self.store.blobs, list(unit.blobs.values()))
            with self.store.transaction() as txn:
                if unit.events:
                    txn.append(
                        self.session_id,
                        unit.events,
                        expected_seq=self.head,
                        agent_id=self.agent_id,
                        title=unit.title,
                    )
                for ns, key, value in unit.docs:
                    if value is None:
                        txn.delete_doc(ns, key)
                    else:
                        txn.put_doc(ns, key, value)
                if unit.index:
                    txn.index(unit.index)
                for namespace, keys in unit.keys:
                    txn.add_keys(namespace, self.session_id, keys)
        except StorageError:
            raise
        except (OSError, ValueError, TypeError) as exc:
            raise StorageError(f"saving session {self.session_id!r} failed: {exc}") from exc
        self.head += len(unit.events)
        for fn in unit.after_commit:
            fn()

    def _current(self) -> tuple[_Unit, bool]:
        if self._unit is not None:
            return self._unit, False
        return _Unit(), True

    def emit(
        self,
        kind: str,
        data: Mapping[str, JSONLike],
        *,
        title: str | None = None,
        head: JSONLike = None,
        detail: JSONLike = None,
    ) -> int:
        """Add an event to the unit; returns the seq it will have."""
        with self._lock:
            unit, alone = self._current()
            seq = self._base() + len(unit.events)
            unit.events.append(NewEvent(kind=kind, data=data, head=head, detail=detail))
            if title and unit.title is None:
                unit.title = title
            if alone:
                self._commit(unit)
            return seq

    def put_doc(self, namespace: str, key: str, value: Mapping[str, JSONLike] | None) -> None:
        with self._lock:
            unit, alone = self._current()
            unit.docs.append((namespace, key, value))
            if alone:
                self._commit(unit)

    def index(self, docs: Sequence[SearchDoc]) -> None:
        with self._lock:
            unit, alone = self._current()
            unit.index.extend(docs)
            if alone:
                self._commit(unit)

    def add_keys(self, namespace: str, keys: Mapping[str, Sequence[str]]) -> None:
        """File exact keys under documents of this session (see ``Transaction.add_keys``)."""
        with self._lock:
            unit, alone = self._current()
            unit.keys.append((namespace, keys))
            if alone:
                self._commit(unit)

    def put_blob(self, data: bytes) -> str:
        """Store ``data`` under its sha256 (returned): at once outside a unit, or with the unit
        when it commits, before its rows (:meth:`blob` reads it meanwhile)."""
        with self._lock:
            unit = self._unit
            if unit is None:
                return self.store.blobs.put(data)
            if not unit.staged and not unit.probed:
                sha = self.store.blobs.put(data)
                unit.probed = True
                return sha
            sha = sha256_hex(check_bytes(data))
            unit.blobs[sha] = bytes(data)
            return sha

    def blob(self, sha256: str) -> bytes:
        """A blob's bytes, one of a staged unit not committed yet included."""
        for unit in (self._unit, self._staged):
            if unit is not None and sha256 in unit.blobs:
                return unit.blobs[sha256]
        return self.store.blobs.get(sha256)

    def after_commit(self, fn: Callable[[], object]) -> None:
        """Run ``fn()`` once the current unit has committed (at once outside a unit)."""
        with self._lock:
            if self._unit is None:
                fn()
            else:
                self._unit.after_commit.append(fn)

    # ------------------------------------------------------------------ reading
    def pending(self, kinds: Sequence[str]) -> list[NewEvent]:
        """Events of those kinds emitted in the staged and the open unit (not committed yet)."""
        units = [u for u in (self._staged, self._unit) if u is not None]
        return [e for u in units for e in u.events if e.kind in kinds]

    def pending_docs(self, namespace: str) -> list[str]:
        """Keys of documents of that namespace put in the staged and the open unit (not
        committed yet)."""
        units = [u for u in (self._staged, self._unit) if u is not None]
        return [
            key for u in units for ns, key, value in u.docs if ns == namespace and value is not None
        ]

    def read(self, *, start: int = 0, kinds: Sequence[str] | None = None) -> Iterator[Event]:
        return self.store.read(self.session_id, start=start, stop=self.head, kinds=kinds)

    def read_heads(self, kinds: Sequence[str], *, details: bool = False) -> list[EventHead]:
        return self.store.read_heads(self.session_id, stop=self.head, kinds=kinds, details=details)

    def read_last(self, n: int, kinds: Sequence[str]) -> list[Event]:
        return (
            [e for e in self.store.read_last(self.session_id, n, kinds=kinds) if e.seq < self.head]
            if self.head
            else []
        )

    def check_current(self) -> None:
        """Raise ConcurrentWriteError if another writer appended since this one last did."""
        actual = self.store.head(self.session_id)
        if actual != self.head:
            raise ConcurrentWriteError(self.session_id, self.head, actual)


__all__ = ["SessionStore"]
