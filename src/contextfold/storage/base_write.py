"""The write transaction every backend shares (:class:`~.base.Transaction`): each write's
arguments checked and its JSON encoded the same way on every backend, before the backend
stores it. A backend's transaction derives from :class:`WriteTransaction` and implements what
it stores (the ``_``-methods below); the search index's writes are its own."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..errors import StorageError
from .base import ConcurrentWriteError, Event, NewEvent, check_append, check_text
from .branches import check_branch


def dump_json(value: object, what: str) -> str:
    """``value`` as compact JSON text (lone surrogates kept as ``\\u`` escapes, so the text
    encodes as UTF-8); StorageError naming ``what`` when it is not JSON."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise StorageError(f"{what} is not JSON-serializable ({exc})") from None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates (undecodable bytes): keep them escaped
        text = json.dumps(value, ensure_ascii=True, separators=(",", ":"))
    return text


@dataclass(frozen=True, slots=True)
class EncodedEvent:
    """An event to append at ``seq``, its data, head and detail as JSON text."""

    seq: int
    kind: str
    data: str
    head: str | None
    detail: str | None


@dataclass(frozen=True, slots=True)
class Append:
    """One checked append: ``events`` (``encoded``, their JSON) at ``expected_seq`` of
    ``session_id``, which ``agent_id`` owns (or creates, at 0); ``title`` "" for none."""

    session_id: str
    events: Sequence[NewEvent]
    encoded: list[EncodedEvent]
    expected_seq: int
    agent_id: str
    title: str


def encode_events(session_id: str, events: Sequence[NewEvent], start: int) -> list[EncodedEvent]:
    """``events`` to append at ``start`` with their JSON encoded (all before any is written)."""
    out: list[EncodedEvent] = []
    for i, ev in enumerate(events):
        what = f"event {ev.kind!r} of session {session_id!r}"
        out.append(
            EncodedEvent(
                seq=start + i,
                kind=ev.kind,
                data=dump_json(ev.data, what),
                head=None if ev.head is None else dump_json(ev.head, f"the head of {what}"),
                detail=None if ev.detail is None else dump_json(ev.detail, f"the detail of {what}"),
            )
        )
    return out


def check_claim(a: Append, found: tuple[int, str] | None) -> None:
    """Refuse ``a`` unless its session (``found``: its event count and owner, None when it
    does not exist) has exactly ``a.expected_seq`` events and belongs to ``a.agent_id``."""
    actual = found[0] if found is not None else 0
    if actual != a.expected_seq:
        raise ConcurrentWriteError(a.session_id, a.expected_seq, actual)
    if found is not None and found[1] != a.agent_id:
        raise StorageError(
            f"session {a.session_id!r} belongs to agent {found[1]!r}, not {a.agent_id!r}; "
            "refusing to append"
        )


class WriteTransaction(ABC):
    """Appends, branches, documents and deletes of one transaction: checked and encoded here,
    stored by the backend's ``_``-methods (called only with checked arguments)."""

    def _begin(self, what: str) -> None:  # noqa: B027 (a hook: by default nothing to note)
        """Called before each write is stored (``what`` names it); a backend that queues its
        writes notes it here."""

    def delete_session(self, session_id: str) -> None:
        """Delete the session and everything filed under it, in this transaction (so a new
        session of the same id can be written in its place atomically)."""
        self._begin(f"delete session {session_id!r}")
        self._delete_session(session_id)

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
        encoded = encode_events(session_id, events, expected_seq)
        self._begin(f"append to session {session_id!r}")
        return self._append(
            Append(session_id, events, encoded, expected_seq, agent_id, title or "")
        )

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
        check_text(parent_id, "parent session id")
        self._begin(f"create branch {session_id!r}")
        found = self._owner(session_id)
        if found is not None:
            raise ConcurrentWriteError(session_id, 0, found[0])
        parent = self._owner(parent_id) if isinstance(parent_id, str) and parent_id else None
        at = check_branch(
            session_id,
            parent_id,
            at,
            parent_events=parent[0] if parent else None,
            parent_agent=parent[1] if parent else None,
            agent_id=agent_id,
        )
        self._branch(session_id, parent_id, at, agent_id, title or "")

    def put_doc(self, namespace: str, key: str, value: Mapping[str, object]) -> None:
        check_text(namespace, "document namespace")
        check_text(key, "document key")
        text = dump_json(value, f"document {namespace}/{key}")
        self._begin(f"write document {namespace}/{key}")
        self._put_doc(namespace, key, text)

    def delete_doc(self, namespace: str, key: str) -> None:
        check_text(namespace, "document namespace")
        check_text(key, "document key")
        self._begin(f"delete document {namespace}/{key}")
        self._delete_doc(namespace, key)

    # ------------------------------------------------------------------ the backend's part
    @abstractmethod
    def _delete_session(self, session_id: str) -> None: ...

    @abstractmethod
    def _owner(self, session_id: str) -> tuple[int, str] | None:
        """The session's event count and owning agent as this transaction sees it (None: no
        such session)."""

    @abstractmethod
    def _append(self, a: Append) -> list[Event]:
        """Store ``a.encoded`` if the session has ``a.expected_seq`` events and belongs to
        ``a.agent_id`` (creating it at 0), else raise ConcurrentWriteError or StorageError;
        the events as stored."""

    @abstractmethod
    def _branch(self, session_id: str, parent_id: str, at: int, agent_id: str, title: str) -> None:
        """Create the branch (checked: it does not exist, its parent does and has ``at``
        events)."""

    @abstractmethod
    def _put_doc(self, namespace: str, key: str, text: str) -> None: ...

    @abstractmethod
    def _delete_doc(self, namespace: str, key: str) -> None: ...


__all__ = [
    "Append",
    "EncodedEvent",
    "WriteTransaction",
    "check_claim",
    "dump_json",
    "encode_events",
]
