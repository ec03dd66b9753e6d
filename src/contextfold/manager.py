"""ContextManager: the facade between an agent's full history and each model call.

The manager keeps the public API, the session lock and the units of work; the session
itself is a :class:`~contextfold.engine.context.SessionContext` and the work is done by the
engine's modules (opening, ingest, prepare, overflow), which receive the context.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar, overload

from . import calling, client_rewrite, telemetry
from .compactors.progressive import ProgressiveCompactor
from .compactors.stages import Stage
from .config import ContextConfig, resolve_preset
from .engine import ingest, opening
from .engine import prepare as preparing
from .engine.async_calls import AsyncCalls
from .engine.calls import SessionCalls
from .engine.context import SessionContext
from .engine.ingest import MessageInput
from .engine.prepare import PreparedView, ToolSchemas
from .errors import ConfigError, ContextFoldError, StorageError
from .limits import LearnedWindow
from .memory_admin import MemoryCalls
from .messages import Message
from .offload import OffloadStore
from .paths import Workspace, check_session_id
from .records import CompactionRecord, StoreRecordStore
from .recovery import Recovery
from .responses import response_message
from .sessions.log import SessionLog
from .state import SessionState
from .storage import Store
from .storage.session import SessionStore
from .summarizers.base import Summarizer
from .surface import AnthropicView, OpenAIView, ViewMessages
from .tokens import Calibration, TokenCounter, get_counter
from .view import HistoryView
from .wire import from_anthropic

T = TypeVar("T")
V = TypeVar("V")
OnCompaction = Callable[[CompactionRecord], None]
Format = Literal["openai", "anthropic"]
DEFAULT_WORKSPACE = opening.DEFAULT_WORKSPACE


class _Part(Generic[V]):
    """A part of the open session, read (and set) on the manager as an attribute."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> _Part[V]: ...
    @overload
    def __get__(self, obj: ContextManager, owner: type) -> V: ...
    def __get__(self, obj: ContextManager | None, owner: type) -> _Part[V] | V:
        if obj is None:
            return self
        value: V = getattr(obj._ctx, self.name)
        return value

    def __set__(self, obj: ContextManager, value: V) -> None:
        setattr(obj._ctx, self.name, value)


