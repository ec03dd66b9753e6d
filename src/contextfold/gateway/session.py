"""One stored session as the gateway holds it in memory: the manager, the fingerprints of its
messages, the answer not written yet, and the undo of a staged append (see
``ContextManager.staged``). ContextManager is synchronous: the methods here run in worker
threads."""

from __future__ import annotations

import json
import logging
import uuid as uuidlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..errors import ContextFoldError
from ..manager import ContextManager
from ..messages import Message
from ..records import CompactionRecord
from ..sessions.log import HEAD_KEY
from ..tokens import count_message
from .convert import ViewItem

if TYPE_CHECKING:
    from .summarize import RequestContext

log = logging.getLogger("contextfold.gateway")


def message_uuid(session_id: str, position: int) -> str:
    """The uuid ContextManager gives a dict at ``position``: stable across replays."""
    return str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"contextfold:{session_id}:{position}"))


def _stored_fingerprints(cm: ContextManager) -> tuple[list[str], int] | None:
    """The fingerprints and total tokens of a stored session's messages, read from their
    heads without the messages (None: some message has none, e.g. written by an older
    release or not through the gateway)."""
    n = len(cm.view)
    if not n:
        return [], 0
    if cm.view.complete:
        return None  # read entirely anyway: fingerprinting the messages costs no extra read
    heads = cm.store.read_heads(cm.session_id, stop=cm.session.head, kinds=["message"])
    if len(heads) != n:
        return None
    fps: list[str] = []
    tokens = 0
    for row in heads:
        h = row.head
        if type(h) is not list or len(h) < 7 or type(h[6]) is not str or type(h[3]) is not int:
            return None
        fps.append(h[6])
        tokens += h[3]
    return fps, tokens


