"""One stored session as the gateway holds it in memory: the manager, the fingerprints of its
messages (derived from the manager), the answer not written yet, and the check of a staged
append (see ``ContextManager.staged``). ContextManager is synchronous: the methods here run in worker
threads."""

from __future__ import annotations

import bisect
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, overload

from ..core.messages import Message, stable_uuid
from ..core.records import CompactionRecord
from ..core.tokens import count_message
from ..engine.ahead import Lookahead
from ..engine.manager import ContextManager
from ..errors import ContextFoldError, StorageError
from ..jsontypes import JSON, JSONLike, JSONObject
from ..recovery.sessions.log import HEAD_KEY
from .convert import ViewItem

if TYPE_CHECKING:
    from .summarize import RequestContext

log = logging.getLogger("contextfold.gateway")


def message_uuid(session_id: str, position: int) -> str:
    """The uuid ContextManager gives a dict at ``position``: stable across replays."""
    return stable_uuid(f"contextfold:{session_id}:{position}")


def _stored_fingerprints(cm: ContextManager) -> tuple[list[str], list[int]] | None:
    """The fingerprints and tokens of a stored session's messages, read from their
    heads without the messages (None: some message has none, e.g. written by an older
    release or not through the gateway)."""
    n = len(cm.view)
    if not n:
        return [], []
    if cm.view.complete:
        return None  # read entirely anyway: fingerprinting the messages costs no extra read
    heads = cm.store.read_heads(cm.session_id, stop=cm.session.head, kinds=["message"])
    if len(heads) != n:
        return None
    fps: list[str] = []
    tokens: list[int] = []
    for row in heads:
        h = row.head
        if type(h) is not list or len(h) < 7 or type(h[6]) is not str or type(h[3]) is not int:
            return None
        fps.append(h[6])
        tokens.append(h[3])
    return fps, tokens


