"""Session operations on any store: list, show, delete, fork and tail.

The same functions back ``contextfold sessions ...``. Every one takes an open
:class:`~contextfold.storage.Store` (a workspace folder's SQLite store, PostgreSQL, memory) and
raises :class:`~contextfold.errors.ConfigError` naming the session when it is not there::

    from contextfold.storage import open_store
    from contextfold.engine.session_ops import fork_session, tail_session

    store = open_store("postgresql://app@db/agents")
    fork_session(store, "ticket-42", "ticket-42-retry", upto=17)   # messages 0..17
    stop = threading.Event()
    for entry in tail_session(store, "ticket-42", stop=stop):      # follows a live session
        print(entry.seq, entry.message.role, entry.message.text[:80])
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from ..core.paths import check_session_id
from ..errors import ConfigError, UnsafeIdError
from ..recovery.sessions.log import LogEntry, entry_of, read_entries
from ..storage import SessionInfo, Store

#: how often :func:`tail_session` looks at the session's head, in seconds
TAIL_INTERVAL = 0.25


def _checked(session_id: str) -> str:
    try:
        return check_session_id(session_id)
    except UnsafeIdError as exc:
        raise ConfigError(str(exc)) from None


def get_session(store: Store, session_id: str) -> SessionInfo:
    """The session's info; ConfigError "no session ..." when the store does not have it."""
    info = store.session(_checked(session_id))
    if info is None:
        raise ConfigError(f"no session {session_id!r} in {store.url}")
    return info


def list_sessions(store: Store, agent_id: str | None = None) -> list[SessionInfo]:
    """Sessions, most recently updated first (only ``agent_id``'s when given)."""
    return store.sessions(None if agent_id is None else [agent_id])


def show_session(
    store: Store, session_id: str, *, start: int = 0, stop: int | None = None
) -> list[LogEntry]:
    """The raw messages ``start <= position < stop`` of a session, oldest first."""
    get_session(store, session_id)
    entries = read_entries(store, session_id)
    return entries[start:stop]


def delete_session(store: Store, session_id: str) -> SessionInfo:
    """Delete a session (its events, documents and index rows, in one step); returns what it
    was. Blobs are shared by content and stay."""
    info = get_session(store, session_id)
    store.delete_session(session_id)
    return info


def fork_session(
    store: Store,
    session_id: str,
    new_session_id: str,
    *,
    upto: int | None = None,
    agent_id: str | None = None,
) -> int:
    """Start a new session from the messages ``0..upto`` (all when None) of a session;
    returns how many it starts with. The source is not touched. Refuses a target that already
    exists, before writing anything.

    Owned by the same agent (the default), the new session is a *branch*: it shares the
    source's history up to that point (stored once, with everything the source had done by
    then: its compactions and evidence) and stores only what is added to it. Owned by another
    agent (``agent_id``), the messages are copied into a session built like any other (its view,
    search index and compactions its own), since the source's index is scoped to its owner."""
    from .manager import ContextManager

    info = get_session(store, session_id)
    _checked(new_session_id)
    if store.session(new_session_id) is not None:
        raise ConfigError(f"session {new_session_id!r} already exists in {store.url}")
    entries = read_entries(store, session_id)
    if upto is not None:
        if not 0 <= upto < len(entries):
            raise ConfigError(
                f"session {session_id!r} has messages 0-{len(entries) - 1}; no message {upto}"
            )
        entries = entries[: upto + 1]
    if not entries:
        raise ConfigError(f"session {session_id!r} has no messages to copy")
    if agent_id is None or agent_id == info.agent_id:
        heads = store.read_heads(session_id, kinds=["message"])
        at = heads[len(entries)].seq if len(entries) < len(heads) else store.head(session_id)
        with store.transaction() as txn:
            txn.branch(new_session_id, parent_id=session_id, at=at, agent_id=info.agent_id)
        return len(entries)
    with ContextManager(
        store=store, session_id=new_session_id, agent_id=agent_id or info.agent_id
    ) as cm:
        cm.add_many([e.message for e in entries])
    return len(entries)


def tail_session(
    store: Store,
    session_id: str,
    *,
    last: int = 0,
    start: int | None = None,
    stop: threading.Event | None = None,
    interval: float = TAIL_INTERVAL,
) -> Iterator[LogEntry]:
    """Follow a session as it grows: first the messages from position ``start`` on (else the
    newest ``last``), then each new message as some process (a ``ContextManager``, the gateway)
    commits it. Looks at the session's head every ``interval`` seconds and reads only what is
    new. Ends when ``stop`` is set (never without one: stop it with Ctrl-C) or when the session
    is deleted."""
    get_session(store, session_id)
    stop = stop or threading.Event()
    seen = store.head(session_id)
    if start is not None or last:
        entries = [entry_of(e) for e in store.read(session_id, stop=seen, kinds=["message"])]
        chosen = [e for e in entries if e.seq >= start] if start is not None else entries[-last:]
        yield from chosen
    while not stop.is_set():
        head = store.head(session_id)
        if head < seen:  # deleted (or deleted and started again): nothing more to follow
            return
        if head > seen:
            for event in store.read(session_id, start=seen, stop=head, kinds=["message"]):
                yield entry_of(event)
            seen = head
            continue
        stop.wait(interval)


__all__ = [
    "TAIL_INTERVAL",
    "delete_session",
    "fork_session",
    "get_session",
    "list_sessions",
    "show_session",
    "tail_session",
]