class Session:
    """One stored session and what the gateway keeps about it in memory."""

    def __init__(self, session_id: str, cm: ContextManager) -> None:
        from .convert import fingerprint

        self.session_id = session_id
        self.cm = cm
        stored = _stored_fingerprints(cm)
        if stored is not None:  # from the heads: the history before the boundary stays unread
            self.fps, self.history_tokens = stored
            self.index_of = dict(cm.view.uuids)
        else:  # written before the gateway kept its fingerprints in the heads: derive them
            history = cm.history
            self.fps = [fingerprint(m) for m in history]
            self.index_of = {m.uuid: i for i, m in enumerate(history)}
            self.history_tokens = sum(count_message(cm.counter, m) for m in history)
        #: the window the gateway opened it with (the manager may use a smaller, learned one)
        self.window = cm.configured_window
        #: something left the view (offloaded or compacted): the gateway's tools can help
        self.recall_ready = any(recall_marker(m) for m in cm.view_messages)
        #: turns since the provider's usage was last fed to calibration (-1: never)
        self.since_usage = -1
        #: the gateway tools' schemas by provider (they do not change for a session)
        self.tool_schemas: dict[str, list[dict[str, Any]]] = {}
        #: the request the upstream summarizer borrows credentials and model from
        self.context: RequestContext | None = None

        #: the upstream's answer the client has, not written yet (message, fingerprint,
        #: the input tokens the upstream reported), and since when (time.monotonic)
        self.pending: tuple[Message, str, int | None] | None = None
        self.pending_since = 0.0
        #: the conversation (lock key) this session serves
        self.key = ""

    @property
    def known_fps(self) -> list[str]:
        """Fingerprints of the stored history plus the answer not written yet."""
        return [*self.fps, self.pending[1]] if self.pending is not None else self.fps

    def append(self, msgs: Sequence[Message], fps: Sequence[str], *, staged: bool = False) -> None:
        """Write ``msgs`` (after the pending answer, if any) in one store append. ``staged``:
        applied in memory now, stored by :meth:`settle` (see ``ContextManager.staged``)."""
        if staged:
            with self.cm.staged():
                self._append(msgs, fps)
        else:
            self._append(msgs, fps)

    def snapshot(self) -> Snapshot:
        """What :meth:`restore` needs to undo a staged append."""
        return Snapshot(
            messages=len(self.fps),
            head=self.cm.session.head,
            pending=self.pending,
            history_tokens=self.history_tokens,
            since_usage=self.since_usage,
        )

    def settle(self, before: Snapshot) -> None:
        """Commit what a staged append applied (and anything staged with it); on a storage
        failure (or when a failed write already dropped it) the session is put back exactly as
        it was at ``before`` - the pending answer included - and the error is raised."""
        cm = self.cm
        if cm.has_staged:
            try:
                cm.commit_staged()
            except BaseException:
                self.restore(before)
                raise
        elif cm.session.head == before.head and len(self.fps) != before.messages:
            self.restore(before)  # a failed write took the staged one along (manager reloaded)

    def restore(self, before: Snapshot) -> None:
        """Forget the messages appended since ``before`` (the manager has reloaded them)."""
        for pos in range(before.messages, len(self.fps)):
            self.index_of.pop(message_uuid(self.session_id, pos), None)
        del self.fps[before.messages :]
        self.pending = before.pending
        self.history_tokens = before.history_tokens
        self.since_usage = before.since_usage

    def _append(self, msgs: Sequence[Message], fps: Sequence[str]) -> None:
        pending = self.pending
        if pending is not None:
            msgs = [pending[0], *msgs]
            fps = [pending[1], *fps]
        if not msgs:
            return
        start = len(self.fps)
        stamped = [  # the fingerprint is kept in the message's head (read back on reopen)
            replace(
                m,
                uuid=message_uuid(self.session_id, start + j),
                metadata={**m.metadata, HEAD_KEY: fps[j]},
            )
            for j, m in enumerate(msgs)
        ]
        added = self.cm.add_many(stamped)
        self.pending = None
        for j, m in enumerate(added):
            self.index_of[m.uuid] = start + j
            self.history_tokens += count_message(self.cm.counter, m)
        self.fps.extend(fps)
        if pending is not None and pending[2] is not None and pending[2] > 0:
            self._report_usage(pending[2])

    def flush(self) -> None:
        """Write the pending answer, if any."""
        if self.pending is not None:
            self.append([], [])

    def _report_usage(self, input_tokens: int) -> None:
        # calibration settles within a few calls; each report rewrites the compactor state,
        # so after the first ones feed it every 8th turn, and after any compaction
        record = self.cm.last_record
        compacted = record is not None and record.changed
        if self.since_usage < 0 or self.since_usage >= 7 or compacted or len(self.fps) < 12:
            self.cm.report_usage(input_tokens)
            self.since_usage = 0
        else:
            self.since_usage += 1


def close_session(sess: Session) -> None:
    """Release what the session's manager holds (its store connection), where it can."""
    close = getattr(sess.cm, "close", None)
    if not callable(close):
        return
    try:
        close()
    except ContextFoldError as exc:
        log.info(json.dumps({"event": "close_failed", "session": sess.session_id, "why": str(exc)}))


def recall_marker(m: Message) -> bool:
    meta = m.metadata
    return bool(meta.get("cf_offloaded") or meta.get("cf_replaced") or meta.get("cf_kind"))


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A session's in-memory state before a staged append (see :meth:`Session.restore`)."""

    messages: int
    head: int
    pending: tuple[Message, str, int | None] | None
    history_tokens: int
    since_usage: int


@dataclass(frozen=True, slots=True)
class Prepared:
    items: list[ViewItem]
    tools: list[dict[str, Any]]
    view_tokens: int
    history_tokens: int
    record: CompactionRecord | None


@dataclass(frozen=True, slots=True)
class Synced:
    session: Session
    added: int
    branched_from: str | None
    #: the session before a staged append (None: the append is stored already)
    staged: Snapshot | None = None


__all__ = [
    "Prepared",
    "Session",
    "Snapshot",
    "Synced",
    "close_session",
    "message_uuid",
    "recall_marker",
]
