"""The pipeline's steps after the answer: waiting for the turn's commit, handing the session to
compaction ahead or releasing its lock, recording the answer (at once, or held for the
background writer), and closing down."""

from __future__ import annotations

import asyncio
import contextlib
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TypedDict

import httpx
from anyio import to_thread

from ..core import telemetry
from ..core.messages import Message
from ..errors import ContextFoldError
from ..storage import ConcurrentWriteError
from .ahead import AheadWork
from .config import GatewayConfig
from .continuation import Continuations
from .metrics import Metrics
from .pipeline_upstream import turn_span
from .sessions import SESSION_HEADER, Session, SessionRegistry, client_identity
from .streaming import OnClose
from .turn import Turn, log_event, moved, release_when_done
from .upstream import Upstream, forward_headers


class StreamState(TypedDict, total=False):
    """What a response's ``on_close`` (see :meth:`RecordSteps.closer`) finds when it runs."""

    #: the upstream stream the response relays (the latest one after a tool round)
    resp: httpx.Response
    #: the answer to record once the client has all of it, and the input tokens it took
    record: tuple[Message, int | None]


class RecordSteps:
    """The after-the-answer half of :class:`~.pipeline.Pipeline` (a base class of it)."""

    config: GatewayConfig
    metrics: Metrics
    upstream: Upstream
    registry: SessionRegistry
    continuations: Continuations
    ahead: AheadWork
    _threads: ThreadPoolExecutor
    _writer: asyncio.Task[None] | None

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

    def closer(self, turn: Turn, state: StreamState) -> OnClose:
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


__all__ = ["RecordSteps", "StreamState"]
