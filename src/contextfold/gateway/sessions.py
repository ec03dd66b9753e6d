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
import hashlib
import inspect
import json
import logging
import threading
import uuid as uuidlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, InvalidMessageError, StorageError
from ..manager import ContextManager
from ..messages import Message
from ..records import CompactionRecord
from ..summarizers.base import Summarizer
from ..tokens import count_message
from .config import GatewayConfig
from .convert import Conversation, ViewItem

if TYPE_CHECKING:
    from .summarize import RequestContext

log = logging.getLogger("contextfold.gateway")

DB_SCHEMES = ("postgresql://", "postgres://")


def is_database_url(store: str) -> bool:
    return store.startswith(DB_SCHEMES)


def check_store(store: str) -> None:
    """Fail early, with a clear message, for a store this ContextManager cannot open."""
    if is_database_url(store) and "store" not in inspect.signature(ContextManager).parameters:
        raise ConfigError(
            "a PostgreSQL store needs the storage layer that accepts "
            "ContextManager(store='postgresql://...'), which this installation does not have "
            "yet; pass a workspace folder to --store"
        )


def open_manager(
    config: GatewayConfig, session_id: str, window: int, summarizer: Summarizer | None
) -> ContextManager:
    kwargs: dict[str, Any] = {
        "session_id": session_id,
        "context_window": window,
        "preset": config.preset,
        "summarizer": summarizer,
        "agent_id": "gateway",
    }
    if is_database_url(config.store):
        check_store(config.store)
        return ContextManager(store=config.store, **kwargs)  # type: ignore[call-arg]
    return ContextManager(config.store, **kwargs)


def client_identity(headers: Mapping[str, str]) -> str:
    """A hash of the client's credential (never the credential itself)."""
    secret = headers.get("authorization") or headers.get("x-api-key") or ""
    return hashlib.sha256(("contextfold-gateway|" + secret).encode()).hexdigest()[:16]


def conversation_key(material: str, identity: str) -> str:
    digest = hashlib.sha256(f"{identity}|{material}".encode()).hexdigest()[:24]
    return f"gw-{digest}"


def message_uuid(session_id: str, position: int) -> str:
    """The uuid ContextManager gives a dict at ``position``: stable across replays."""
    return str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"contextfold:{session_id}:{position}"))


class Session:
    """One stored session and what the gateway keeps about it in memory."""

    def __init__(self, session_id: str, cm: ContextManager) -> None:
        from .convert import fingerprint

        self.session_id = session_id
        self.cm = cm
        history = cm.history
        self.fps = [fingerprint(m) for m in history]
        self.index_of = {m.uuid: i for i, m in enumerate(history)}
        self.history_tokens = sum(count_message(cm.counter, m) for m in history)
        #: the window the gateway opened it with (the manager may use a smaller, learned one)
        self.window = cm.configured_window
        #: something left the view (offloaded or compacted): the gateway's tools can help
        self.recall_ready = any(_recall_marker(m) for m in cm.view_messages)
        #: turns since the provider's usage was last fed to calibration (-1: never)
        self.since_usage = -1
        #: the request the upstream summarizer borrows credentials and model from
        self.context: RequestContext | None = None

    def append(self, msgs: Sequence[Message], fps: Sequence[str]) -> None:
        start = len(self.fps)
        stamped = [
            replace(m, uuid=message_uuid(self.session_id, start + j)) for j, m in enumerate(msgs)
        ]
        added = self.cm.add_many(stamped)
        for j, m in enumerate(added):
            self.index_of[m.uuid] = start + j
            self.history_tokens += count_message(self.cm.counter, m)
        self.fps.extend(fps)


def _recall_marker(m: Message) -> bool:
    meta = m.metadata
    return bool(meta.get("cf_offloaded") or meta.get("cf_replaced") or meta.get("cf_kind"))


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


