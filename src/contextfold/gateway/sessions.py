"""Map stateless client requests onto stored sessions.

A client resends its whole conversation every call. The gateway finds the stored session whose
history is a prefix of what the client sent (by message fingerprints), appends only the rest,
and when no stored session matches (the client ran its own /compact, edited a message, forked
or regenerated) it starts a *branch* session holding the client's conversation, with the branch
noted in the first message's metadata. Sessions of one conversation start share a lock, so
requests of one conversation never interleave; different conversations run in parallel.

ContextManager is synchronous: every method here that touches it runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from ..compaction.summarizers.base import Summarizer
from ..core.messages import Message
from ..core.records import CompactionRecord
from ..errors import ContextFoldError, StorageError
from ..jsontypes import JSON, JSONObject  # noqa: F401 (JSON: the annotations of prepare_view, read here)
from ..storage import ConcurrentWriteError, NewEvent
from .config import GatewayConfig
from .convert import Conversation
from .reconcile import Plan, at_a_cut, plan
from .session import (
    Prepared,
    Session,
    Staged,
    Synced,
    close_session,
    message_uuid,
    prepare_view,
)
from .sessions_keys import SESSION_HEADER, client_identity, conversation_key, session_key
from .stores import LEARNED, check_store, is_database_url, open_manager, open_shared_store

if TYPE_CHECKING:
    from .summarize import RequestContext

log = logging.getLogger("contextfold.gateway")

#: how many times a request is reconciled again with the store when another writer (a
#: second gateway replica) moved its conversation on meanwhile
RESYNCS = 4


class SessionRegistry:
    """Open sessions (LRU), their locks and the learned context limits."""

    def __init__(
        self,
        config: GatewayConfig,
        *,
        url_for: Callable[[str], str] | None = None,
        on_compaction: Callable[[str, CompactionRecord], None] | None = None,
    ) -> None:
        self.config = config
        #: upstream path -> URL, for the upstream summarizer
        self._url_for = url_for
        self.on_compaction = on_compaction
        self._open: OrderedDict[str, Session] = OrderedDict()
        self._families: dict[str, list[str]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._mutex = threading.Lock()
        #: sessions with an answer not written yet, by session id
        self._pending: dict[str, Session] = {}
        #: Opening a session and its first append create rows in the workspace's shared
        #: session index, which the file store does not make safe for concurrent first writers
        #: (storage issue 8): the gateway's threads take turns for those. Later appends and
        #: compaction run in parallel.
        self.store_lock = threading.Lock()
        #: model -> context limit learned from an upstream overflow error
        self.learned: dict[str, int] = {}
        #: the one store of every session (a PostgreSQL store is shared with other replicas)
        self.store = open_shared_store(config.store)

    # ------------------------------------------------------------------ locks
    def lock(self, key: str) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            if len(self._locks) > 4 * self.config.max_open_sessions:
                for k in [k for k, v in self._locks.items() if not v.locked()]:
                    del self._locks[k]
            lock = self._locks[key] = asyncio.Lock()
        return lock

    # ------------------------------------------------------------------ opening
    def window_for(self, model: str) -> int:
        window = self.config.window_for(model)
        learned = self.learned.get(model)
        return min(window, learned) if learned else window

    def learn(self, model: str, window: int) -> None:
        """Remember a context limit an upstream stated for ``model``, here and in the store
        (other replicas open new sessions of the model below it too)."""
        self._refresh_learned(model)
        known = self.learned.get(model)
        self.learned[model] = min(window, known or window)
        try:
            with self.store.transaction() as tx:
                tx.put_doc(LEARNED, model, {"window": self.learned[model]})
        except ContextFoldError as exc:
            log.info(json.dumps({"event": "learned_not_stored", "model": model, "why": str(exc)}))

    def _refresh_learned(self, model: str) -> None:
        try:
            doc = self.store.get_doc(LEARNED, model)
        except ContextFoldError:
            return
        value = doc.get("window") if doc else None
        if isinstance(value, int) and value > 0:
            known = self.learned.get(model)
            self.learned[model] = min(value, known or value)

    def _open_session(self, session_id: str, model: str) -> Session:
        self._refresh_learned(model)  # another replica may have learned a limit
        window = self.window_for(model)
        summarizer: Summarizer | None = None
        context: RequestContext | None = None
        if self.config.summarizer == "upstream" and self._url_for is not None:
            from .summarize import RequestContext, UpstreamChatModel, upstream_summarizer

            context = RequestContext(model=model)
            chat = UpstreamChatModel(self._url_for, context, self.config.upstream_timeout)
            summarizer = upstream_summarizer(chat, window)
        with self.store_lock:
            cm = open_manager(self.config, self.store, session_id, window, summarizer)
        if self.on_compaction is not None:
            cm.on_compaction = lambda rec, sid=session_id: self.on_compaction(sid, rec)
        sess = Session(session_id, cm)
        sess.context = context
        return sess

    def get(self, session_id: str, model: str) -> Session:
        with self._mutex:
            sess = self._open.get(session_id)
            if sess is not None:
                self._open.move_to_end(session_id)
        # another replica may have written to it since: that is found when this one writes
        # (the store checks the writer's head) and the session is reopened then (see settle)
        if sess is not None and sess.window != self.window_for(model):
            sess.flush()
            self.written(sess)
            close_session(sess)
            sess = None  # a smaller limit was learned: reopen with it
        if sess is None:
            sess = self._open_session(session_id, model)
            evicted: list[Session] = []
            with self._mutex:
                self._open[session_id] = sess
                excess = len(self._open) - self.config.max_open_sessions
                if excess > 0:
                    # least recently used first; a session serving a request or holding an
                    # unwritten answer stays open
                    evicted = [
                        s for s in self._open.values() if s.pending is None and not self._busy(s)
                    ][:excess]
                    for s in evicted:
                        del self._open[s.session_id]
            for s in evicted:
                close_session(s)
        return sess

    def _busy(self, sess: Session) -> bool:
        lock = self._locks.get(sess.key) if sess.key else None
        return lock is not None and lock.locked()

    def close_all(self) -> None:
        """Close every open manager (at shutdown, after the pending answers were written)."""
        with self._mutex:
            sessions = list(self._open.values())
            self._open.clear()
        for sess in sessions:
            close_session(sess)
        self.store.close()

    def drop(self, session_id: str) -> None:
        """Forget an open session (reopened from the store when next needed). An answer it
        had not written is given up: the client's next request resends it."""
        with self._mutex:
            sess = self._open.pop(session_id, None)
            self._pending.pop(session_id, None)
        if sess is not None:
            sess.pending = None
            close_session(sess)

    def _stored(self, session_id: str, model: str) -> bool:
        """Whether the store holds ``session_id`` (one query, no manager opened)."""
        return self.store.head(session_id) > 0

    def _family(self, base: str, model: str) -> list[str]:
        family = self._families.get(base)
        if family is None:
            # after a restart: the base session, then its branches until the first empty one
            family = [base]
            n = 1
            while True:
                sid = f"{base}.b{n}"
                if not self._stored(sid, model):
                    break
                family.append(sid)
                n += 1
            if len(self._families) > 16 * self.config.max_open_sessions:
                self._families.clear()  # forgotten families are found again by probing
            self._families[base] = family
        return family

    # ------------------------------------------------------------------ syncing
    def sync(self, base: str, conv: Conversation, model: str, *, stage: bool = False) -> Synced:
        """Find or create the session for ``conv`` and append what it does not have yet.
        ``stage``: an append to a session already stored is only applied in memory; the
        caller commits it with :meth:`settle` (``Synced.staged``) before anything of the turn
        reaches the client, holding the conversation's lock until then.

        Another writer (a second gateway replica) may have moved the conversation on since
        this one read it: the conversation is reopened from the store and synced again, up to
        :data:`RESYNCS` times. On any other storage failure the conversation's open sessions
        are forgotten (reopened from the store when next needed: exactly what is stored) and
        the error is raised."""
        for attempt in range(RESYNCS + 1):
            try:
                return self._sync(base, conv, model, stage)
            except ConcurrentWriteError as exc:
                self._resynced(base, exc, attempt)
            except StorageError:
                self.forget(base)
                raise
        raise AssertionError("unreachable")  # pragma: no cover - _resynced raises at the end

    def _resynced(self, base: str, exc: ConcurrentWriteError, attempt: int) -> None:
        log.info(json.dumps({"event": "resync", "conversation": base, "why": str(exc)}))
        self.forget(base)
        if attempt >= RESYNCS:
            raise exc

    def settle(
        self, sess: Session, staged: Staged, base: str, conv: Conversation, model: str
    ) -> Session | None:
        """Commit a staged append (see :meth:`sync`). When another replica wrote to the
        session since this one read it, the conversation is reopened from the store and what
        the store lacks is appended there: returns that session (None: ``sess`` holds the
        turn). On any other failure the conversation's sessions are forgotten (reopened from
        the store when next needed) and the error is raised: the client's next request, which
        carries everything again, is reconciled with exactly what is stored."""
        try:
            sess.settle(staged)
        except ConcurrentWriteError as exc:
            self._resynced(base, exc, 0)
            return self.sync(base, conv, model).session
        except BaseException:
            self.forget(base)
            raise
        return None

    def forget(self, base: str) -> None:
        """Drop the open sessions of a conversation (reopened from the store when next
        needed)."""
        family = self._families.pop(base, [])
        with self._mutex:
            family += [sid for sid, s in self._open.items() if s.key == base and sid not in family]
        for sid in family:
            self.drop(sid)

    def _sync(self, base: str, conv: Conversation, model: str, stage: bool) -> Synced:
        """Reconcile ``conv`` with the conversation's sessions by content (see
        :mod:`.reconcile`): append to the session it continues, or record the client's own
        rewrite in the session it rewrote, or - a real fork only - start a branch."""
        family = self._family(base, model)
        fps = conv.fingerprints
        sessions = [self.get(sid, model) for sid in reversed(family)]
        best: tuple[tuple[int, int, int, bool], Session, Plan, Sequence[int]] | None = None
        for sess in sessions:
            sess.key = base
            positions, known = sess.conversation()
            p = plan(
                known,
                fps,
                newest_user=sess.newest_user(positions),
                retracted=sess.retracted_fps() if sess.cm.view.retracted else frozenset(),
            )
            # an append wins; otherwise the session sharing the most with the request, and of
            # those the reading that takes out the fewest stored messages (a rewrite on a tie);
            # an empty (new) session only when nothing else matches
            if p.kind == "append":
                score = (2, p.kept, 0, True) if p.kept else (0, 0, 0, True)
            else:
                score = (1, p.kept, -len(p.dropped), p.kind == "rewrite")
            if best is None or score > best[0]:
                best = (score, sess, p, positions)
        assert best is not None  # the family has its base session at least
        _, chosen, p, positions = best
        for sess in sessions:  # answers given on another branch are written now
            if (sess is not chosen or p.kind == "fork") and sess.pending is not None:
                sess.flush()
                self.written(sess)
        if p.kind == "append":
            return self._append(chosen, conv, p.kept, stage)
        if p.kind == "rewrite":
            return self._rewrite(chosen, conv, p, positions, stage)
        return self._branch(base, family, conv, chosen, p.common, model)

    def _append(self, sess: Session, conv: Conversation, kept: int, stage: bool) -> Synced:
        new = conv.neutral[kept:]
        with self.store_lock if not sess.fps else contextlib.nullcontext():
            staged = sess.append(new, conv.fingerprints[kept:], staged=stage)
        self.written(sess)
        return Synced(session=sess, added=len(new), branched_from=None, staged=staged)

    def _rewrite(
        self, sess: Session, conv: Conversation, p: Plan, positions: Sequence[int], stage: bool
    ) -> Synced:
        """The client rewrote its conversation itself: the session continues, the messages
        it dropped or replaced are retracted (kept in the history) and the rest appended."""
        fps = conv.fingerprints
        p = at_a_cut(p, conv)
        retract = [positions[i] for i in p.dropped if positions[i] >= 0]
        mode: Literal["keep", "drop", "retract"] = "keep"
        if sess.pending is not None:
            last = len(positions) - 1
            if last in p.matched:
                mode = "keep"
            elif sess.pending[1] in set(fps[p.kept :]):
                mode = "drop"  # resent after rewritten messages: stored with them
            else:
                mode = "retract"
        note: dict[str, Any] = {
            "by": "client",
            "reason": "the client rewrote its conversation (dropped, summarized, moved or "
            "refreshed messages)",
            "replaced": retract,
            "kept": p.kept,
        }
        new = conv.neutral[p.kept :]
        staged = sess.rewrite(retract, new, fps[p.kept :], pending=mode, note=note, staged=stage)
        self.written(sess)
        return Synced(
            session=sess,
            added=len(new),
            branched_from=None,
            staged=staged,
            retracted=len(retract),
        )

    def _branch(
        self,
        base: str,
        family: list[str],
        conv: Conversation,
        parent: Session,
        common: int,
        model: str,
    ) -> Synced:
        """A real fork: the same past continued another way starts a branch session, which
        shares the parent's stored history up to the fork (see :mod:`..storage.branches`)."""
        first_sess = self.get(family[0], model)
        empty = not first_sess.fps and first_sess.pending is None
        sid = family[0] if empty else f"{base}.b{len(family)}"
        fps = conv.fingerprints
        note: JSONObject = {
            "branch_of": parent.session_id,
            "diverged_at": common,
            "reason": (
                f"the client continued the conversation differently from message {common} on"
                if common < len(parent.fps)
                else "the client resent a shorter history"
            ),
        }
        at = None if empty else fork_point(parent, common)
        if at is not None:  # the shared past is the parent's: only the branch's own part is new
            with self.store_lock, self.store.transaction() as txn:
                agent = parent.cm.agent_id
                txn.branch(sid, parent_id=parent.session_id, at=at, agent_id=agent)
                txn.append(
                    sid, [NewEvent(kind="branch", data=note)], expected_seq=at, agent_id=agent
                )
            sess = self.get(sid, model)
            sess.key = base
            with self.store_lock:
                sess.append(conv.neutral[common:], fps[common:])
            family.append(sid)
            return Synced(session=sess, added=len(fps) - common, branched_from=parent.session_id)
        sess = first_sess if empty else self.get(sid, model)
        sess.key = base
        if sess.fps:
            # another replica created this branch since the family was read: read it again
            raise ConcurrentWriteError(sid, 0, len(sess.fps))
        first = conv.neutral[0]
        meta = dict(first.metadata)
        meta["cf_gateway"] = note
        msgs = [replace(first, metadata=meta), *conv.neutral[1:]]
        with self.store_lock:
            sess.append(msgs, fps)
        if sid not in family:
            family.append(sid)
        return Synced(session=sess, added=len(msgs), branched_from=parent.session_id)

    # ------------------------------------------------------------------ views
    prepare = staticmethod(prepare_view)

    def hold(self, sess: Session, message: Message, input_tokens: int | None) -> None:
        """Keep the answer pending (written with the session's next append or by
        :meth:`flush_due`); call with the conversation's lock held."""
        from .convert import fingerprint

        try:
            sess.flush()  # never two pending answers (a previous write failed)
        except ContextFoldError:
            # forgotten (reopened from the store when next needed): both answers are resent
            # by the client with its next request and stored with it then
            self.failed(sess)
            return
        sess.pending = (message, fingerprint(message), input_tokens)
        sess.pending_since = time.monotonic()
        with self._mutex:
            self._pending[sess.session_id] = sess

    def record(self, sess: Session, message: Message, input_tokens: int | None) -> None:
        """Write the answer now (on a failure the session is forgotten: reopened from the
        store when next needed, and the client's next request resends the answer)."""
        self.hold(sess, message, input_tokens)
        if sess.pending is None:
            raise StorageError(f"session {sess.session_id}: the answer was not stored")
        try:
            sess.flush()
        except BaseException:
            self.failed(sess)
            raise
        self.written(sess)

    def failed(self, sess: Session) -> None:
        """After a failed write: forget the session and the rest of its conversation (the
        manager may hold what the store does not); the next request reopens them from the
        store, exactly as stored."""
        sess.pending = None
        if sess.key:
            self.forget(sess.key)
        else:
            self.drop(sess.session_id)

    def written(self, sess: Session) -> None:
        if sess.pending is None:
            with self._mutex:
                self._pending.pop(sess.session_id, None)

    def due(self, older_than: float) -> list[Session]:
        """Sessions whose pending answer waited at least ``older_than`` seconds."""
        now = time.monotonic()
        with self._mutex:
            return [
                s
                for s in self._pending.values()
                if s.pending is not None and now - s.pending_since >= older_than
            ]


__all__ = [
    "SESSION_HEADER",
    "Prepared",
    "Session",
    "SessionRegistry",
    "Synced",
    "check_store",
    "client_identity",
    "conversation_key",
    "is_database_url",
    "message_uuid",
    "open_shared_store",
    "session_key",
]


def fork_point(parent: Session, common: int) -> int | None:
    """The event seq up to which a branch continuing the first ``common`` messages of
    ``parent``'s conversation shares the parent's stored history; None when it cannot (nothing
    in common, an answer not stored yet, or those messages are not the parent's first stored
    ones: the client had rewritten them). The parent's compactions of that past come with it."""
    if common <= 0 or parent.pending is not None:
        return None
    positions, _ = parent.conversation()
    if list(positions[:common]) != list(range(common)):
        return None
    store = parent.cm.store
    heads = store.read_heads(parent.session_id, kinds=["message"])
    if len(heads) < common:
        return None
    return heads[common].seq if common < len(heads) else store.head(parent.session_id)