class ContextManager(MemoryCalls, SessionCalls, AsyncCalls):
    """Keep an agent inside its context window without losing what it learned.

    ``add`` appends to the full, persisted history; ``prepare`` derives the view to send now
    (compacting when needed); nothing is ever removed from the history.

    Persistence goes through a :class:`~contextfold.storage.Store`: ``workspace=`` a folder
    (embedded SQLite + blob files, the default ``./.contextfold``; a folder written by an older
    release is migrated on first open), or ``store=`` a Store or a URL (``memory://``,
    ``postgresql://...``; ``$CONTEXTFOLD_STORE`` when neither is given). Each public call is
    one atomic unit: it is stored entirely or not at all (then :class:`StorageError` is raised,
    the manager reloads what is stored, and the same call can be retried). When the store
    cannot even be read at that moment, the manager reloads before its next call instead
    (:attr:`in_sync` is False until then): nothing is served from what was not stored.

    Thread-safety: every public method holds the manager's lock, so one manager may be shared
    by threads (calls are serialized; ``call``/``acall`` do not hold it while the model runs).
    Two managers (threads, processes or hosts) on one session never corrupt it: the second
    writer to fall behind gets :class:`~contextfold.storage.ConcurrentWriteError` and reloads;
    retrying continues from the latest log. ``close()`` (or ``with``) releases the store the
    manager opened.
    """

    _ctx: SessionContext
    config: _Part[ContextConfig] = _Part()
    session_id: _Part[str] = _Part()
    agent_id: _Part[str] = _Part()
    store: _Part[Store] = _Part()
    counter: _Part[TokenCounter] = _Part()
    summarizer: _Part[Summarizer | None] = _Part()
    share_memory: _Part[bool] = _Part()
    configured_window: _Part[int] = _Part()
    #: The window in use: ``context_window``, or lower once a provider's overflow error stated
    #: a smaller one (see ``learned_window``).
    window: _Part[int] = _Part()
    learned_window: _Part[LearnedWindow | None] = _Part()
    session: _Part[SessionStore] = _Part()
    log: _Part[SessionLog] = _Part()
    calibration: _Part[Calibration] = _Part()
    offload: _Part[OffloadStore] = _Part()
    eviction_store: _Part[OffloadStore] = _Part()
    record_store: _Part[StoreRecordStore] = _Part()
    view: _Part[HistoryView] = _Part()
    compactor: _Part[ProgressiveCompactor] = _Part()
    recovery: _Part[Recovery] = _Part()
    session_state: _Part[SessionState] = _Part()
    #: The last compaction that changed the view (None until one did).
    last_record: _Part[CompactionRecord | None] = _Part()
    #: The record of the last prepare()/compact(), including "no compaction needed".
    last_prepare: _Part[CompactionRecord | None] = _Part()

    def __init__(
        self,
        workspace: str | Path | None = None,
        session_id: str = "default",
        context_window: int = 128_000,
        *,
        store: Store | str | Path | None = None,
        preset: str | ContextConfig | None = None,
        config: ContextConfig | None = None,
        summarizer: Summarizer | None = None,
        token_counter: str | TokenCounter | None = None,
        agent_id: str = "default",
        on_compaction: OnCompaction | None = None,
        fact_extractor: object = None,
        share_memory: bool = False,
        stages: Sequence[Stage] | None = None,
    ) -> None:
        if not isinstance(context_window, int) or context_window <= 0:
            raise ConfigError(f"context_window must be a positive integer, got {context_window!r}")
        if config is not None and preset is not None:
            raise ConfigError("pass either preset or config, not both")
        if workspace is not None and store is not None:
            raise ConfigError("pass either workspace (a folder) or store, not both")
        cfg = config or resolve_preset(preset)
        sid, aid = check_session_id(session_id), check_session_id(agent_id)
        counter = get_counter(token_counter if token_counter is not None else cfg.token_counter)
        self.on_compaction = on_compaction
        self._lock = threading.RLock()
        self._alocks: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}
        opened, self._owns_store = opening.open_session_store(workspace, store)
        self._ctx = opening.build_context(
            config=cfg,
            store=opened,
            session_id=sid,
            agent_id=aid,
            units=self,
            counter=counter,
            summarizer=summarizer,
            share_memory=share_memory,
            window=context_window,
            fact_extractor=fact_extractor,
            stages=stages,
        )
        #: The workspace folder (None for a store that is not a folder).
        self.ws: Workspace | None = self._ctx.workspace
        self._problems: list[str] = []
        #: a failed write could not reload what is stored (the store was unreachable): the
        #: in-memory state is not used again before the next call reloads it
        self._stale = False
        #: staged writes a failed write dropped (commit_staged then says so)
        self._dropped_staged = False
        opening.reset(self._ctx)

    @property
    def context(self) -> SessionContext:
        """The open session the engine works on (its view, log, stores, window ...)."""
        return self._ctx

    # ------------------------------------------------------------------ units of work
    @property
    def lock(self) -> threading.RLock:
        """The session's lock (re-entrant): every public call holds it."""
        return self._lock

    def message_at(self, index: int) -> Message:
        """History message ``index`` without loading the rest of a lazily reopened history."""
        with self._lock:
            self._fresh()
            return self._ctx.message_at(index)

    @contextlib.contextmanager
    def unit(self) -> Iterator[None]:
        """One atomic unit: everything stored inside commits together, or nothing does. On
        any failure inside (storage or not) the manager reloads what is stored, then the error
        is raised: its in-memory state never holds what was not stored."""
        with self._lock:
            self._fresh()
            try:
                with self._ctx.session.unit():
                    yield
            except BaseException:
                self.reload_after_failure()
                raise

    _unit = unit

    @contextlib.contextmanager
    def staged(self) -> Iterator[None]:
        """Writes inside (``add_many``, ``report_usage`` ...) are applied in memory at once but
        committed only by :meth:`commit_staged` - or first thing by the next write that commits
        (a compaction in ``prepare``), in one transaction with it. The view can be derived
        from them before they are stored (the gateway forwards it while the commit runs).
        Until then the caller keeps other writers of the session away. An error inside leaves
        the manager as it was."""
        with self._lock:
            self._fresh()
            self._dropped_staged = False
            size = len(self._ctx.view)
            try:
                with self._ctx.session.staging():
                    yield
            except BaseException as exc:
                if isinstance(exc, StorageError) or len(self._ctx.view) != size:
                    self.reload_after_failure()
                raise

    @property
    def has_staged(self) -> bool:
        """Whether writes made under :meth:`staged` still wait for :meth:`commit_staged`."""
        return self._ctx.session.has_staged

    def commit_staged(self) -> None:
        """Commit what :meth:`staged` applied. On a storage failure the manager reloads what
        is stored (as before the staged writes) and the error is raised."""
        with self._lock:
            if self._dropped_staged:  # a failed write dropped them: never report them stored
                self._dropped_staged = False
                self._fresh()
                raise StorageError(
                    f"session {self.session_id!r}: the staged writes were dropped by a failed "
                    "write before they could be committed; nothing of them is stored"
                )
            try:
                self._ctx.session.commit_staged()
            except BaseException:
                self.reload_after_failure()
                raise

    def reload_after_failure(self) -> None:
        """Reload what is stored after a failed write (on the next call when even that fails)."""
        self._dropped_staged = self._dropped_staged or self._ctx.session.has_staged
        self._stale = True
        try:
            opening.reset(self._ctx)
        except ContextFoldError as exc:  # the store is unreadable too: reload on next use
            self._problems.append(f"reloading after a failed write failed: {exc}")
        else:
            self._stale = False

    _reload_after_failure = reload_after_failure

    def _fresh(self) -> None:
        """Reload first if a failed write could not (StorageError while the store is still
        unreachable: nothing is served from a state that may hold what was not stored)."""
        if self._stale:
            opening.reset(self._ctx)
            self._stale = False

    @property
    def in_sync(self) -> bool:
        """False after a failed write that could not reload the session (the store was
        unreachable): the next call (or :meth:`refresh`) reloads it from the store first."""
        return not self._stale

    @property
    def stored_length(self) -> int:
        """Messages of this session in the store as this manager last read or wrote it (the
        history length once it is in sync; staged messages not committed yet excluded)."""
        with self._lock:
            self._fresh()
            return len(self._ctx.view) - len(self._ctx.session.pending(["message"]))

    def refresh(self) -> None:
        """Reload the session from the store (after another writer appended to it, or after
        a failed write while the store was unreachable)."""
        with self._lock:
            self._stale = True
            opening.reset(self._ctx)
            self._stale = False

    def close(self) -> None:
        """Release the store this manager opened (a store passed in is left open)."""
        with self._lock:
            if self._owns_store:
                self._ctx.store.close()

    def __enter__(self) -> ContextManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ adding
    @property
    def history(self) -> list[Message]:
        """The full history (a copy of the list; messages are immutable). After a reopen the
        messages before the compaction boundary are read from the store on first use."""
        with self._lock:
            self._fresh()
            return list(self._ctx.view.history)

    def _history(self) -> list[Message]:
        return self.history

    def add(self, message: MessageInput) -> Message:
        """Append one message (OpenAI dict or Message). Validated before anything is written.

        A dict with Anthropic ``tool_use`` (assistant) or ``tool_result`` (user) blocks is
        converted; a user turn with several tool results becomes several tool messages, and the
        last one is returned (``add_many`` returns them all)."""
        return self.add_many([message])[-1]

    def add_many(self, messages: Iterable[MessageInput]) -> list[Message]:
        """Append several messages at once: all or nothing (validated first, then stored in one
        unit)."""
        with self._lock:
            self._fresh()
            parsed = ingest.parse(self._ctx, messages)
            if not parsed:
                return []
            tokens = ingest.check(self._ctx, parsed)
            with self.unit():
                ingest.append(self._ctx, parsed, tokens)
            return parsed

    def rewrite(
        self,
        retract: Sequence[int],
        messages: Iterable[MessageInput] = (),
        *,
        note: Mapping[str, object] | None = None,
    ) -> list[Message]:
        """The caller rewrote its own conversation (summarized old turns, moved or refreshed
        messages, dropped what it no longer needs): the history messages at ``retract``
        leave the view for good and ``messages`` are appended, all or nothing, in one unit.
        Nothing is deleted: the retracted messages stay in the history (``history``,
        search, export) and a ``rewrite`` event records which were taken out, when, and
        ``note`` (a JSON object: why, what replaced them). Returns the messages added."""
        with self._lock:
            self._fresh()
            return client_rewrite.rewrite(self._ctx, retract, messages, note or {})

    def add_response(self, response: object, *, choice: int = 0) -> Message:
        """Record the assistant turn of a model's response: an OpenAI ``ChatCompletion`` (its
        ``choice``-th message), an OpenAI Responses API ``Response`` or an Anthropic
        ``Message`` - SDK objects or their dicts. Tool calls and Anthropic thinking blocks are
        kept exactly; see :mod:`contextfold.responses`. Usage is not reported here (``call``
        does it; otherwise ``report_usage(response=...)``)."""
        msg = response_message(response, choice=choice)
        return self.add_many([replace(msg, uuid=self._ctx.uuid_for(len(self._ctx.view)))])[0]

    def add_anthropic(
        self,
        messages: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *,
        system: str | Sequence[Mapping[str, Any]] | None = None,
    ) -> list[Message]:
        """Append Anthropic Messages API messages (one dict or a list; ``system`` apart), as
        :func:`contextfold.wire.from_anthropic` converts them. Returns the messages added."""
        items = [messages] if isinstance(messages, Mapping) else list(messages)
        converted = from_anthropic(items, system)
        start = len(self._ctx.view)
        return self.add_many(
            [replace(m, uuid=self._ctx.uuid_for(start + i)) for i, m in enumerate(converted)]
        )

    def _uuid_for(self, position: int) -> str:
        return self._ctx.uuid_for(position)

    # ------------------------------------------------------------------ preparing
    def _schema_tokens(self, tools: ToolSchemas | None) -> int:
        return self._ctx.schema_tokens(tools)

    def prepare_view(self, *, tools: ToolSchemas | None = None) -> PreparedView:
        """The view to send now (compacting when needed) as one typed result: its messages
        (evidence injected included), tokens, the compaction record and where the injection
        went. :meth:`prepare` renders it; so do the integrations and the gateway."""
        attrs = {"gen_ai.conversation.id": self.session_id, "contextfold.agent.id": self.agent_id}
        with self._lock, telemetry.span("contextfold.prepare", attrs) as current:
            self._fresh()
            ctx = self._ctx
            record, schema_tokens = preparing.prepare(ctx, tools)
            self._announce(record)
            preparing.check_fits(ctx, ctx.extra_tokens(tools), schema_tokens, record)
            view = preparing.render(ctx, record, schema_tokens)
            if telemetry.recording(current):
                telemetry.set_attributes(current, telemetry.compaction_attributes(record))
                telemetry.set_attributes(current, {"contextfold.view.tokens": view.tokens})
            return view

    @overload
    def prepare(
        self,
        *,
        tools: ToolSchemas | None = None,
        format: Literal["openai"] = "openai",
        copy: bool = False,
    ) -> OpenAIView: ...

    @overload
    def prepare(
        self,
        *,
        tools: ToolSchemas | None = None,
        format: Literal["anthropic"],
        copy: bool = False,
    ) -> AnthropicView: ...

    def prepare(
        self,
        *,
        tools: ToolSchemas | None = None,
        format: Format = "openai",
        copy: bool = False,
    ) -> OpenAIView | AnthropicView:
        """The view to send now: a list of OpenAI dicts, or for ``format="anthropic"`` a dict
        ``{"system": ..., "messages": [...]}`` ready for ``client.messages.create(**view)``.

        OpenAI dicts are cached per message and shared between calls, which keeps a turn
        without compaction O(new messages); treat them as read-only or pass ``copy=True``."""
        if format not in ("openai", "anthropic"):
            raise ConfigError(f"format must be 'openai' or 'anthropic', got {format!r}")
        with self._lock:
            view = self.prepare_view(tools=tools)
            return view.anthropic() if format == "anthropic" else view.openai(copy=copy)

    @property
    def view_messages(self) -> ViewMessages:
        """The current view as neutral messages (no compaction is run). A property since the
        public surface was made consistent; ``cm.view_messages()`` still works (deprecated)."""
        with self._lock:
            self._fresh()
            return ViewMessages(self._ctx.view.view_messages())

    @property
    def view_tokens(self) -> int:
        """Estimated (calibrated) tokens of the current view."""
        return self._ctx.compactor.view_tokens()

    def _set_window(self, learned: LearnedWindow | None) -> None:
        self._ctx.set_window(learned)

    # ------------------------------------------------------------------ overflow recovery
    def call(
        self,
        fn: Callable[[Any], T],
        *,
        tools: ToolSchemas | None = None,
        format: Format = "openai",
    ) -> T:
        """prepare -> fn(view) -> calibrate; on a context-overflow error compact hard and retry
        once (overflow recovery). A second overflow raises ContextOverflowError with the record."""
        return calling.call(
            self._ctx,
            fn,
            prepare=lambda: self.prepare_view(tools=tools),
            report=lambda result: self.report_usage(response=result),
            tools=tools,
            format=format,
        )

    # ------------------------------------------------------------------ cleanup
    def delete_session(self) -> None:
        """Cascade cleanup: the session's events (messages, records, offloads,
        evidence, state), documents and index rows in one step, and the evicted files under a
        custom offload root. The manager stays usable: the session starts again empty."""
        with self._lock:
            ctx = self._ctx
            ctx.recovery.forget_session()
            ctx.store.delete_session(self.session_id)
            root = ctx.eviction_store.root
            if ctx.eviction_store is not ctx.offload and root is not None and root.exists():
                try:
                    shutil.rmtree(root)
                except OSError as exc:
                    raise StorageError(f"cannot delete {root}: {exc}") from exc
            opening.reset(ctx)


__all__ = ["DEFAULT_WORKSPACE", "ContextManager", "OnCompaction"]