class SessionRegistry:
    """Open sessions (LRU), their locks and the learned context limits."""

    def __init__(
        self, config: GatewayConfig, *, url_for: Any = None, on_compaction: Any = None
    ) -> None:
        self.config = config
        #: upstream path -> URL, for the upstream summarizer
        self._url_for = url_for
        self.on_compaction = on_compaction
        self._open: OrderedDict[str, Session] = OrderedDict()
        self._families: dict[str, list[str]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._mutex = threading.Lock()
        #: Opening a session and its first append create rows in the workspace's shared
        #: session index, which the file store does not make safe for concurrent first writers
        #: (storage issue 8): the gateway's threads take turns for those. Later appends and
        #: compaction run in parallel.
        self.store_lock = threading.Lock()
        #: model -> context limit learned from an upstream overflow error
        self.learned: dict[str, int] = {}

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

    def _open_session(self, session_id: str, model: str) -> Session:
        window = self.window_for(model)
        summarizer: Summarizer | None = None
        context: RequestContext | None = None
        if self.config.summarizer == "upstream" and self._url_for is not None:
            from .summarize import RequestContext, UpstreamChatModel, upstream_summarizer

            context = RequestContext(model=model)
            chat = UpstreamChatModel(self._url_for, context, self.config.upstream_timeout)
            summarizer = upstream_summarizer(chat, window)
        with self.store_lock:
            cm = open_manager(self.config, session_id, window, summarizer)
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
        if sess is not None and sess.window != self.window_for(model):
            sess = None  # a smaller limit was learned: reopen with it
        if sess is None:
            sess = self._open_session(session_id, model)
            with self._mutex:
                self._open[session_id] = sess
                while len(self._open) > self.config.max_open_sessions:
                    self._open.popitem(last=False)
        return sess

    def drop(self, session_id: str) -> None:
        with self._mutex:
            self._open.pop(session_id, None)

    def _family(self, base: str, model: str) -> list[str]:
        family = self._families.get(base)
        if family is None:
            # after a restart: the base session, then its branches until the first empty one
            family = [base]
            n = 1
            while True:
                sid = f"{base}.b{n}"
                if not self.get(sid, model).fps:
                    self.drop(sid)
                    break
                family.append(sid)
                n += 1
            if len(self._families) > 16 * self.config.max_open_sessions:
                self._families.clear()  # forgotten families are found again by probing
            self._families[base] = family
        return family

    # ------------------------------------------------------------------ syncing
    def sync(self, base: str, conv: Conversation, model: str) -> Synced:
        """Find or create the session for ``conv`` and append what it does not have yet."""
        try:
            return self._sync(base, conv, model)
        except StorageError as exc:
            # another writer (a second gateway replica) moved the session on: reopen, retry once
            log.info(json.dumps({"event": "resync", "conversation": base, "why": str(exc)}))
            for sid in self._families.get(base, []):
                self.drop(sid)
            self._families.pop(base, None)
            return self._sync(base, conv, model)

    def _sync(self, base: str, conv: Conversation, model: str) -> Synced:
        family = self._family(base, model)
        fps = conv.fingerprints
        best: Session | None = None
        best_common = -1
        parent: Session | None = None
        for sid in reversed(family):
            sess = self.get(sid, model)
            m = len(sess.fps)
            if m <= len(fps) and sess.fps == fps[:m]:
                if best is None or m > len(best.fps):
                    best = sess
                continue
            common = _common_prefix(sess.fps, fps)
            if common > best_common:
                parent, best_common = sess, common
        if best is not None and (best.fps or parent is None):
            new = conv.neutral[len(best.fps) :]
            if new:
                with self.store_lock if not best.fps else contextlib.nullcontext():
                    best.append(new, fps[len(best.fps) :])
            return Synced(session=best, added=len(new), branched_from=None)
        assert parent is not None
        sid = family[0] if best is not None else f"{base}.b{len(family)}"
        sess = self.get(sid, model)
        if sess.fps:
            raise InvalidMessageError(f"internal: branch session {sid} is not empty")
        note = {
            "branch_of": parent.session_id,
            "diverged_at": best_common,
            "reason": (
                f"the client rewrote its history from message {best_common} on"
                if best_common < len(parent.fps)
                else "the client resent a shorter history"
            ),
        }
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
    @staticmethod
    def prepare(sess: Session, tools: Sequence[Mapping[str, Any]] | None) -> Prepared:
        cm = sess.cm
        schemas = [dict(t) for t in tools or []]
        dicts = cm.prepare(tools=schemas or None)
        record = cm.last_record
        view = cm.view_messages
        history = cm.history
        items: list[ViewItem] = []
        for m in view:
            i = sess.index_of.get(m.uuid)
            same = i is not None and history[i] is m
            items.append(ViewItem(m, i if same else None))
            if not same and not sess.recall_ready and _recall_marker(m):
                sess.recall_ready = True
        if len(dicts) == len(view) + 1:  # evidence injected before the newest user message
            pos = next(
                (j for j in range(len(view) - 1, -1, -1) if view[j].role == "user"), len(view)
            )
            inject = dicts[pos]
            items.insert(
                pos,
                ViewItem(
                    Message(
                        role="user",
                        content=inject.get("content"),
                        metadata={"cf_kind": "injection"},
                    ),
                    None,
                ),
            )
        return Prepared(
            items=items,
            tools=schemas,
            view_tokens=cm.view_tokens,
            history_tokens=sess.history_tokens,
            record=record,
        )

    def record(self, sess: Session, message: Message, input_tokens: int | None) -> None:
        from .convert import fingerprint

        sess.append([message], [fingerprint(message)])
        if input_tokens is None or input_tokens <= 0:
            return
        # calibration settles within a few calls; each report rewrites the compactor state,
        # so after the first ones feed it every 8th turn, and after any compaction
        record = sess.cm.last_record
        compacted = record is not None and record.changed
        if sess.since_usage < 0 or sess.since_usage >= 7 or compacted or len(sess.fps) < 12:
            sess.cm.report_usage(input_tokens)
            sess.since_usage = 0
        else:
            sess.since_usage += 1


def _common_prefix(a: Sequence[str], b: Sequence[str]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


__all__ = [
    "Prepared",
    "Session",
    "SessionRegistry",
    "Synced",
    "check_store",
    "client_identity",
    "conversation_key",
    "is_database_url",
    "message_uuid",
]
