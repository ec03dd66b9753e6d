"""One request's turn through the gateway (:class:`Turn`) and what holds its answer until
the turn's append is stored: the upstream call runs while the worker thread commits, and the
answer is handed on only once the commit succeeded."""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import threading
import time
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from typing import TypeVar, cast

import httpx

from ..jsontypes import JSON, JSONObject  # noqa: F401 (JSON: for JSONObject)
from .convert import Conversation
from .edge import redact
from .session import Prepared, Session

log = logging.getLogger("contextfold.gateway")

#: when the app received the current request (before reading its body)
REQUEST_STARTED: contextvars.ContextVar[float] = contextvars.ContextVar("cf_request_started")
#: when the request body had arrived whole (its transfer is the client's, not the gateway's work)
BODY_READ: contextvars.ContextVar[float] = contextvars.ContextVar("cf_body_read")

#: a future's result type
_V = TypeVar("_V")


def log_event(event: str, **fields: object) -> None:
    if log.isEnabledFor(logging.INFO):
        line = json.dumps({"event": event, **fields}, ensure_ascii=False, default=str)
        log.info(redact(line) if "@" in line or "=" in line else line)


class RequestError(Exception):
    """A client error answered with a provider-shaped 4xx/5xx before anything was stored."""

    def __init__(self, status: int, message: str, kind: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind


T = TypeVar("T")


async def within_budget(future: asyncio.Future[T], started: float, timeout: float) -> T:
    """``future``'s result, waited for until ``timeout`` seconds after ``started`` (the
    request's arrival, ``time.perf_counter``): past it a 503 (the work goes on and ends as it
    would; the client's retry finds what it stored)."""
    left = max(0.001, started + timeout - time.perf_counter())
    try:
        return await asyncio.wait_for(asyncio.shield(future), left)
    except (TimeoutError, asyncio.TimeoutError):
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        raise RequestError(
            503, f"the gateway could not prepare this request within {timeout:g} s; retry"
        ) from None


#: what a turn's commit gives back: the session that holds the turn if another one does now
#: (another replica's writes made it reopen the conversation), and when it ended
Committed = tuple[Session | None, float]


@dataclass
class Turn:
    #: the wire format's name (``ProviderAdapter.name``)
    provider: str
    body: JSONObject
    conv: Conversation
    model: str
    key: str
    lock: asyncio.Lock
    session: Session
    prepared: Prepared
    headers: dict[str, str]
    gateway_tools: tuple[str, ...]
    started: float
    upstream_seconds: float = 0.0
    first_byte_recorded: bool = False
    rounds: int = 0
    released: bool = False
    #: the client's query string (``?beta=true`` ...), passed on upstream
    query: str = ""
    #: the upstream path the turn goes to
    path: str = ""
    #: seconds spent waiting for the conversation's lock, appending, deriving the view
    timings: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: the worker thread's task that commits the turn's staged append (see ``begin``); the
    #: first upstream answer is held until it succeeded
    commit: asyncio.Future[Committed] | None = None
    #: when the commit ended (perf_counter; 0: not yet)
    committed_at: float = 0.0
    #: when the upstream's answer (its last byte, or its headers when streamed) arrived
    answered_at: float = 0.0
    #: when the loop had the turn's view (perf_counter)
    resumed: float = 0.0
    #: set once the request is on its way upstream (the commit starts its work then)
    sent: threading.Event = field(default_factory=threading.Event)
    #: the client got the answer and it was recorded (the compaction ahead may follow)
    answered: bool = False


async def forward_after_commit(
    turn: Turn, call: Coroutine[object, None, httpx.Response]
) -> httpx.Response:
    """Run the upstream call while the turn's append is committed; its answer is returned
    only once the commit succeeded (the time the commit took beyond the upstream's answer
    counts as added latency). A failed commit cancels the call and is raised."""
    commit = turn.commit
    if commit is not None and commit.done():
        turn.commit = None
        try:
            moved(turn, commit.result())  # failed already: nothing is sent
        except BaseException:
            call.close()
            raise
        commit = None
    t0 = time.perf_counter()
    if "render" not in turn.timings:  # the first call: from the view to sending it
        turn.timings["render"] = t0 - turn.resumed
    if commit is None:
        resp = await call
        turn.answered_at = time.perf_counter()
        turn.upstream_seconds += turn.answered_at - t0
        return resp
    done_at: list[float] = []

    async def timed() -> httpx.Response:
        resp = await call
        done_at.append(time.perf_counter())
        return resp

    sending = asyncio.ensure_future(timed())
    asyncio.get_running_loop().call_soon(turn.sent.set)  # after the send's first step
    try:
        # shielded: a client gone meanwhile does not stop the commit (the lock is released
        # once it ended, see Pipeline.finish)
        moved(turn, await asyncio.shield(commit))
        turn.commit = None
    except BaseException:
        if commit.done():
            turn.commit = None
        sending.cancel()
        try:
            late = await sending
        except BaseException:
            pass
        else:
            await late.aclose()
        raise
    resp = await sending
    turn.answered_at = done_at[0]
    turn.upstream_seconds += done_at[0] - t0
    # what the commit held the answer beyond the upstream's (the rest of the wait until this
    # point is the event loop's own latency, counted in the added latency all the same)
    turn.timings["commit"] = max(0.0, turn.committed_at - done_at[0])
    return resp


def moved(turn: Turn, committed: Committed) -> None:
    """After the commit: when it ended, and the session that holds the turn if another one
    does now."""
    session, turn.committed_at = committed
    if session is not None:
        turn.session = session


def settle_future(fut: asyncio.Future[_V], value: _V | None, exc: BaseException | None) -> None:
    """Set ``fut``'s exception ``exc``, or its result ``value`` when ``exc`` is None (the
    caller passes the result then); nothing when it is done already."""
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(cast(_V, value))  # exc is None: value is the result


def release_when_done(task: asyncio.Future[_V], lock: asyncio.Lock) -> None:
    """Retrieve a finished task's error (it was raised elsewhere already), release ``lock``."""
    if not task.cancelled():
        task.exception()
    lock.release()


def tool_name(tool: Mapping[str, object]) -> str:
    fn = tool.get("function")
    if isinstance(fn, Mapping):
        return str(fn.get("name", ""))
    return str(tool.get("name", ""))


def call_name(call: Mapping[str, object]) -> str:
    fn = call.get("function")
    if isinstance(fn, Mapping):
        return str(fn.get("name", ""))
    return str(call.get("name", ""))


__all__ = [
    "BODY_READ",
    "REQUEST_STARTED",
    "Committed",
    "RequestError",
    "Turn",
    "call_name",
    "forward_after_commit",
    "log_event",
    "release_when_done",
    "settle_future",
    "tool_name",
    "within_budget",
]
