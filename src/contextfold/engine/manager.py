"""ContextManager: the facade between an agent's full history and each model call.

The manager keeps the public API, the session lock and the units of work; the session
itself is a :class:`~contextfold.engine.context.SessionContext` and the work is done by the
engine's modules (opening, ingest, prepare, overflow), which receive the context.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Literal, TypeVar, overload

from ..compaction.stages import Stage
from ..compaction.summarizers.base import Summarizer
from ..core.config import ContextConfig
from ..core.messages import Message
from ..core.paths import Workspace, check_session_id
from ..core.records import CompactionRecord
from ..core.tokens import TokenCounter, get_counter
from ..errors import ContextFoldError, StorageError
from ..jsontypes import JSON  # noqa: F401 (for get_type_hints of OpenAIView)
from ..recovery.memory_admin import MemoryCalls
from ..storage import Store
from . import calling, ingest, opening
from . import prepare as preparing
from .async_calls import AsyncCalls
from .calls import SessionCalls
from .context import SessionContext
from .ingest import MessageInput
from .ingest_calls import IngestCalls
from .parts import SessionParts
from .prepare import PreparedView, ToolSchemas
from .surface import AnthropicView, OpenAIView
from .view_calls import ViewCalls

T = TypeVar("T")
OnCompaction = Callable[[CompactionRecord], None]
Format = Literal["openai", "anthropic"]
DEFAULT_WORKSPACE = opening.DEFAULT_WORKSPACE


class ContextManager(SessionParts, MemoryCalls, SessionCalls, IngestCalls, ViewCalls, AsyncCalls):
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
        cfg = opening.check_settings(context_window, workspace, store, preset, config)
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

    # ------------------------------------------------------------------ preparing
    def prepare_view(self, *, tools: ToolSchemas | None = None) -> PreparedView:
        """The view to send now (compacting when needed) as one typed result: its messages
        (evidence injected included), tokens, the compaction record and where the injection
        went. :meth:`prepare` renders it; so do the integrations and the gateway."""
        with self._lock:
            self._fresh()
            return preparing.prepare_view(self._ctx, tools, self._announce)

    # ------------------------------------------------------------------ overflow recovery
    @overload
    def call(
        self,
        fn: Callable[[OpenAIView], T],
        *,
        tools: ToolSchemas | None = None,
        format: Literal["openai"] = "openai",
    ) -> T: ...

    @overload
    def call(
        self,
        fn: Callable[[AnthropicView], T],
        *,
        tools: ToolSchemas | None = None,
        format: Literal["anthropic"],
    ) -> T: ...

    def call(
        self,
        fn: Callable[..., T],
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
            opening.delete_session(self._ctx)


__all__ = ["DEFAULT_WORKSPACE", "ContextManager", "OnCompaction"]
