"""The raw session log: one ``message`` event per message in the session's event log.

Every message is written as it arrives, so the log is the session's full history: compaction
changes only the view sent to the model, never the log. A message event holds::

    {"pos": int (0-based message position), "uuid": str,
     "message": <OpenAI dict from contextfold.core.wire.to_openai>, "metadata": {...},
     "tokens": int | null (the counted tokens, so reopening does not re-tokenize)}

Appends go into the writer's current unit of work (see :mod:`contextfold.storage.session`),
together with one search-index row per message (namespace ``"session"``, scoped by the
session's owner). ``contextfold export`` writes the log as JSONL (``log.jsonl``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from ...core.messages import Message
from ...core.wire import loads_message, to_openai
from ...errors import ContextFoldError, StorageError
from ...jsontypes import JSON, JSONObject, as_list, as_object, to_int
from ...storage.base import Event, SearchDoc, SessionInfo, Store
from ...storage.session import SessionStore
from ...storage.util import utc_now
from .text import message_search_text

TITLE_CHARS = 120
#: Characters of one message that are indexed for session_search (head and tail).
INDEX_CHARS = 32_000
INDEX_TOOL_CHARS = 8_000
NAMESPACE = "session"


@dataclass(frozen=True, kw_only=True, slots=True)
class LogEntry:
    """One message of the raw log. ``seq`` is its message position."""

    seq: int
    uuid: str
    ts: str
    message: Message
    tokens: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionMeta:
    """What ``session_list`` shows about a session."""

    session_id: str
    agent_id: str
    created_at: str
    updated_at: str
    title: str
    message_count: int

    @classmethod
    def of(cls, info: SessionInfo) -> SessionMeta:
        return cls(
            session_id=info.session_id,
            agent_id=info.agent_id,
            created_at=info.created_at,
            updated_at=info.updated_at,
            title=info.title,
            message_count=info.messages,
        )


def make_title(text: str) -> str:
    flat = re.sub(r"\s+", " ", text).strip()
    if len(flat) <= TITLE_CHARS:
        return flat
    return flat[: TITLE_CHARS - 1].rstrip() + "…"


def message_event(msg: Message, pos: int, tokens: int | None) -> JSONObject:
    data: JSONObject = {
        "pos": pos,
        "uuid": msg.uuid,
        "message": to_openai(msg),
        "metadata": dict(msg.metadata),
        "tokens": tokens,
    }
    if msg.tool_calls:
        # what each call was about (recall ordinals count these): read on reopen, not re-parsed
        from ...evidence.calls import stored_calls

        calls: list[JSON] = list(stored_calls(msg.tool_calls))
        data["calls"] = calls
    return data


#: A message's metadata key whose (string) value is kept in its head: a caller's own short
#: key for the message (the gateway's fingerprint of what the client sent), read back on
#: reopen without reading the message.
HEAD_KEY = "cf_fingerprint"


def message_head(data: Mapping[str, JSON]) -> list[JSON]:
    """The head stored beside a message event: what reopening needs without the content,
    as a compact array ``[pos, uuid, role, tokens, tool_call_id, call ids]`` (the last two
    None when the message answers no call / makes none), plus the metadata's
    :data:`HEAD_KEY` value as a seventh item when it has one."""
    msg = as_object(data["message"])
    calls = data.get("calls")
    head: list[JSON] = [
        data["pos"],
        data["uuid"],
        msg.get("role"),
        data.get("tokens"),
        msg.get("tool_call_id"),
        [as_object(c).get("id") for c in as_list(calls)] if calls else None,
    ]
    key = as_object(data.get("metadata")).get(HEAD_KEY)
    if isinstance(key, str):
        head.append(key)
    return head


def entry_of(event: Event) -> LogEntry:
    """The LogEntry of a stored message event; StorageError naming the event if damaged."""
    data = event.data
    try:
        msg = loads_message(data, index=event.seq)
        pos = to_int(data["pos"])
    except (ContextFoldError, KeyError, TypeError, ValueError) as exc:
        raise StorageError(
            f"session {event.session_id!r}: event {event.seq} is not a valid message ({exc})"
        ) from None
    tokens = data.get("tokens")
    return LogEntry(
        seq=pos,
        uuid=msg.uuid,
        ts=event.ts,
        message=msg,
        tokens=tokens if isinstance(tokens, int) else None,
    )


def search_doc(session_id: str, owner: str, entry: LogEntry, event: int) -> SearchDoc:
    text = message_search_text(
        entry.message, max_chars=INDEX_CHARS, max_tool_chars=INDEX_TOOL_CHARS
    )
    return SearchDoc(
        namespace=NAMESPACE,
        doc_id=f"{session_id}:{entry.seq}",
        scope=owner,
        session_id=session_id,
        fields={"body": text},
        meta={"seq": entry.seq, "event": event, "role": entry.message.role, "ts": entry.ts},
    )


class SessionLog:
    """Append-only raw log of one session, over the session's event log."""

    def __init__(self, session: SessionStore) -> None:
        self.session = session
        self.session_id = session.session_id
        #: Damage found while reading, newest last (kept for callers that report it).
        self.problems: list[str] = []

    @property
    def agent_id(self) -> str:
        return self.session.agent_id

    def append(
        self,
        messages: Sequence[Message],
        start: int,
        tokens: Sequence[int | None] | None = None,
        *,
        index: bool = True,
    ) -> list[LogEntry]:
        """Emit the messages (positions ``start``...) and their index rows into the unit (the
        rows are left to the caller when not ``index``: :func:`search_docs`)."""
        stamp = utc_now()
        entries: list[LogEntry] = []
        docs: list[SearchDoc] = []
        title = None
        for i, msg in enumerate(messages):
            if not isinstance(msg, Message):
                raise StorageError(
                    f"session {self.session_id}: append expects Message objects, "
                    f"got {type(msg).__name__}"
                )
            count = tokens[i] if tokens is not None else None
            if title is None and msg.role == "user" and msg.text.strip():
                title = make_title(msg.text)
            data = message_event(msg, start + i, count)
            event = self.session.emit(
                "message", data, title=title, head=message_head(data), detail=data.get("calls")
            )
            entry = LogEntry(seq=start + i, uuid=msg.uuid, ts=stamp, message=msg, tokens=count)
            entries.append(entry)
            if index:
                docs.append(search_doc(self.session_id, self.agent_id, entry, event))
        if docs:
            self.session.index(docs)
        return entries

    def iter_entries(self) -> Iterator[LogEntry]:
        for event in self.session.read(kinds=["message"]):
            yield entry_of(event)

    def read(self) -> list[Message]:
        """The full history, in order (uuid and metadata preserved)."""
        return [e.message for e in self.iter_entries()]


def read_entries(store: Store, session_id: str, *, last: int | None = None) -> list[LogEntry]:
    """Messages of any session, oldest first (only the newest ``last`` when given)."""
    if last is None:
        events: Sequence[Event] = list(store.read(session_id, kinds=["message"]))
    else:
        events = store.read_last(session_id, last, kinds=["message"])
    return [entry_of(e) for e in events]


__all__ = [
    "LogEntry",
    "SessionLog",
    "SessionMeta",
    "entry_of",
    "make_title",
    "message_event",
    "message_head",
    "read_entries",
    "search_doc",
    "utc_now",
]
