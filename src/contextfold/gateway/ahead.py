"""Compaction prepared ahead in the gateway: once a turn's answer is relayed, while the agent
runs the tool it asked for, the conversation's view is compacted if its next request is
expected to need it (see :mod:`contextfold.engine.ahead`), so that request finds its view ready.

The work holds the conversation's lock (handed over by the finished turn, so no request of the
conversation runs meanwhile: the next one waits for it, and otherwise finds everything done);
it fails open: a storage failure is logged and the session is as before (its next request
compacts on its own path if it must). The compaction a response has not reported yet is
reported by the next one (``x-contextfold-compaction``)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor

from ..core.tokens import count_message
from ..engine.filing import file_deferred, index_deferred
from ..errors import ContextFoldError
from ..evidence import semantic
from ..evidence.embed_worker import WorkerEncoder
from ..evidence.warm import warm
from ..storage import ConcurrentWriteError
from .metrics import Metrics
from .session import Prepared, Session
from .sessions import SessionRegistry
from .turn import Turn, log_event


def compact_ahead(
    registry: SessionRegistry, sess: Session, tools: Sequence[Mapping[str, object]]
) -> bool:
    """In a worker thread, the conversation's lock held: compact the view when the next turn
    is expected to need it; the answer not written yet is written first (it is part of the
    history the compaction works on). True when the view changed."""
    cm = sess.cm
    lookahead = sess.lookahead.tokens
    pending = sess.pending
    held = count_message(cm.counter, pending[0]) if pending is not None else 0
    schemas = [dict(t) for t in tools] or None
    if not cm.compaction_due(lookahead + held, tools=schemas):
        return False
    if pending is not None:
        try:
            sess.flush()
        except (ConcurrentWriteError, ContextFoldError) as exc:
            # the client resends the answer with its next request: nothing is lost
            log_event("compact_ahead_skipped", session=sess.session_id, why=str(exc))
            registry.failed(sess)
            return False
        registry.written(sess)
    record = cm.compact_ahead(lookahead, tools=schemas)
    if record is None:
        return False
    sess.unreported = record
    return True


#: the newest history messages whose outputs are classified ahead after each answer
WARM_TAIL = 8


#: outputs are classified ahead once a compaction is due within about this many turns
WARM_TURNS = 4


def compaction_near(sess: Session) -> bool:
    """Whether a compaction is due within :data:`WARM_TURNS` turns of the foreseen growth
    (turn by turn: a view the turns would take past the window is left to its request, so
    ``compaction_due`` says no to that many turns at once)."""
    step = max(sess.lookahead.tokens, 1)
    return any(sess.cm.compaction_due(k * step) for k in range(1, WARM_TURNS + 1))


def warm_newest(sess: Session, stop: Callable[[], bool]) -> int:
    """Classify and anchor the newest outputs of the conversation (remembered by their text),
    so that a compaction on a later request's path finds that work done (:mod:`..evidence.warm`).
    Only once compactions are near: a conversation far from its window would do it for
    nothing."""
    if not compaction_near(sess):
        return 0
    return warm(sess.cm.context.view.history[-WARM_TAIL:], stop)


def reported(sess: Session, prepared: Prepared) -> Prepared:
    """``prepared`` reporting the compaction prepared ahead for it when its own derivation
    did not compact (the response says the view it carries was compacted)."""
    ahead, sess.unreported = sess.unreported, None
    if ahead is None or prepared.record is not None:
        return prepared
    from dataclasses import replace

    return replace(prepared, record=ahead)


class Arriving:
    """A request counted as being served from its arrival until :meth:`release` (once)."""

    def __init__(self, work: AheadWork) -> None:
        self._work: AheadWork | None = work
        work._enter()

    def release(self) -> None:
        work, self._work = self._work, None
        if work is not None:
            work._leave()


#: the arrival of the request this task serves (None: none is marked)
ARRIVAL: contextvars.ContextVar[Arriving | None] = contextvars.ContextVar(
    "contextfold_arrival", default=None
)
#: the longest a request's arrival makes the work done ahead give way (a 21 MB body arrives
#: in 25-170 ms here; a client sending slowly must not hold the work off)
ARRIVAL_SECONDS = 1.0


def arrived() -> None:
    """The request this task serves has arrived and goes upstream without a turn of its own
    (a side request, a token count): the work done ahead need not give way to it any more."""
    arrival = ARRIVAL.get()
    if arrival is not None:
        arrival.release()


class AheadWork:
    """The compactions prepared ahead that are running (each holds its conversation's lock)."""

    def __init__(
        self,
        registry: SessionRegistry,
        threads: Executor,
        metrics: Metrics,
        *,
        vectors_process: bool = False,
    ) -> None:
        self.registry = registry
        self.threads = threads
        self.metrics = metrics
        self.tasks: set[asyncio.Task[None]] = set()
        #: one thread files the evidence vectors left pending (never a request's thread)
        self.filing = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cf-filing")
        #: the child process that computes the vectors at the lowest CPU priority (None: the
        #: filing thread computes them, pausing while requests arrive or are prepared)
        self.encoder = WorkerEncoder() if vectors_process and semantic.enabled() else None
        self.closing = threading.Event()
        #: requests arriving or being prepared right now: the filing waits between chunks
        #: while any is, and the other work gives way (its CPU work would otherwise share the
        #: process with theirs)
        self._serving = 0
        self._idle = threading.Condition()

    def _enter(self) -> None:
        with self._idle:
            self._serving += 1

    def _leave(self) -> None:
        with self._idle:
            self._serving -= 1
            if not self._serving:
                self._idle.notify_all()

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        """Mark a request being prepared: the vector filing pauses until none is. The
        request's :class:`Arriving` mark (if any) ends here: its preparation has begun."""
        self._enter()
        arrival = ARRIVAL.get()
        if arrival is not None:
            arrival.release()
        try:
            yield
        finally:
            self._leave()

    @contextlib.contextmanager
    def arriving(self) -> Iterator[None]:
        """Mark a request from its first byte until its preparation begins, it goes upstream
        without one (:func:`arrived`), or it ends, and for at most :data:`ARRIVAL_SECONDS`:
        the work done ahead gives way meanwhile, so that the unit it is finishing overlaps the
        body's arrival instead of the request waiting for a conversation's lock. Not while an
        upstream answers, nor for a body that takes long to arrive: that would starve the work
        at every load."""
        arrival = Arriving(self)
        token = ARRIVAL.set(arrival)
        cap = asyncio.get_running_loop().call_later(ARRIVAL_SECONDS, arrival.release)
        try:
            yield
        finally:
            cap.cancel()
            arrival.release()
            ARRIVAL.reset(token)

    def yield_to_requests(self) -> bool:
        """Between two chunks of filing: wait until no request is arriving or being prepared;
        True (give up, the rest stays pending) once the gateway is closing."""
        with self._idle:
            self._idle.wait_for(lambda: not self._serving or self.closing.is_set())
        return self.closing.is_set()

    def _file(self, sess: Session) -> int:
        """The vectors the conversation's compactions left pending. In the child process they
        need not wait for requests (it never holds their interpreter lock, and the scheduler
        gives the requests the cores first); in this process they do."""
        if self.encoder is None:
            return file_deferred(sess.cm.context, self.yield_to_requests)
        return file_deferred(sess.cm.context, self.closing.is_set, self.encoder)

    def interrupted(self) -> bool:
        """Whether deferred indexing should give way (a request is arriving or being
        prepared, or the gateway is closing)."""
        return bool(self._serving) or self.closing.is_set()

    def hand_over(self, turn: Turn) -> None:
        """Take over the finished ``turn``'s lock: it is released when the work has ended."""
        turn.released = True
        task = asyncio.get_running_loop().create_task(self._run(turn))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _run(self, turn: Turn) -> None:
        sess = turn.session
        loop = asyncio.get_running_loop()
        try:
            if await loop.run_in_executor(
                self.threads, compact_ahead, self.registry, sess, turn.prepared.tools
            ):
                self.metrics.inc("contextfold_gateway_compactions_ahead_total")
            # the evidence index a long first request deferred, until a request arrives
            await loop.run_in_executor(
                self.threads, index_deferred, sess.cm.context, self.interrupted
            )
            # what indexing the newest outputs will derive from their text alone, now
            await loop.run_in_executor(self.threads, warm_newest, sess, self.interrupted)
        except ConcurrentWriteError as exc:  # another replica wrote: reopened when next needed
            log_event("compact_ahead_failed", session=sess.session_id, error=str(exc))
            self.registry.forget(sess.key)
        except ContextFoldError as exc:  # the session is as before: the next request compacts
            log_event("compact_ahead_failed", session=sess.session_id, error=str(exc))
        except Exception as exc:  # fail open: never more than a log line
            log_event("compact_ahead_failed", session=sess.session_id, error=repr(exc))
        finally:
            turn.lock.release()
        # the evidence vectors its compactions left pending, after the lock (store_vectors)
        with contextlib.suppress(Exception):  # fails open: a search files what is left
            await loop.run_in_executor(self.filing, self._file, sess)

    async def aclose(self) -> None:
        """Wait for the running work (shutdown); vectors still pending stay pending."""
        self.closing.set()
        with self._idle:
            self._idle.notify_all()
        if self.encoder is not None:  # a text being encoded fails at once: it stays pending
            self.encoder.close()
        while self.tasks:
            with contextlib.suppress(Exception):
                await asyncio.gather(*list(self.tasks))
        await asyncio.get_running_loop().run_in_executor(None, self.filing.shutdown, True)


__all__ = ["AheadWork", "arrived", "compact_ahead", "compaction_near", "reported"]
