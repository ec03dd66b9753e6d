"""The storage protocols every part of contextfold goes through.

One session's durable state is an append-only **event log** (messages, compactions, offloads,
state changes: one source of truth). Around it: a content-addressed **blob store** for the bytes
that leave the view (offloaded outputs, evidence bodies, oversized messages), one **search index**
(sessions, evidence and memory; BM25-ranked, with exact lookup keys per document), and small
**keyed documents** (caches derived from the log, memory files, workspace settings). A backend
implements all four behind :class:`Store`: ``MemoryStore`` (tests, notebooks), ``SQLiteStore``
(embedded default: SQLite in WAL mode plus blob files under the workspace folder),
``PostgresStore`` (many workers on many hosts).

Atomic units. Everything one call writes (one ``add_many``, one compaction with its record,
blocks, state and index rows) is a single :meth:`Store.transaction`. Blobs are written first
(idempotent, content-addressed; an orphan blob after a failure is harmless), then the transaction
that points at them. Inside a transaction nothing is visible to other readers until commit; a
failure anywhere rolls everything back and raises :class:`StorageError` (or
:class:`ConcurrentWriteError`) saying what failed. Retrying the same call then succeeds.

Optimistic concurrency. :meth:`Transaction.append` takes ``expected_seq``: the number of events
the writer believes the session has. A writer that is behind gets :class:`ConcurrentWriteError`,
never a duplicate or an interleaved log. The first event of a session fixes its owner agent in
the same transaction (never inferred later).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, Protocol, runtime_checkable

from ..errors import StorageError
from ..jsontypes import JSON, JSONLike

# JSON: a value as decoded (what events, documents and index fields read back as); a write
# takes JSONLike (any value that encodes as JSON, read-only), checked when it is encoded.

#: Event kinds written by the library. Backends store ``kind`` as an opaque string.
EventKind = Literal[
    "message",  # one message: {"message": <OpenAI dict>, "uuid": str, "metadata": {...}}
    "compaction",  # one compaction: {"record": ..., "blocks": [...], "state": {...}}
    "offload",  # one offload at ingest: {"entry": <OffloadEntry dict>, "policy": str}
    "state",  # compactor state / calibration / learned window changed (snapshot)
    "session_state",  # plan mode, todos, tasks, permissions (snapshot)
    "subagent",  # a sub-agent's output archived as evidence: {"blocks": [...]}
    "evidence",  # messages that left the view, indexed as evidence: {"block": <CompactBlock>}
    "branch",  # a rewritten history continues in a new branch (gateway): {"from": ..., ...}
]


class ConcurrentWriteError(StorageError):
    """Another writer appended to the session since this one last read it.

    ``expected`` is the event count the writer assumed, ``actual`` the count found (when known).
    Reopen (or :meth:`ContextManager.refresh`) to continue from the latest log.
    """

    def __init__(self, session_id: str, expected: int, actual: int | None) -> None:
        self.session_id = session_id
        self.expected = expected
        self.actual = actual
        found = f", found {actual}" if actual is not None else ""
        super().__init__(
            f"session {session_id!r} was written by another writer (expected {expected} "
            f"events{found}); reopen the session to continue from the latest log"
        )


class BlobNotFoundError(StorageError):
    """No blob with that sha256 is stored."""


class BlobCorruptError(StorageError):
    """A stored blob no longer matches its sha256."""


#: Longest exact lookup key (UTF-8 bytes): it must fit a B-tree index entry on every backend.
MAX_KEY_BYTES = 1024


def check_keys(keys: object, what: str) -> list[str]:
    """Exact lookup keys, checked the same way by every backend: non-empty strings without NUL,
    valid UTF-8, at most :data:`MAX_KEY_BYTES` bytes. Duplicates are dropped (order kept)."""
    if isinstance(keys, str) or not isinstance(keys, Sequence | set | frozenset):
        raise StorageError(f"{what}: keys must be a list of strings, got {type(keys).__name__}")
    out: dict[str, None] = {}
    for key in keys:
        if not isinstance(key, str) or not key or "\x00" in key:
            raise StorageError(f"{what}: a key must be a non-empty string without NUL: {key!r}")
        try:
            size = len(key.encode("utf-8"))
        except UnicodeEncodeError:
            raise StorageError(f"{what}: key {key[:40]!r} is not valid UTF-8") from None
        if size > MAX_KEY_BYTES:
            raise StorageError(f"{what}: key {key[:40]!r}... is longer than {MAX_KEY_BYTES} bytes")
        out[key] = None
    return list(out)


def prefix_end(prefix: str) -> str | None:
    """The smallest string above every string that starts with ``prefix`` (code point order,
    which is UTF-8 byte order: SQLite's BINARY and PostgreSQL's "C" collation); None when
    there is none (an empty prefix, or one made of U+10FFFF only)."""
    p = prefix
    while p:
        last = ord(p[-1])
        if last < 0x10FFFF:
            nxt = last + 1
            if 0xD800 <= nxt <= 0xDFFF:  # no surrogates in stored text
                nxt = 0xE000
            return p[:-1] + chr(nxt)
        p = p[:-1]
    return None


def check_text(value: object, what: str) -> None:
    """A name the store files rows under (session and agent id, title, document namespace
    and key) must be text that UTF-8 can encode: lone surrogates are refused the same way by
    every backend, before anything is written."""
    if isinstance(value, str) and not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise StorageError(
                f"{what} {value[:40]!r} is not valid Unicode (lone surrogates)"
            ) from None


def check_append(
    session_id: object, agent_id: object, expected_seq: object, title: object = None
) -> None:
    """The arguments of :meth:`Transaction.append`, checked the same way by every backend."""
    if not isinstance(session_id, str) or not session_id:
        raise StorageError(f"session id must be a non-empty string, got {session_id!r}")
    if not isinstance(agent_id, str) or not agent_id:
        raise StorageError(f"agent id must be a non-empty string, got {agent_id!r}")
    if isinstance(expected_seq, bool) or not isinstance(expected_seq, int) or expected_seq < 0:
        raise StorageError(f"expected_seq must be an integer >= 0, got {expected_seq!r}")
    check_text(session_id, "session id")
    check_text(agent_id, "agent id")
    check_text(title, "session title")


@dataclass(frozen=True, kw_only=True, slots=True)
class NewEvent:
    """An event to append; the store assigns ``seq`` and ``ts``."""

    kind: str
    data: Mapping[str, JSONLike]
    #: A small summary of ``data`` (any JSON value) that :meth:`Store.read_heads` returns
    #: without reading the data (a message's position, uuid, role, call ids and token count):
    #: reopening a long session reads these instead of every message. None: no head.
    head: JSONLike = None
    #: Details beside the head that only some readers want (what each call of a message was
    #: about): returned by :meth:`Store.read_heads` with ``details=True``, never otherwise.
    detail: JSONLike = None


class EventHead(NamedTuple):
    """The head of a stored event (None for an event written without one, e.g. by an older
    release: read the event itself). A named tuple: sessions have tens of thousands."""

    seq: int
    kind: str
    head: JSON | None
    #: the event's detail when read with ``details=True`` (else None)
    detail: JSON | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Event:
    """A stored event. ``seq`` is 0-based and dense within a session."""

    session_id: str
    seq: int
    kind: str
    ts: str
    data: Mapping[str, JSON]


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionInfo:
    """What the store knows about a session without reading its events."""

    session_id: str
    agent_id: str
    created_at: str
    updated_at: str
    title: str
    #: events and messages counted as the session reads: a branch's shared prefix included
    events: int
    messages: int
    #: a branch: the session whose first ``fork_at`` events it shares (None: no branch)
    parent_id: str | None = None
    fork_at: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class SearchDoc:
    """One document of the search index.

    ``namespace`` separates corpora ("session" messages, "evidence", "memory"); ``scope`` is
    what access is checked against (the owning agent id); ``session_id`` may be empty for
    workspace-wide documents (memory). ``fields`` are the searchable texts (weighted by the
    backend per field name where it can; "body" is the main text); ``meta`` is returned as is.
    ``keys`` are exact lookup keys (``cmd:...``, ``path:...``: what the caller wants to find
    the document by without ranking), found again with :meth:`Store.lookup`.
    """

    namespace: str
    doc_id: str
    scope: str
    session_id: str
    fields: Mapping[str, str]
    meta: Mapping[str, JSONLike] = field(default_factory=dict)
    keys: Sequence[str] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class SearchHit:
    doc_id: str
    session_id: str
    score: float
    meta: Mapping[str, JSON]


@runtime_checkable
class Transaction(Protocol):
    """The writes of one atomic unit. Nothing is visible outside until the ``with`` block
    ends without an exception; any exception rolls everything back."""

    def append(
        self,
        session_id: str,
        events: Sequence[NewEvent],
        *,
        expected_seq: int,
        agent_id: str,
        title: str | None = None,
    ) -> list[Event]:
        """Append ``events`` at position ``expected_seq``; raise ConcurrentWriteError if the
        session does not have exactly ``expected_seq`` events. Creates the session (owned by
        ``agent_id``) when ``expected_seq == 0``; appending to an existing session with another
        ``agent_id`` raises StorageError."""
        ...

    def branch(
        self,
        session_id: str,
        *,
        parent_id: str,
        at: int,
        agent_id: str,
        title: str | None = None,
    ) -> None:
        """Create ``session_id`` as a branch of ``parent_id``: its first ``at`` events are the
        parent's (shared, never copied; see :mod:`.branches`), so it starts with ``at`` events
        and the next :meth:`append` gives ``expected_seq=at``. The parent must exist, have at
        least ``at`` events and be owned by ``agent_id``; a session that exists already raises
        ConcurrentWriteError (another writer created it first)."""
        ...

    def delete_session(self, session_id: str) -> None:
        """Delete the session and everything filed under it (as ``Store.delete_session``), as
        the first write of this transaction: the writes after it may create a new session of
        the same id, so that one session replaces another atomically."""
        ...

    def put_doc(self, namespace: str, key: str, value: Mapping[str, JSONLike]) -> None: ...

    def delete_doc(self, namespace: str, key: str) -> None: ...

    def index(self, docs: Sequence[SearchDoc]) -> None:
        """Add or replace documents (same namespace + doc_id replaces)."""
        ...

    def unindex(self, namespace: str, *, session_id: str) -> None:
        """Remove the session's documents of the namespace, and every key filed under it."""
        ...

    def add_keys(self, namespace: str, session_id: str, keys: Mapping[str, Sequence[str]]) -> None:
        """File more exact lookup keys under documents of a session: ``keys`` maps a doc id to
        keys added to it. The id may be an indexed document (keys for documents indexed before
        they had any) or any id the caller groups keys under (the keys of a whole session).
        A (key, doc id) pair is kept once. Keys of an indexed document are replaced when it is
        indexed again; all go with :meth:`unindex` and ``delete_session``."""
        ...

    def update_meta(self, namespace: str, metas: Mapping[str, Mapping[str, JSONLike]]) -> None:
        """Replace the ``meta`` of indexed documents (by doc id; ids not indexed are skipped).
        Their searchable text, ranking statistics and keys are left as they are."""
        ...


