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
from collections.abc import Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import httpx
from anyio import to_thread

from .. import telemetry
from ..errors import ContextFoldError
from ..messages import Message
from ..overflow import is_context_overflow
from ..records import CompactionRecord
from ..storage import ConcurrentWriteError
from . import fastjson
from .ahead import AheadWork, reported
from .config import GatewayConfig
from .continuation import Continuations
from .convert import Conversation, session_key_material
from .metrics import Metrics
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
    forward_after_commit,
    log_event,
    moved,
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


class Pipeline:
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
        self.ahead = AheadWork(self.registry, self._threads, metrics)

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
    ) -> list[dict[str, Any]]:
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

    async def committed(self, turn: Turn) -> None:
        """Wait for the turn's staged append to be stored (at once when it is); a storage
        failure is raised (the session is as before the request)."""
        task = turn.commit
        if task is not None:
            try:
                moved(turn, await asyncio.shield(task))
            finally:
                if task.done():
                    turn.commit = None

    async def finish(self, turn: Turn) -> None:
        """Release the conversation's lock once the turn's append was stored or given up."""
        if turn.released:
            return
        task = turn.commit
        try:
            await self.committed(turn)
        except ContextFoldError as exc:  # the session is as before; the client resends
            log_event("append_failed", session=turn.session.session_id, error=str(exc))
        except BaseException:
            if task is not None and not task.done():  # cancelled: released when it ends
                turn.released = True
                task.add_done_callback(lambda t: release_when_done(t, turn.lock))
            else:
                self.release(turn)
            raise
        if turn.answered and self.config.compact_ahead and not turn.released:
            self.ahead.hand_over(turn)  # it releases the lock once done
        else:
            self.release(turn)

    def release(self, turn: Turn) -> None:
        """Release the conversation's lock, once (a second call does nothing)."""
        if not turn.released:
            turn.released = True
            turn.lock.release()

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
    async def answer_tools(self, turn: Turn, calls: Sequence[Mapping[str, Any]]) -> list[str]:
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

    # ------------------------------------------------------------------ upstream
    def upstream_headers(self, turn: Turn) -> dict[str, str]:
        headers = forward_headers(turn.headers, token=self.config.auth_token)
        headers["content-type"] = "application/json"
        return headers

    def _url(self, turn: Turn, path: str) -> str:
        url = self.upstream.url(path)
        return f"{url}?{turn.query}" if turn.query else url

    async def post(self, turn: Turn, path: str, payload: dict[str, Any]) -> httpx.Response:
        """The upstream's whole answer (body read)."""
        url, data, headers = self._request(turn, path, payload)

        async def whole() -> httpx.Response:
            resp = await self.upstream.send(turn.key, url, data, headers)
            try:
                await resp.aread()
            finally:
                await resp.aclose()
            return resp

        return await self._forward(turn, whole())  # the upstream wait: to its last byte

    async def open_stream(self, turn: Turn, path: str, payload: dict[str, Any]) -> httpx.Response:
        """The upstream's answer once its headers are in (the caller reads and closes it)."""
        url, data, headers = self._request(turn, path, payload)
        return await self._forward(turn, self.upstream.send(turn.key, url, data, headers))

    async def _forward(
        self, turn: Turn, call: Coroutine[Any, Any, httpx.Response]
    ) -> httpx.Response:
        return await forward_after_commit(turn, call)

    def _request(
        self, turn: Turn, path: str, payload: dict[str, Any]
    ) -> tuple[str, bytes, dict[str, str]]:
        return self._url(turn, path), fastjson.dumps(payload), self.upstream_headers(turn)

    def note_retry(self, ok: bool) -> None:
        self.metrics.inc(
            "contextfold_gateway_overflow_retries_total", outcome="ok" if ok else "failed"
        )

    def upstream_error(self, turn: Turn, status: int) -> None:
        self.metrics.inc("contextfold_gateway_upstream_errors_total", status=str(status))
        log_event("upstream_error", session=turn.session.session_id, status=status)

    def gateway_headers(self, turn: Turn) -> dict[str, str]:
        """Response headers saying what the gateway did: the session, the time it added
        (Server-Timing, milliseconds, upstream wait excluded) and the compaction tier if any."""
        added = max(0.0, time.perf_counter() - turn.started - turn.upstream_seconds)
        parts = [
            f"contextfold;dur={added * 1000:.2f}",
            f"upstream;dur={turn.upstream_seconds * 1000:.2f}",
        ]
        parts += [f"{k};dur={v * 1000:.2f}" for k, v in turn.timings.items()]
        out = {"x-contextfold-session": turn.session.session_id, "server-timing": ", ".join(parts)}
        record = turn.prepared.record
        if record is not None and record.changed:
            out["x-contextfold-compaction"] = record.tier.value
        return out

    def observe_first_byte(self, turn: Turn) -> None:
        if turn.first_byte_recorded:
            return
        turn.first_byte_recorded = True
        total = time.perf_counter() - turn.started
        self.metrics.observe("contextfold_gateway_upstream_latency_seconds", turn.upstream_seconds)
        self.metrics.observe(
            "contextfold_gateway_added_latency_seconds", max(0.0, total - turn.upstream_seconds)
        )

    # ------------------------------------------------------------------ recording
    async def record(self, turn: Turn, message: Message, input_tokens: int | None) -> None:
        """Keep the answer for the session's next write (see ``record_delay``), or write it
        now when there is no delay or no background writer."""
        if telemetry.enabled():
            turn_span(turn, input_tokens)
        if not turn.headers.get(SESSION_HEADER):
            ident = client_identity(forward_headers(turn.headers, token=self.config.auth_token))
            # (a write to the store: off the event loop)
            await to_thread.run_sync(self.continuations.remember, turn.key, ident, message)
        turn.answered = True
        if self.config.record_delay > 0 and self._writer is not None:
            self.registry.hold(turn.session, message, input_tokens)
            return
        t0 = time.perf_counter()
        try:
            await to_thread.run_sync(self.registry.record, turn.session, message, input_tokens)
            self.metrics.observe(
                "contextfold_gateway_store_seconds", time.perf_counter() - t0, op="record"
            )
        except ContextFoldError as exc:
            # the client has its answer; the next request resends it and it is stored then
            log_event("record_failed", session=turn.session.session_id, error=str(exc))

    async def _write_pending(self, sess: Session) -> None:
        """Write one session's pending answer, holding its conversation's lock."""
        async with self.registry.lock(sess.key):
            if sess.pending is None:
                return
            t0 = time.perf_counter()
            try:
                await to_thread.run_sync(sess.flush)
                self.metrics.observe(
                    "contextfold_gateway_store_seconds", time.perf_counter() - t0, op="record"
                )
            except ConcurrentWriteError:
                # another replica appended first, from the client's next request, which
                # carries this answer: nothing is lost
                log_event("answer_written_elsewhere", session=sess.session_id)
                self.registry.failed(sess)
            except ContextFoldError as exc:
                # the client resends it; it is stored with its next request
                log_event("record_failed", session=sess.session_id, error=str(exc))
                self.registry.failed(sess)
            self.registry.written(sess)

    async def _writer_loop(self) -> None:
        delay = self.config.record_delay
        while True:
            await asyncio.sleep(min(0.25, delay / 2))
            for sess in self.registry.due(delay):
                if not self.registry.lock(sess.key).locked():  # else its request writes it
                    await self._write_pending(sess)

    def start(self) -> None:
        """Start the background writer of pending answers (the app's lifespan calls it)."""
        if self._writer is None and self.config.record_delay > 0:
            self._writer = asyncio.get_running_loop().create_task(self._writer_loop())

    def closer(self, turn: Turn, state: dict[str, Any]) -> Any:
        """``on_close(completed)`` for a response: close the upstream stream (if any), record
        the answer when the client got all of it, release the session lock."""

        async def on_close(completed: bool) -> None:
            try:
                upstream = state.get("resp")
                if upstream is not None:
                    await upstream.aclose()
                pending = state.get("record")
                if completed and pending is not None:
                    await self.record(turn, *pending)
            finally:
                await self.finish(turn)

        return on_close

    async def aclose(self) -> None:
        """Stop the writer, write every pending answer, close the upstream client."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer
        await self.ahead.aclose()
        for sess in self.registry.due(0.0):
            await self._write_pending(sess)
        await to_thread.run_sync(self.registry.close_all)
        self._threads.shutdown(wait=False)
        await self.upstream.aclose()


def this_turn(
    prepared: Prepared, latest: CompactionRecord | None, earlier: CompactionRecord | None
) -> Prepared:
    """``prepared`` with the compaction of this turn only (None when the view was derived
    without one), so the response header and the log describe this turn, not the
    session's latest compaction."""
    return replace(prepared, record=latest if latest is not earlier else None)


def turn_span(turn: Turn, input_tokens: int | None) -> None:
    """A ``contextfold.gateway.turn`` span for a turn that got its answer: from the request's
    start to now, with the GenAI attributes and what the view did this turn."""
    prepared = turn.prepared
    attrs: dict[str, telemetry.Attr | None] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": turn.provider,
        "gen_ai.request.model": turn.model,
        "gen_ai.usage.input_tokens": input_tokens,
        "gen_ai.conversation.id": turn.session.session_id,
        "contextfold.view.tokens": prepared.view_tokens,
        "contextfold.history.tokens": prepared.history_tokens,
        "contextfold.upstream.seconds": turn.upstream_seconds,
    }
    if prepared.record is not None:
        attrs.update(telemetry.compaction_attributes(prepared.record))
    telemetry.finished_span("contextfold.gateway.turn", time.perf_counter() - turn.started, attrs)


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