class Session:
    """One stored session and what the gateway keeps about it in memory.

    Everything about the stored messages is derived from the manager (its view is the truth):
    their fingerprints (kept in each message's head, see ``HEAD_KEY``) and token total are a
    cache tied to the manager's current view object and length, rebuilt when the manager
    reloaded (after a failed write, or another writer). So a failed commit leaves nothing to
    undo here: what the gateway believes is stored is what the manager holds. The one thing
    of its own is the answer the client got that is not written yet (``pending``)."""

    def __init__(self, session_id: str, cm: ContextManager) -> None:
        self.session_id = session_id
        self.cm = cm
        #: the manager's view the caches below were derived from, and the caches
        self._view: object = None
        self._fps: list[str] = []
        self._tokens: list[int] = []
        self._total = 0
        self._derive()
        #: the window the gateway opened it with (the manager may use a smaller, learned one)
        self.window = cm.configured_window
        #: something left the view (offloaded or compacted): the gateway's tools can help
        self.recall_ready = any(recall_marker(m) for m in cm.view_messages)
        #: turns since the provider's usage was last fed to calibration (-1: never)
        self.since_usage = -1
        #: the gateway tools' schemas by provider (they do not change for a session)
        self.tool_schemas: dict[str, list[JSONObject]] = {}
        #: the request the upstream summarizer borrows credentials and model from
        self.context: RequestContext | None = None

        #: the upstream's answer the client has, not written yet (message, fingerprint,
        #: the input tokens the upstream reported), and since when (time.monotonic)
        self.pending: tuple[Message, str, int | None] | None = None
        self.pending_since = 0.0
        #: the conversation (lock key) this session serves
        self.key = ""
        #: what the next turn is expected to add (for the compaction prepared ahead)
        self.lookahead = Lookahead()
        #: a compaction prepared ahead that no response has reported yet
        self.unreported: CompactionRecord | None = None

    # ------------------------------------------------------------------ derived state
    def _derive(self) -> list[str]:
        """The fingerprints of the manager's history (see the class docstring)."""
        from .convert import fingerprint

        cm = self.cm
        view = cm.view
        if view is not self._view or len(self._fps) > len(view):
            stored = _stored_fingerprints(cm)
            if stored is not None:  # from the heads: the history before the boundary stays unread
                self._fps, self._tokens = stored
            else:  # read entirely, or written before the heads held the fingerprints
                history = cm.history
                self._fps = [_fingerprint_of(m, fingerprint) for m in history]
                self._tokens = [count_message(cm.counter, m) for m in history]
            self._view = view
            self._total = sum(self._tokens)
        n = len(view)
        if len(self._fps) < n:  # appended since: those messages are loaded
            history = view.history
            for i in range(len(self._fps), n):
                m = history[i]
                self._fps.append(_fingerprint_of(m, fingerprint))
                t = count_message(cm.counter, m)
                self._tokens.append(t)
                self._total += t
        return self._fps

    @property
    def fps(self) -> list[str]:
        """Fingerprints of the stored history (read-only; derived from the manager)."""
        return self._derive()

    @property
    def history_tokens(self) -> int:
        """Tokens of the conversation as the client has it (what it retracted left out)."""
        self._derive()
        tokens = self._tokens
        gone = self.cm.view.retracted
        return self._total - sum(tokens[i] for i in gone if i < len(tokens))

    @property
    def known_fps(self) -> list[str]:
        """Fingerprints of the conversation as the client last had it: the stored history
        without the messages it retracted itself, plus the answer not written yet."""
        return self.conversation()[1]

    def conversation(self) -> tuple[Sequence[int], list[str]]:
        """The history positions and fingerprints of the conversation as the client last had
        it (see :attr:`known_fps`); the answer not written yet has position -1."""
        fps = self._derive()
        gone = self.cm.view.retracted
        pending = self.pending is not None
        positions: Sequence[int]
        if gone:
            kept = [i for i in range(len(fps)) if i not in gone]
            out = [fps[i] for i in kept]
            positions = [*kept, -1] if pending else kept
        else:  # no list of every position (a long history costs one copy of pointers)
            positions, out = Positions(len(fps), pending), fps[:]
        if self.pending is not None:
            out.append(self.pending[1])
        return positions, out

    def newest_user(self, positions: Sequence[int]) -> int:
        """The index in ``positions`` (see :meth:`conversation`) of the newest user message."""
        at = self.cm.view.newest_user
        if at is None:
            return -1
        i = bisect.bisect_left(positions, at, hi=len(positions) - (self.pending is not None))
        return i if i < len(positions) and positions[i] == at else -1

    def retracted_fps(self) -> set[str]:
        """Fingerprints of the messages the client's rewrites took out."""
        fps = self._derive()
        return {fps[i] for i in self.cm.view.retracted if i < len(fps)}

    def rewrite(
        self,
        retract: Sequence[int],
        msgs: Sequence[Message],
        fps: Sequence[str],
        *,
        pending: Literal["keep", "drop", "retract"],
        note: Mapping[str, JSONLike],
        staged: bool = False,
    ) -> Staged | None:
        """The client's own rewrite: retract the history positions ``retract`` and append
        ``msgs``, in one unit (see ``ContextManager.rewrite``). The answer not written yet is
        kept (written first), dropped (the client resent it among ``msgs``) or written and
        retracted with the others (the client dropped it)."""
        if staged:
            with self.cm.staged():
                self._rewrite(retract, msgs, fps, pending, note)
            return Staged(view=self.cm.view, messages=len(self.cm.view))
        self._rewrite(retract, msgs, fps, pending, note)
        return None

    def _rewrite(
        self,
        retract: Sequence[int],
        msgs: Sequence[Message],
        fps: Sequence[str],
        pending: str,
        note: Mapping[str, JSONLike],
    ) -> None:
        held = self.pending
        retract = list(retract)
        if held is not None and pending == "drop":
            held = None
        elif held is not None and pending == "retract":
            self._append([], [])  # the answer is the client's history too: stored, retracted
            retract.append(len(self.cm.view) - 1)
            held = None
        if held is not None:
            msgs, fps = [held[0], *msgs], [held[1], *fps]
        start = len(self.cm.view)
        note = {**note, "replaced": retract, "with": [start, start + len(msgs)]}
        self.cm.rewrite(retract, self._stamped(msgs, fps, start), note=note)
        self.pending = None
        if held is not None and held[2] is not None and held[2] > 0:
            self._report_usage(held[2])

    def append(
        self, msgs: Sequence[Message], fps: Sequence[str], *, staged: bool = False
    ) -> Staged | None:
        """Write ``msgs`` (after the pending answer, if any) in one store append. ``staged``:
        applied in memory now, stored by :meth:`settle` (see ``ContextManager.staged``);
        returns what :meth:`settle` checks."""
        if staged:
            with self.cm.staged():
                self._append(msgs, fps)
            return Staged(view=self.cm.view, messages=len(self.cm.view))
        self._append(msgs, fps)
        return None

    def settle(self, staged: Staged) -> None:
        """Commit what a staged append applied (and anything staged with it). A storage
        failure is raised; so is a failed write that took the staged append along (the
        manager reloaded what is stored without it). The caller then forgets this session
        (reopened from the store): nothing here needs undoing."""
        cm = self.cm
        if cm.has_staged:
            cm.commit_staged()
        elif cm.view is not staged.view or len(cm.view) < staged.messages:
            raise StorageError(
                f"session {self.session_id}: a failed write dropped this turn's messages "
                "before they were stored; send the request again"
            )

    def _append(self, msgs: Sequence[Message], fps: Sequence[str]) -> None:
        pending = self.pending
        if pending is not None:
            msgs = [pending[0], *msgs]
            fps = [pending[1], *fps]
        if not msgs:
            return
        self.cm.add_many(self._stamped(msgs, fps, len(self.cm.view)))
        self.pending = None
        if pending is not None and pending[2] is not None and pending[2] > 0:
            self._report_usage(pending[2])

    def _stamped(self, msgs: Sequence[Message], fps: Sequence[str], start: int) -> list[Message]:
        """``msgs`` with their uuids and their fingerprint in their head (read on reopen)."""
        return [
            replace(
                m,
                uuid=message_uuid(self.session_id, start + j),
                metadata={**m.metadata, HEAD_KEY: fps[j]},
            )
            for j, m in enumerate(msgs)
        ]

    def flush(self) -> None:
        """Write the pending answer, if any."""
        if self.pending is not None:
            self.append([], [])

    def _report_usage(self, input_tokens: int) -> None:
        # calibration settles within a few calls; each report rewrites the compactor state,
        # so after the first ones feed it every 8th turn, and after any compaction
        record = self.cm.last_record
        compacted = record is not None and record.changed
        if self.since_usage < 0 or self.since_usage >= 7 or compacted or len(self.cm.view) < 12:
            self.cm.report_usage(input_tokens)
            self.since_usage = 0
        else:
            self.since_usage += 1


