"""ContextManager: the facade between an agent's full history and each model call."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import shutil
import threading
import uuid as uuidlib
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from . import ahead, calling, client_rewrite, reopen, telemetry
from .aio import run_off_loop
from .compactors.pinned import pinned_indices
from .compactors.progressive import ProgressiveCompactor
from .config import ContextConfig, TierConfig, resolve_preset
from .errors import (
    ConfigError,
    ContextFoldError,
    ContextOverflowError,
    StorageError,
)
from .limits import LearnedWindow, learn_from_overflow
from .memory_admin import MemoryCalls
from .messages import Message, check_encodable
from .offload import (
    EVICTION_POLICY,
    INGEST_POLICY,
    OffloadPolicy,
    OffloadStore,
    offloadable_text,
)
from .overflow import is_context_overflow
from .paths import Workspace, check_session_id
from .records import CompactionRecord, OffloadEntry, StoreRecordStore, Tier
from .recovery import Recovery, RestoreHit
from .responses import parse_inputs, response_message
from .sessions.log import SessionLog, entry_of
from .state import SessionState, save_state
from .storage import ENV_VAR, ConcurrentWriteError, SQLiteStore, Store, open_store
from .storage.session import SessionStore
from .summarizers.base import Summarizer
from .surface import AnthropicView, OpenAIView, ViewMessages
from .tokens import Calibration, MessageTokenCache, TokenCounter, count_tools, get_counter
from .tools import ToolBox
from .usage import extract_input_tokens
from .view import HistoryView
from .view_layout import VIEW_EVENT, layout
from .wire import from_anthropic, to_anthropic

if TYPE_CHECKING:
    from .evidence.model import EvidencePointer

T = TypeVar("T")
OnCompaction = Callable[[CompactionRecord], None]


DEFAULT_WORKSPACE = "./.contextfold"


class ContextManager(MemoryCalls):
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
        fact_extractor: Any = None,
        share_memory: bool = False,
    ) -> None:
        if not isinstance(context_window, int) or context_window <= 0:
            raise ConfigError(f"context_window must be a positive integer, got {context_window!r}")
        if config is not None and preset is not None:
            raise ConfigError("pass either preset or config, not both")
        if workspace is not None and store is not None:
            raise ConfigError("pass either workspace (a folder) or store, not both")
        self.config = config or resolve_preset(preset)
        #: The window in use: ``context_window``, or lower once a provider's overflow error stated
        #: a smaller one (see ``learned_window``).
        self.window = context_window
        self.configured_window = context_window
        self.learned_window: LearnedWindow | None = None
        self.session_id = check_session_id(session_id)
        self.agent_id = check_session_id(agent_id)
        self.on_compaction = on_compaction
        self.share_memory = share_memory
        self.counter = get_counter(
            token_counter if token_counter is not None else self.config.token_counter
        )
        self.summarizer = summarizer
        self._fact_extractor = fact_extractor
        self._lock = threading.RLock()
        self._alocks: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}
        self.store, self._owns_store = self._open_store(workspace, store)
        root = self.store.root if isinstance(self.store, SQLiteStore) else None
        #: The workspace folder (None for a store that is not a folder).
        self.ws: Workspace | None = Workspace.at(root) if root is not None else None
        self._problems: list[str] = []
        self._tool_tokens: dict[str, int] = {}
        #: event seq of each history position (a lazily reopened session; else None)
        self._seqs: list[int] | None = None
        #: offloads of messages not loaded yet: (position, entry, policy), applied on load
        self._deferred: list[tuple[int, OffloadEntry, str]] = []
        #: a failed write could not reload what is stored (the store was unreachable): the
        #: in-memory state is not used again before the next call reloads it
        self._stale = False
        #: staged writes a failed write dropped (commit_staged then says so)
        self._dropped_staged = False
        self._open()

    @staticmethod
    def _open_store(
        workspace: str | Path | None, store: Store | str | Path | None
    ) -> tuple[Store, bool]:
        if store is not None and not isinstance(store, str | Path):
            return store, False
        target = store if store is not None else workspace
        if target is None:
            import os

            target = os.environ.get(ENV_VAR) or DEFAULT_WORKSPACE
        if isinstance(target, str) and "://" not in target:
            target = Path(target)
        opened = open_store(target)
        if isinstance(opened, SQLiteStore):
            from .migrate import migrate_on_open

            try:
                migrate_on_open(opened)
            except BaseException:
                opened.close()
                raise
        return opened, True

    def _open(self) -> None:
        """(Re)build every in-memory part from what is stored."""
        self.session = SessionStore(self.store, self.session_id, self.agent_id)
        self._cache = MessageTokenCache(self.counter)
        self.calibration = Calibration()
        self.learned_window = None
        self.window = self.configured_window
        self.log = SessionLog(self.session)
        self.offload = OffloadStore(self.session)
        ev = self.config.eviction
        self.eviction_store = (
            OffloadStore(
                self.session, root=Path(ev.offload_root) / self.session_id, name="offload_root"
            )
            if ev is not None and ev.offload_root is not None
            else self.offload
        )
        self.record_store = StoreRecordStore(self.session)
        self.view = HistoryView(self._cache.count)
        tiers = self.config.tiers
        self.compactor = ProgressiveCompactor(
            view=self.view,
            window=self.window,
            config=tiers or TierConfig(),
            session_id=self.session_id,
            count_text=self.counter.count_text,
            summarizer=self.summarizer,
            offload=self.offload,
            record_store=self.record_store,
            truncate_args=self.config.truncate_args,
            summary_style=self.config.summary_style,
            summary_prompt=self.config.summary.summary_prompt if self.config.summary else None,
            scale=self.calibration.apply,
            active_tasks=lambda: self.session_state.active_task_lines(),
            policies=self._policies(),
        )
        if self.eviction_store is not self.offload:
            self.compactor.extra_stores.append(self.eviction_store)
        old = getattr(self, "recovery", None)
        self.recovery = Recovery(self, fact_extractor=self._fact_extractor)
        if old is not None:
            self.recovery.problems = old.problems
        self.compactor.before_summarize = self.recovery.before_summarize
        self.compactor.index_range = self.recovery.index_range
        #: The last compaction that changed the view (None until one did).
        self.last_record: CompactionRecord | None = None
        #: The record of the last prepare()/compact(), including "no compaction needed".
        self.last_prepare: CompactionRecord | None = None
        self._last_estimate = 0
        #: tokens of the last call that calibration must not scale (tool schemas, injection)
        self._last_fixed = 0
        #: window minus the last view (with schemas and output reserve): room for evidence
        self._room = self.window
        self.session_state = SessionState()
        self._load()

    # ------------------------------------------------------------------ policies
    def _policies(self) -> dict[str, OffloadPolicy]:
        out: dict[str, OffloadPolicy] = {}
        if self.config.ingest_offload_chars:
            out["ingest"] = replace(INGEST_POLICY, threshold=self.config.ingest_offload_chars)
        ev = self.config.eviction
        if ev is not None:
            out["eviction"] = replace(
                EVICTION_POLICY,
                threshold=ev.max_chars,
                head_chars=ev.head_chars,
                tail_chars=ev.tail_chars,
                exclude_tools=tuple(ev.exclude_tools),
            )
        return out

    # ------------------------------------------------------------------ persistence
    def _load(self) -> None:
        reopen.load(self)

    def _state_data(self) -> dict[str, Any]:
        return reopen.state_data(self)

    def message_at(self, index: int) -> Message:
        """History message ``index`` without loading the rest of a lazily reopened history."""
        with self._lock:
            self._fresh()
            if self.view.is_loaded(index) or self._seqs is None:
                return self.view.history[index]
            seq = self._seqs[index]
            for event in self.store.read(self.session_id, start=seq, stop=seq + 1):
                return entry_of(event).message
            return self.view.history[index]

    def _save_state(self) -> None:
        """A ``state`` event with the compactor's state (in the current unit)."""
        self.session.emit("state", self._state_data())
        self._save_calibration()

    def _save_calibration(self) -> None:
        self.session.put_doc(
            "calibration", f"{self.session_id}/calibration", self.calibration.to_dict()
        )

    @contextlib.contextmanager
    def _unit(self) -> Iterator[None]:
        """One atomic unit: everything stored inside commits together, or nothing does. On
        any failure inside (storage or not) the manager reloads what is stored, then the error
        is raised: its in-memory state never holds what was not stored."""
        with self._lock:
            self._fresh()
            try:
                with self.session.unit():
                    yield
            except BaseException:
                self._reload_after_failure()
                raise

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
            size = len(self.view)
            try:
                with self.session.staging():
                    yield
            except BaseException as exc:
                if isinstance(exc, StorageError) or len(self.view) != size:
                    self._reload_after_failure()
                raise

    @property
    def has_staged(self) -> bool:
        """Whether writes made under :meth:`staged` still wait for :meth:`commit_staged`."""
        return self.session.has_staged

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
                self.session.commit_staged()
            except BaseException:
                self._reload_after_failure()
                raise

    def _reload_after_failure(self) -> None:
        self._dropped_staged = self._dropped_staged or self.session.has_staged
        self._stale = True
        try:
            self._open()
        except ContextFoldError as exc:  # the store is unreadable too: reload on next use
            self._problems.append(f"reloading after a failed write failed: {exc}")
        else:
            self._stale = False

    def _fresh(self) -> None:
        """Reload first if a failed write could not (StorageError while the store is still
        unreachable: nothing is served from a state that may hold what was not stored)."""
        if self._stale:
            self._open()
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
            return len(self.view) - len(self.session.pending(["message"]))

    def refresh(self) -> None:
        """Reload the session from the store (after another writer appended to it, or after
        a failed write while the store was unreachable)."""
        with self._lock:
            self._stale = True
            self._open()
            self._stale = False

    def close(self) -> None:
        """Release the store this manager opened (a store passed in is left open)."""
        with self._lock:
            if self._owns_store:
                self.store.close()

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
            return list(self.view.history)

    def add(self, message: Mapping[str, Any] | Message) -> Message:
        """Append one message (OpenAI dict or Message). Validated before anything is written.

        A dict with Anthropic ``tool_use`` (assistant) or ``tool_result`` (user) blocks is
        converted; a user turn with several tool results becomes several tool messages, and the
        last one is returned (``add_many`` returns them all)."""
        return self.add_many([message])[-1]

    def add_many(self, messages: Iterable[Mapping[str, Any] | Message]) -> list[Message]:
        """Append several messages at once: all or nothing (validated first, then stored in one
        unit)."""
        with self._lock:
            self._fresh()
            start = len(self.view)
            # dicts get a uuid derived from (session, position): stable across replays, so the
            # same history always gives the same view (evidence ids derive from it)
            parsed = parse_inputs(messages, start, self._uuid_for)
            if not parsed:
                return []
            for i, msg in enumerate(parsed):  # all or nothing: validate before writing
                check_encodable(msg, start + i)
            self.view.check_batch(parsed, start)
            tokens = [self._cache.count(m) for m in parsed]
            with self._unit():
                self.log.append(parsed, start, tokens)
                for i, msg in enumerate(parsed):
                    self.view.append(msg, start + i)
                    if msg.role == "tool":
                        self._ingest(start + i)
            return parsed

    def rewrite(
        self,
        retract: Sequence[int],
        messages: Iterable[Mapping[str, Any] | Message] = (),
        *,
        note: Mapping[str, Any] | None = None,
    ) -> list[Message]:
        """The caller rewrote its own conversation (summarized old turns, moved or refreshed
        messages, dropped what it no longer needs): the history messages at ``retract``
        leave the view for good and ``messages`` are appended, all or nothing, in one unit.
        Nothing is deleted: the retracted messages stay in the history (``history``,
        search, export) and a ``rewrite`` event records which were taken out, when, and
        ``note`` (a JSON object: why, what replaced them). Returns the messages added."""
        return client_rewrite.rewrite(self, retract, messages, note or {})

    def add_response(self, response: Any, *, choice: int = 0) -> Message:
        """Record the assistant turn of a model's response: an OpenAI ``ChatCompletion`` (its
        ``choice``-th message), an OpenAI Responses API ``Response`` or an Anthropic
        ``Message`` - SDK objects or their dicts. Tool calls and Anthropic thinking blocks are
        kept exactly; see :mod:`contextfold.responses`. Usage is not reported here (``call``
        does it; otherwise ``report_usage(response=...)``)."""
        msg = response_message(response, choice=choice)
        return self.add_many([replace(msg, uuid=self._uuid_for(len(self.view)))])[0]

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
        start = len(self.view)
        return self.add_many(
            [replace(m, uuid=self._uuid_for(start + i)) for i, m in enumerate(converted)]
        )

    def _uuid_for(self, position: int) -> str:
        return str(
            uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"contextfold:{self.session_id}:{position}")
        )

    def _ingest(self, index: int) -> None:
        """Seed 000's OffloadHook / seed 002's eviction, when a tool result arrives."""
        msg = self.view.history[index]
        text = offloadable_text(msg.content)
        if text is None:
            return
        tool_name = self.compactor._tool_name(index)
        pol = self.compactor.policies
        for name, store in (("eviction", self.eviction_store), ("ingest", self.offload)):
            policy = pol.get(name)
            if policy is None or not policy.applies(text, tool_name):
                continue
            try:
                entry = store.write(
                    msg.tool_call_id or "",
                    text,
                    message_uuid=msg.uuid,
                    policy=name,
                    tool_name=tool_name,
                )
            except ContextFoldError as exc:
                self.recovery.note_problem(f"{name} offload failed for {msg.tool_call_id}: {exc}")
                return
            self.compactor.apply_offload(index, entry, policy)
            self.recovery.index_ingest(index, entry)
            return

    # ------------------------------------------------------------------ preparing
    def _schema_tokens(self, tools: Sequence[Mapping[str, Any]] | None) -> int:
        if not tools:
            return 0
        if isinstance(tools, str | bytes) or not all(isinstance(t, Mapping) for t in tools):
            raise ConfigError("tools must be a list of tool schemas (dicts)")
        key = json.dumps(tools, sort_keys=True, default=str)
        if key not in self._tool_tokens:
            self._tool_tokens[key] = count_tools(self.counter, tools)
        return self._tool_tokens[key]

    def _extra_tokens(self, tools: Sequence[Mapping[str, Any]] | None) -> int:
        return self.config.reserve_output_tokens + self._schema_tokens(tools)

    @overload
    def prepare(
        self,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        format: Literal["openai"] = "openai",
        copy: bool = False,
    ) -> OpenAIView: ...

    @overload
    def prepare(
        self,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        format: Literal["anthropic"],
        copy: bool = False,
    ) -> AnthropicView: ...

    def prepare(
        self,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        format: Literal["openai", "anthropic"] = "openai",
        copy: bool = False,
    ) -> OpenAIView | AnthropicView:
        """The view to send now: a list of OpenAI dicts, or for ``format="anthropic"`` a dict
        ``{"system": ..., "messages": [...]}`` ready for ``client.messages.create(**view)``.

        OpenAI dicts are cached per message and shared between calls, which keeps a turn
        without compaction O(new messages); treat them as read-only or pass ``copy=True``."""
        if format not in ("openai", "anthropic"):
            raise ConfigError(f"format must be 'openai' or 'anthropic', got {format!r}")
        attrs = {"gen_ai.conversation.id": self.session_id, "contextfold.agent.id": self.agent_id}
        with self._lock, telemetry.span("contextfold.prepare", attrs) as current:
            self._fresh()
            schema_tokens = self._schema_tokens(tools)
            extra = self.config.reserve_output_tokens + schema_tokens
            record = self._compact_now(extra)
            self._announce(record)
            self._check_fits(extra, schema_tokens, record)
            self._last_fixed = schema_tokens
            view = self._render(format, copy=copy)
            if telemetry.recording(current):
                telemetry.set_attributes(current, telemetry.compaction_attributes(record))
                telemetry.set_attributes(current, {"contextfold.view.tokens": self.view_tokens})
            return view

    def _compact_now(self, extra: int) -> CompactionRecord:
        """prepare()'s compaction unit. A compaction is derived from the log, so when another
        writer appended meanwhile (ConcurrentWriteError: the manager reloaded the latest log)
        it is decided again on that log, up to twice; staged writes a conflict dropped are
        never retried silently (the error says so)."""
        for attempt in range(3):
            staged = self.has_staged
            try:
                with self._unit():
                    record = self._compact_if_needed(extra + self.recovery.injection_reserve())
                    self._finish(record)
                return record
            except ConcurrentWriteError:
                if staged or attempt == 2:
                    raise
        raise AssertionError("unreachable")

    @overload
    async def aprepare(
        self,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        format: Literal["openai"] = "openai",
        copy: bool = False,
    ) -> OpenAIView: ...

    @overload
    async def aprepare(
        self,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        format: Literal["anthropic"],
        copy: bool = False,
    ) -> AnthropicView: ...

    async def aprepare(
        self,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        format: Literal["openai", "anthropic"] = "openai",
        copy: bool = False,
    ) -> OpenAIView | AnthropicView:
        """:meth:`prepare` without blocking the event loop: the work runs in a worker thread and
        an LLM summarizer / fact extractor calls its model's async client on this loop (see
        :mod:`contextfold.aio`). Calls on one manager are serialized; ``on_compaction`` runs in
        that worker thread."""
        async with self._async_lock():
            return await run_off_loop(lambda: self.prepare(tools=tools, format=format, copy=copy))

    def _async_lock(self) -> asyncio.Lock:
        """One lock per event loop (an asyncio.Lock must not cross loops)."""
        loop = asyncio.get_running_loop()
        lock = self._alocks.get(loop)
        if lock is None:
            for old in [k for k in self._alocks if k.is_closed()]:
                del self._alocks[old]
            lock = self._alocks[loop] = asyncio.Lock()
        return lock

    def _compact_if_needed(self, extra: int) -> CompactionRecord:
        cfg = self.config
        record: CompactionRecord | None = None
        if cfg.summary is not None:
            record = self.compactor.run_trigger(cfg.summary, extra_tokens=extra)
        if cfg.tiers is not None:
            tier_record = self.compactor.run(extra_tokens=extra)
            if record is None or tier_record.tier is not Tier.NONE:
                record = tier_record
        elif record is None:
            record = self.compactor.run(extra_tokens=extra, force=Tier.NONE)
        # safety net for every preset: never hand out a view above the window
        if self.compactor.view_tokens(extra) > self.window:
            record = self.compactor.run(
                extra_tokens=extra, force=Tier.EMERGENCY, reason="safety net: view above the window"
            )
        return record

    def _check_fits(self, extra: int, schema_tokens: int, record: CompactionRecord) -> None:
        """Never hand out a view above the window: say why it cannot fit instead."""
        need = self.compactor.view_tokens(extra)
        self._room = self.window - need
        if need <= self.window:
            return
        pinned = sum(self.view.tokens_of(i) for i in pinned_indices(self.compactor))
        raise ContextOverflowError(
            f"the smallest view is {need} tokens, over the {self.window}-token window: the "
            f"pinned messages (system prompt, first and newest user message), already shortened "
            f"to head and tail, take {pinned} tokens, tool schemas {schema_tokens}, the reserve "
            f"for the answer {self.config.reserve_output_tokens}, and the newest turn is kept "
            "whole; use a larger context_window or fewer/shorter tool schemas",
            record=record,
        )

    def _finish(self, record: CompactionRecord) -> None:
        self.last_prepare = record
        self._last_estimate = self.view.view_tokens()
        if record.changed:
            self.last_record = record
            self.recovery.after_compaction(record)
            self._save_state()
            self.session.emit(VIEW_EVENT, layout(self.view))  # what the next calls are sent

    def _announce(self, record: CompactionRecord) -> None:
        """After the compaction's unit committed."""
        if record.changed and self.on_compaction is not None:
            self.on_compaction(record)

    def _render(self, format: str, *, copy: bool = False) -> OpenAIView | AnthropicView:
        inject = self.recovery.safe_injection()
        if inject is not None and self.counter.count_text(inject) > self._room:
            inject = None  # evidence is an extra: it never pushes the view over the window
        if inject is not None:
            self._last_fixed += self.counter.count_text(inject)
        if format == "openai":
            view = self.view.view_dicts(copy=copy)
            if inject is not None:
                view.insert(self._newest_user_position(view), {"role": "user", "content": inject})
            return view
        msgs = self.view.view_messages()
        if inject is not None:
            pos = self._newest_user_position(msgs)
            msgs.insert(pos, Message(role="user", content=inject))
        system, out = to_anthropic(msgs)
        result: AnthropicView = {"messages": out}
        if system is not None:
            result["system"] = system
        return result

    @staticmethod
    def _newest_user_position(view: Sequence[Any]) -> int:
        for i in range(len(view) - 1, -1, -1):
            item = view[i]
            role = item.get("role") if isinstance(item, dict) else item.role
            if role == "user":
                return i
        return len(view)

    @property
    def view_messages(self) -> ViewMessages:
        """The current view as neutral messages (no compaction is run). A property since the
        public surface was made consistent; ``cm.view_messages()`` still works (deprecated)."""
        with self._lock:
            self._fresh()
            return ViewMessages(self.view.view_messages())

    @property
    def view_tokens(self) -> int:
        """Estimated (calibrated) tokens of the current view."""
        return self.compactor.view_tokens()

    def _set_window(self, learned: LearnedWindow | None) -> None:
        self.learned_window = learned
        window = self.configured_window
        if learned is not None:
            window = min(window, learned.window)
        self.window = window
        self.compactor.window = window

    def reset_window(self) -> None:
        """Forget a window learned from overflow errors (e.g. after switching to a bigger
        model): ``context_window`` applies again."""
        with self._lock:
            self._set_window(None)
            try:
                with self._unit():
                    self._save_state()
            except ContextFoldError as exc:
                self.recovery.note_problem(f"saving compactor state failed: {exc}")

    # ------------------------------------------------------------------ manual compaction
    def compact(self, force: bool = True, *, tier: str | Tier | None = None) -> CompactionRecord:
        """Manual /compact. ``force=True`` summarizes the whole head now with the configured
        summarizer (Full tier) whatever the ratio, or with ``manual_compact="emergency"`` runs
        CompactForce (the emergency tier); ``tier="emergency"`` truncates without an LLM
        (forced compaction); ``force=False`` runs the normal tier decision."""
        if tier is not None:
            try:
                chosen: Tier | None = Tier(tier)
            except ValueError:
                raise ConfigError(
                    f"tier must be one of {[t.value for t in Tier]}, got {tier!r}"
                ) from None
        elif force:
            chosen = Tier.EMERGENCY if self.config.manual_compact == "emergency" else Tier.FULL
        else:
            chosen = None
        with self._unit():
            record = self.compactor.run(force=chosen, reason="manual /compact" if force else "")
            self._finish(record)
        self._announce(record)
        return record

    def compaction_due(
        self, lookahead_tokens: int = 0, *, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> bool:
        """Whether the next :meth:`prepare` would compact, its turn adding ``lookahead_tokens``."""
        with self._lock:
            self._fresh()
            extra = self.config.reserve_output_tokens + self._schema_tokens(tools)
            extra += max(0, lookahead_tokens) + self.recovery.injection_reserve()
            return ahead.due(self.compactor, self.config, extra)

    def compact_ahead(
        self, lookahead_tokens: int = 0, *, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> CompactionRecord | None:
        """After :meth:`add_response`, while the agent runs its tool: compact now when the
        next :meth:`prepare` would (:meth:`compaction_due`), so that call finds its view ready
        (see :mod:`contextfold.ahead`). None when nothing was due or changed. The history is
        never changed; a storage failure is raised with the session as before."""
        with self._lock:
            if not self.compaction_due(lookahead_tokens, tools=tools):
                return None
            extra = self.config.reserve_output_tokens + self._schema_tokens(tools)
            record = self._compact_now(extra + max(0, lookahead_tokens))
            self.view.view_dicts()  # rendered now: the next prepare() reuses these
        self._announce(record)
        return record if record.changed else None

    # ------------------------------------------------------------------ usage / calibration
    def report_usage(self, input_tokens: int | None = None, *, response: Any = None) -> float:
        """Feed the provider-reported input tokens of the last call; returns the new scale."""
        if input_tokens is None and response is not None:
            input_tokens = extract_input_tokens(response)
        if input_tokens is None or self._last_estimate <= 0:
            return self.calibration.scale
        if (
            isinstance(input_tokens, bool)
            or not isinstance(input_tokens, int | float)
            or not math.isfinite(input_tokens)
        ):
            raise ConfigError(f"input_tokens must be a finite number, got {input_tokens!r}")
        # the scale applies to message tokens: take out what was not messages (tool schemas,
        # injected evidence), which the provider counted too
        message_tokens = int(input_tokens) - self._last_fixed
        if message_tokens <= 0:
            return self.calibration.scale
        with self._lock:
            scale = self.calibration.observe(self._last_estimate, message_tokens)
            try:
                self._save_calibration()
            except ContextFoldError as exc:  # the scale is re-learned from the next calls
                self.recovery.note_problem(f"saving the calibration failed: {exc}")
            return scale

    # ------------------------------------------------------------------ overflow recovery
    def call(
        self,
        fn: Callable[[Any], T],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        format: Literal["openai", "anthropic"] = "openai",
    ) -> T:
        """prepare -> fn(view) -> calibrate; on a context-overflow error compact hard and retry
        once (overflow recovery). A second overflow raises ContextOverflowError with the record."""
        return calling.call(self, fn, tools=tools, format=format)

    async def acall(
        self,
        fn: Callable[[Any], Awaitable[T]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        format: Literal["openai", "anthropic"] = "openai",
    ) -> T:
        """:meth:`call` for an async ``fn``; the preparation and any compaction (LLM summaries,
        fact extraction) never block the event loop (see :meth:`aprepare`)."""
        return await calling.acall(self, fn, tools=tools, format=format)

    def recover_from_overflow(
        self, exc: Exception, *, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> CompactionRecord:
        """For frameworks that own the retry loop (the integrations): when ``exc`` is a
        context-overflow error, learn what it says (window, token count) and compact hard now
        so the next ``prepare()`` is smaller; returns the record. Any other error (or recovery
        turned off) is raised again."""
        if not self.config.overflow_recovery or not is_context_overflow(exc):
            raise exc
        with self._unit():
            note = learn_from_overflow(self, exc)
            extra = self._extra_tokens(tools)
            record = self.compactor.recover_overflow(extra_tokens=extra, note=note)
            if self.compactor.view_tokens(extra) > self.window:
                # the same safety net as prepare(): the retry never goes out above the window
                self._finish(record)
                record = self.compactor.run(
                    extra_tokens=extra,
                    force=Tier.EMERGENCY,
                    reason="overflow recovery: view still above the window",
                )
            self._finish(record)
        self._announce(record)
        return record

    # ------------------------------------------------------------------ records, tools, state
    def notification(self, record: CompactionRecord) -> str:
        """The compaction notice of ``record`` in the configured ``locale``."""
        return record.notification(locale=self.config.locale)

    def records(self) -> list[CompactionRecord]:
        """Every persisted CompactionRecord of this session, oldest first."""
        with self._lock:
            return self.record_store.list(self.session_id)

    @property
    def toolbox(self) -> ToolBox:
        return self.recovery.toolbox

    def tool_schemas(
        self, format: Literal["openai", "anthropic"] = "openai"
    ) -> list[dict[str, Any]]:
        return self.toolbox.schemas(format)

    def handle_tool_call(self, call: Mapping[str, Any]) -> dict[str, Any]:
        """Run one of contextfold's agent tools; returns the tool message (errors included)."""
        name = call.get("name") if isinstance(call, Mapping) else None
        if name is None and isinstance(call, Mapping) and isinstance(call.get("function"), Mapping):
            name = call["function"].get("name")
        attrs = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name if isinstance(name, str) else None,
            "gen_ai.conversation.id": self.session_id,
        }
        with self._lock, telemetry.span("contextfold.tool", attrs):
            return self.toolbox.handle(call)

    def restore(self, query: str, k: int = 5) -> list[RestoreHit]:
        """Evidence that left the view, best match first, with its original text."""
        attrs: dict[str, telemetry.Attr | None] = {
            "gen_ai.conversation.id": self.session_id,
            "contextfold.k": k,
        }
        with self._lock, telemetry.span("contextfold.restore", attrs) as current:
            hits = self.recovery.restore(query, k)
            telemetry.set_attributes(current, {"contextfold.hits": len(hits)})
            return hits

    def add_subagent_output(
        self, run_id: str, messages_or_text: Any, parent_message_uuid: str | None = None
    ) -> list[EvidencePointer]:
        with self._unit():
            return self.recovery.add_subagent_output(run_id, messages_or_text, parent_message_uuid)

    def recover_tool_result(self, tool_call_id: str) -> str | None:
        with self._lock:
            return self.recovery.recover_tool_result(tool_call_id)

    @property
    def state(self) -> SessionState:
        return self.session_state

    def save_session_state(self) -> None:
        """Store the session state (plan mode, todos, tasks, permissions) as a snapshot."""
        with self._unit():
            save_state(self.session, self.session_state)

    def offloaded(self) -> dict[str, OffloadEntry]:
        return self.offload.entries()

    # ------------------------------------------------------------------ cleanup
    def delete_session(self) -> None:
        """Cascade cleanup: the session's events (messages, records, offloads,
        evidence, state), documents and index rows in one step, and the evicted files under a
        custom offload root. The manager stays usable: the session starts again empty."""
        with self._lock:
            self.recovery.forget_session()
            self.store.delete_session(self.session_id)
            root = self.eviction_store.root
            if self.eviction_store is not self.offload and root is not None and root.exists():
                try:
                    shutil.rmtree(root)
                except OSError as exc:
                    raise StorageError(f"cannot delete {root}: {exc}") from exc
            self._open()
