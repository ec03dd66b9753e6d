"""The per-request steps both providers share: session, view, overflow retry, gateway tools,
recording. ContextManager work runs in worker threads so one slow compaction never blocks the
event loop (other sessions keep flowing)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING

from anyio import to_thread

from ..core.overflow import is_context_overflow
from ..core.records import CompactionRecord
from ..errors import ContextFoldError
from ..jsontypes import JSON, JSONObject
from ..storage import ConcurrentWriteError
from .ahead import AheadWork, reported
from .config import GatewayConfig
from .continuation import Continuations
from .convert import Conversation, session_key_material
from .metrics import Metrics
from .pipeline_record import RecordSteps
from .pipeline_upstream import UpstreamSteps
from .sessions import (
    RESYNCS,
    SESSION_HEADER,
    Prepared,
    Session,
    SessionRegistry,
    Synced,
    client_identity,
    session_key,
)
from .turn import (
    BODY_READ,
    REQUEST_STARTED,
    Committed,
    RequestError,
    Turn,
    call_name,
    log_event,
    release_when_done,
    settle_future,
    within_budget,
)
from .upstream import Upstream, UpstreamError, forward_headers

if TYPE_CHECKING:
    from .providers.base import ParsedRequest, ProviderAdapter

log = logging.getLogger("contextfold.gateway")

#: The gateway's own tools, answered inside the gateway.
GATEWAY_TOOLS = ("recall", "read_offloaded")
#: seconds a turn's commit waits at most for its request to be sent upstream
SEND_GRACE = 0.05


class Pipeline(RecordSteps, UpstreamSteps):
    def __init__(self, config: GatewayConfig, metrics: Metrics) -> None:
        self.config = config
        self.metrics = metrics
        self.upstream = Upstream(config.upstream_base, config.upstream_timeout)
        self.registry = SessionRegistry(
            config, url_for=self.upstream.url, on_compaction=self._on_compaction
        )
        self._writer: asyncio.Task[None] | None = None
        self.continuations = Continuations(self.registry.store)
        #: the threads that append, derive views and commit: a request is handed over at once
        #: (not from a task started on the loop's next round, behind everything queued there)
        self._threads = ThreadPoolExecutor(max_workers=64, thread_name_prefix="contextfold")
        #: the compactions prepared ahead, between an answer and the next request
        self.ahead = AheadWork(
            self.registry, self._threads, metrics, vectors_process=config.vectors_process
        )

    # ------------------------------------------------------------------ logging
    def _on_compaction(self, session_id: str, record: CompactionRecord) -> None:
        self.metrics.inc("contextfold_gateway_compactions_total", tier=record.tier.value)
        log_event(
            "compaction",
            session=session_id,
            tier=record.tier.value,
            tokens_before=record.tokens_before,
            tokens_after=record.tokens_after,
            reason=record.reason,
            strategy=record.strategy,
            notice=(
                f"contextfold: {record.tier.label} compaction, "
                f"{record.tokens_before} -> {record.tokens_after} tokens ({record.reason})"
            ),
        )

    # ------------------------------------------------------------------ begin
    def session_key(self, conv: Conversation, headers: Mapping[str, str]) -> str:
        """The conversation's key, bound to the provider credentials the upstream will see
        (see :func:`~.sessions.session_key`)."""
        key = session_key(session_key_material(conv), headers, self.config.auth_token)
        if headers.get(SESSION_HEADER):
            return key
        ident = client_identity(forward_headers(headers, token=self.config.auth_token))
        return self.continuations.resolve(key, ident, conv)  # the client compacted itself

    def wants_gateway_tools(
        self, sess: Session, client_names: set[str], allowed: bool
    ) -> tuple[str, ...]:
        if not self.config.gateway_tools or not allowed or not sess.recall_ready:
            return ()
        return tuple(name for name in GATEWAY_TOOLS if name not in client_names)

    def tool_schemas(
        self, sess: Session, names: Sequence[str], adapter: ProviderAdapter
    ) -> list[JSONObject]:
        """The gateway's tools ``names`` in the adapter's shape."""
        if not names:
            return []
        schemas = sess.tool_schemas.get(adapter.name)
        if schemas is None:
            with self.registry.store_lock:  # the first call opens the session index
                openai = sess.cm.tool_schemas("openai")
            schemas = sess.tool_schemas[adapter.name] = adapter.tool_schemas(openai)
        return [s for s in schemas if adapter.tool_name(s) in names]

    def speak_for(
        self, sess: Session, adapter: ProviderAdapter, model: str, forwarded: dict[str, str]
    ) -> None:
        """The upstream summarizer speaks for this request (its provider, model, headers)."""
        if sess.context is not None:
            sess.context.provider = adapter.summary_format
            sess.context.model = self.config.summary_model or model
            sess.context.headers = forwarded

    async def begin(
        self,
        adapter: ProviderAdapter,
        parsed: ParsedRequest,
        headers: dict[str, str],
        query: str = "",
    ) -> Turn:
        """The turn of a request: its history synced and its view prepared (the background
        filing of evidence vectors waits meanwhile)."""
        with self.ahead.serving():
            return await self._begin(adapter, parsed, headers, query)

    async def _begin(
        self,
        adapter: ProviderAdapter,
        parsed: ParsedRequest,
        headers: dict[str, str],
        query: str = "",
    ) -> Turn:
        began = time.perf_counter()
        started = REQUEST_STARTED.get(began)
        provider = adapter.name
        body = parsed.body
        conv = parsed.conversation
        client_tools = parsed.client_tools
        tools_allowed = parsed.tools_allowed
        model = parsed.model
        if not model:
            raise RequestError(400, "model: a model name is required")
        key = self.session_key(conv, headers)
        lock = self.registry.lock(key)
        await lock.acquire()
        t_lock = time.perf_counter()
        client_names = set(parsed.client_tool_names)
        forwarded = forward_headers(headers, token=self.config.auth_token)
        marks: dict[str, float] = {}

        def work() -> tuple[Synced, tuple[str, ...], Prepared]:
            """Append what is new (staged: applied in memory, not committed yet), then
            derive the view; once more from the store when another replica wrote to the
            session since this one read it (a compaction found it out)."""
            for n in range(RESYNCS):
                try:
                    return attempt()
                except ConcurrentWriteError as exc:
                    log_event("resync", conversation=key, why=str(exc), attempt=n + 1)
                    self.registry.forget(key)
            return attempt()

        def attempt() -> tuple[Synced, tuple[str, ...], Prepared]:
            t0 = time.perf_counter()
            synced = self.registry.sync(key, conv, model, stage=True)
            t1 = time.perf_counter()
            sess = synced.session
            sess.key = key
            try:
                self.speak_for(sess, adapter, model, forwarded)
                names = self.wants_gateway_tools(sess, client_names, tools_allowed)
                tools = client_tools + self.tool_schemas(sess, names, adapter)
                earlier = sess.cm.last_record
                prepared = self.registry.prepare(sess, tools)
                if not names and sess.recall_ready:
                    names = self.wants_gateway_tools(sess, client_names, tools_allowed)
                    if names:  # the first compaction just happened: budget the tools too
                        tools = client_tools + self.tool_schemas(sess, names, adapter)
                        prepared = self.registry.prepare(sess, tools)
                prepared = reported(sess, this_turn(prepared, sess.cm.last_record, earlier))
                sess.lookahead.note(prepared.history_tokens)
            except BaseException as exc:
                if synced.staged is not None and not isinstance(exc, ConcurrentWriteError):
                    with contextlib.suppress(ContextFoldError):  # stored; the error stands
                        self.registry.settle(sess, synced.staged, key, conv, model)
                raise
            done = time.perf_counter()
            marks.update(store=t1 - t0, view=done - t1, queued=t0, done=done)
            return synced, names, prepared

        loop = asyncio.get_running_loop()
        sent = threading.Event()
        ready: asyncio.Future[tuple[Synced, tuple[str, ...], Prepared]] = loop.create_future()

        def run() -> Committed:
            """One trip to a worker thread: hand the view over, then commit the append while
            the upstream call goes out; returns the session that holds the turn when another
            replica's writes made it reopen the conversation."""
            try:
                out = work()
            except BaseException as exc:
                loop.call_soon_threadsafe(settle_future, ready, None, exc)
                raise
            loop.call_soon_threadsafe(settle_future, ready, out, None)
            synced = out[0]
            if synced.staged is None:
                return None, time.perf_counter()
            # the commit's own CPU work waits until the loop has rendered and sent the request
            # (both on the GIL), briefly: it then runs during the upstream's answer
            sent.wait(SEND_GRACE)
            t_commit = time.perf_counter()
            replaced = self.registry.settle(synced.session, synced.staged, key, conv, model)
            ended = time.perf_counter()
            self.metrics.observe("contextfold_gateway_store_seconds", ended - t_commit, op="commit")
            return replaced, ended

        # never cancelled (awaited shielded): it ends when the thread has finished
        task: asyncio.Future[Committed] = loop.run_in_executor(
            self._threads, contextvars.copy_context().run, run
        )
        try:
            synced, names, prepared = await within_budget(
                ready, started, self.config.request_timeout
            )
            resumed = time.perf_counter()
        except BaseException:
            # the lock is released once the worker thread has finished
            task.add_done_callback(lambda t: release_when_done(t, lock))
            raise
        sess = synced.session
        self._note_sync(synced)
        timings = {
            "parse": began - started,
            # of which the body's arrival (what a bare relay waits for too)
            "read": BODY_READ.get(started) - started,
            "lock": t_lock - began,
            "thread": marks["queued"] - t_lock,
            "store": marks["store"],
            "view": marks["view"],
            "wake": resumed - marks["done"],
        }
        self.metrics.observe("contextfold_gateway_store_seconds", marks["store"], op="sync")
        if any(item.message.metadata.get("cf_kind") == "injection" for item in prepared.items):
            self.metrics.inc("contextfold_gateway_evidence_injections_total")
        self.metrics.inc("contextfold_gateway_history_tokens_total", prepared.history_tokens)
        self.metrics.inc("contextfold_gateway_view_tokens_total", prepared.view_tokens)
        self.metrics.inc(
            "contextfold_gateway_tokens_saved_total",
            max(0, prepared.history_tokens - prepared.view_tokens),
        )
        return Turn(
            provider=provider,
            body=body,
            conv=conv,
            model=model,
            key=key,
            lock=lock,
            session=sess,
            prepared=prepared,
            headers=headers,
            gateway_tools=names,
            started=started,
            query=query,
            path=parsed.upstream_path,
            timings=timings,
            commit=task,
            sent=sent,
            resumed=resumed,
        )

    def _note_sync(self, synced: Synced) -> None:
        """Count and log a branch or a client's own rewrite the turn's sync made."""
        sess = synced.session
        if synced.branched_from is not None:
            self.metrics.inc("contextfold_gateway_branches_total")
            log_event(
                "branch",
                session=sess.session_id,
                branch_of=synced.branched_from,
                messages=synced.added,
            )
        if synced.retracted:
            self.metrics.inc("contextfold_gateway_client_rewrites_total")
            log_event(
                "client_rewrite",
                session=sess.session_id,
                retracted=synced.retracted,
                messages=synced.added,
            )

    # ------------------------------------------------------------------ overflow
    async def recover_overflow(self, turn: Turn, error: UpstreamError) -> bool:
        """Compact hard and learn the limit the error states (ContextManager keeps it with the
        session; the gateway remembers it for the model, so new sessions start below it).
        False when the error is not a context overflow."""
        if not is_context_overflow(error):
            return False
        sess = turn.session
        before = sess.cm.window

        def hard() -> Prepared:
            earlier = sess.cm.last_record
            sess.cm.recover_from_overflow(error, tools=turn.prepared.tools or None)
            prepared = self.registry.prepare(sess, turn.prepared.tools)
            if sess.cm.last_record is earlier:  # nothing new: this turn's compaction stands
                return replace(prepared, record=turn.prepared.record)
            return this_turn(prepared, sess.cm.last_record, earlier)

        turn.prepared = await to_thread.run_sync(hard)
        if sess.cm.window < before:
            await to_thread.run_sync(self.registry.learn, turn.model, sess.cm.window)
            sess.window = self.registry.window_for(turn.model)  # no reopen needed for it
            log_event(
                "learned_limit",
                session=sess.session_id,
                model=turn.model,
                window=sess.cm.window,
            )
        return True

    # ------------------------------------------------------------------ tools
    async def answer_tools(self, turn: Turn, calls: Sequence[Mapping[str, JSON]]) -> list[str]:
        """Answer gateway tool calls (OpenAI call dicts or Anthropic tool_use blocks)."""
        limit = max(2_000, turn.session.cm.window // 10 * 4)  # about a tenth of the window

        def run() -> list[str]:
            out = []
            for call in calls:
                text = str(turn.session.cm.handle_tool_call(call).get("content", ""))
                if len(text) > limit:
                    text = text[:limit] + "\n[... cut by the gateway; ask for a smaller range]"
                out.append(text)
            return out

        answers = await to_thread.run_sync(run)
        self.metrics.inc("contextfold_gateway_gateway_tool_calls_total", len(answers))
        for call in calls:
            self.metrics.inc("contextfold_gateway_recalls_total", tool=str(call_name(call))[:40])
        log_event(
            "gateway_tools",
            session=turn.session.session_id,
            calls=[call_name(c) for c in calls],
        )
        return answers


def this_turn(
    prepared: Prepared, latest: CompactionRecord | None, earlier: CompactionRecord | None
) -> Prepared:
    """``prepared`` with the compaction of this turn only (None when the view was derived
    without one), so the response header and the log describe this turn, not the
    session's latest compaction."""
    return replace(prepared, record=latest if latest is not earlier else None)


__all__ = [
    "BODY_READ",
    "GATEWAY_TOOLS",
    "REQUEST_STARTED",
    "Pipeline",
    "RequestError",
    "Turn",
    "log_event",
    "this_turn",
]