class Positions(Sequence[int]):
    """``0 .. n - 1``, then -1 when ``pending`` (the answer not written yet): the positions
    of a conversation nothing was retracted from, without a list of them."""

    __slots__ = ("_n", "_pending")

    def __init__(self, n: int, pending: bool) -> None:
        self._n = n
        self._pending = pending

    def __len__(self) -> int:
        return self._n + self._pending

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> list[int]: ...
    def __getitem__(self, i: int | slice) -> int | list[int]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return i if i < self._n else -1

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Positions({self._n}, pending={self._pending})"


def _fingerprint_of(m: Message, fingerprint: Any) -> str:
    """The fingerprint the gateway stamped on ``m`` (or computed from it, for a message
    written otherwise)."""
    fp = m.metadata.get(HEAD_KEY)
    return fp if isinstance(fp, str) else str(fingerprint(m))


def prepare_view(sess: Session, tools: Sequence[Mapping[str, JSON]] | None) -> Prepared:
    """Derive the view (compacting when needed) and what the gateway renders from it: each
    message with its index in the client's request when it is the client's unchanged one."""
    cm = sess.cm
    schemas = [dict(t) for t in tools or []]
    prepared = cm.prepare_view(tools=schemas or None)
    record = cm.last_record
    history = cm.view.history  # not cm.history: no copy of the whole history per request
    positions = cm.view.uuids
    # the client's conversation is the history without what its rewrites retracted:
    # history position -> index in the client's request
    gone = sorted(cm.view.retracted) if cm.view.retracted else None
    items: list[ViewItem] = []
    injected = prepared.injection.position if prepared.injection is not None else -1
    for j, m in enumerate(prepared.messages):
        if j == injected:  # the evidence injected before the newest user message
            items.append(ViewItem(m, None))
            continue
        i = positions.get(m.uuid)
        same = i is not None and history[i] is m
        if same and gone is not None and i is not None:
            i -= bisect.bisect_left(gone, i)
        items.append(ViewItem(m, i if same else None))
        if not same and not sess.recall_ready and recall_marker(m):
            sess.recall_ready = True
    return Prepared(
        items=items,
        tools=schemas,
        view_tokens=prepared.tokens,
        history_tokens=sess.history_tokens,
        record=record,
    )


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
class Staged:
    """What a staged append left in memory: the manager's view and its length (see
    :meth:`Session.settle`)."""

    view: object
    messages: int


@dataclass(frozen=True, slots=True)
class Prepared:
    items: list[ViewItem]
    tools: list[JSONObject]
    view_tokens: int
    history_tokens: int
    record: CompactionRecord | None


@dataclass(frozen=True, slots=True)
class Synced:
    session: Session
    added: int
    branched_from: str | None
    #: the staged append to commit (None: the append is stored already)
    staged: Staged | None = None
    #: stored messages the client's own rewrite took out of the conversation this turn
    retracted: int = 0


__all__ = [
    "Prepared",
    "Session",
    "Staged",
    "Synced",
    "close_session",
    "message_uuid",
    "prepare_view",
    "recall_marker",
]