@runtime_checkable
class BlobStore(Protocol):
    def put(self, data: bytes) -> str:
        """Store ``data`` (idempotent); returns its sha256 hex digest. Durable on return."""
        ...

    def get(self, sha256: str) -> bytes:
        """The exact bytes; BlobNotFoundError / BlobCorruptError (checked against the hash)."""
        ...

    def has(self, sha256: str) -> bool: ...

    def size(self, sha256: str) -> int | None: ...


def put_blobs(blobs: BlobStore, datas: Sequence[bytes]) -> list[str]:
    """Store many blobs, durable on return: with the store's ``put_many(datas)`` when it has
    one (one group commit for the batch; the built-in stores do), else one ``put`` each."""
    put_many = getattr(blobs, "put_many", None)
    if callable(put_many):
        return list(put_many(datas))
    return [blobs.put(d) for d in datas]


@runtime_checkable
class Store(Protocol):
    """A backend: event logs, blobs, search and documents behind one object.

    Thread-safe: one Store may be shared by many threads and ContextManagers. ``close()``
    releases connections; a closed store raises StorageError on use."""

    @property
    def url(self) -> str:
        """Where it lives, without credentials (``sqlite:///path``, ``postgresql://host/db``)."""
        ...

    @property
    def blobs(self) -> BlobStore: ...

    def transaction(self) -> AbstractContextManager[Transaction]: ...

    # -- event log
    def head(self, session_id: str) -> int:
        """Number of events of the session (0 when it does not exist)."""
        ...

    def read(
        self,
        session_id: str,
        *,
        start: int = 0,
        stop: int | None = None,
        kinds: Sequence[str] | None = None,
    ) -> Iterator[Event]:
        """Events with ``start <= seq < stop`` in order, optionally only some kinds."""
        ...

    def read_last(
        self, session_id: str, n: int, *, kinds: Sequence[str] | None = None
    ) -> list[Event]:
        """The newest ``n`` events (of those kinds), oldest first, without reading the rest."""
        ...

    def read_heads(
        self,
        session_id: str,
        *,
        start: int = 0,
        stop: int | None = None,
        kinds: Sequence[str] | None = None,
        details: bool = False,
    ) -> list[EventHead]:
        """The heads of the events with ``start <= seq < stop`` in order (their data is not
        read), optionally only some kinds; with ``details``, each one's detail too."""
        ...

    def session(self, session_id: str) -> SessionInfo | None: ...

    def sessions(self, agent_ids: Sequence[str] | None = None) -> list[SessionInfo]:
        """Sessions owned by those agents (all when None), newest first."""
        ...

    def branches(self, session_id: str) -> list[str]:
        """The sessions that are branches of ``session_id`` (direct ones), oldest id first."""
        ...

    def delete_session(self, session_id: str) -> None:
        """Events, the session row, documents whose key starts with ``"<session_id>/"`` (in any
        namespace) and index rows of the session, in one step. Blobs are shared by content and
        are not deleted. Branches of the session keep their whole history: the events they
        still share with it move into them in the same step."""
        ...

    # -- documents
    def get_doc(self, namespace: str, key: str) -> dict[str, JSON] | None: ...

    def docs(self, namespace: str, *, prefix: str = "") -> dict[str, dict[str, JSON]]: ...

    # -- search
    def search(
        self,
        namespace: str,
        query: str,
        *,
        scopes: Sequence[str] | None = None,
        session_id: str | None = None,
        limit: int = 10,
    ) -> list[SearchHit]:
        """BM25-ranked documents of the namespace whose scope is in ``scopes`` (all when None),
        optionally of one session."""
        ...

    def lookup(
        self,
        namespace: str,
        *,
        session_id: str,
        keys: Sequence[str] = (),
        prefixes: Sequence[str] = (),
    ) -> list[tuple[str, str]]:
        """Exact lookup: the ``(key, doc_id)`` pairs filed in the namespace for the session
        whose key is one of ``keys`` or starts with one of ``prefixes`` (an empty prefix
        matches every key), sorted by key then doc id. Keys compare by code point."""
        ...

    def metas(self, namespace: str, doc_ids: Sequence[str]) -> dict[str, dict[str, JSON]]:
        """The ``meta`` of indexed documents by doc id (ids not indexed are left out)."""
        ...

    def close(self) -> None: ...


__all__ = [
    "JSON",
    "MAX_KEY_BYTES",
    "BlobCorruptError",
    "BlobNotFoundError",
    "BlobStore",
    "ConcurrentWriteError",
    "Event",
    "EventHead",
    "EventKind",
    "NewEvent",
    "SearchDoc",
    "SearchHit",
    "SessionInfo",
    "Store",
    "Transaction",
    "check_append",
    "check_keys",
    "check_text",
    "prefix_end",
    "put_blobs",
]
