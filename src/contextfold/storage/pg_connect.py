"""Connecting to PostgreSQL: connections whose every wait on the server is bounded, the pool's
cheap health check and the URL helpers (the schema parameter taken out, credentials never
shown)."""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import select
import socket
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psycopg
import psycopg_pool

if TYPE_CHECKING:
    from psycopg.abc import PQGen
    from psycopg.waiting import Ready, Wait  # noqa: F401 (PQGen's forward references)

#: what one psycopg wait generator returns
RV = TypeVar("RV")

Conn = psycopg.Connection[tuple[object, ...]]


class ServerUnresponsive(psycopg.OperationalError):
    """The server took no part in a wait for longer than the bound (a frozen or unreachable
    server whose kernel still accepts the bytes): the connection was cut."""


class _Watchdog:
    """One thread cutting the connections whose wait on the server outlived its deadline
    (their socket shut down: the blocked wait returns at once, whether psycopg waits in C or
    in Python). A frozen server's kernel keeps acknowledging what is sent, so neither
    ``tcp_user_timeout`` nor keepalives notice it; only a deadline on the client does."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int]] = []
        self._armed: dict[int, int] = {}  # token -> socket fd
        self._fired: set[int] = set()
        self._tokens = itertools.count()
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def guard(self, fd: int, seconds: float) -> Iterator[set[int]]:
        """Arm a deadline for one wait; yields the set holding the token once it fired."""
        token = next(self._tokens)
        with self._cond:
            self._armed[token] = fd
            heapq.heappush(self._heap, (time.monotonic() + seconds, token))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="contextfold-pg-deadlines", daemon=True
                )
                self._thread.start()
            elif self._heap[0][1] == token:
                self._cond.notify()
        fired: set[int] = set()
        try:
            yield fired
        finally:
            with self._cond:
                self._armed.pop(token, None)
                if token in self._fired:
                    self._fired.discard(token)
                    fired.add(token)

    def _run(self) -> None:
        with self._cond:
            while True:
                while self._heap and self._heap[0][1] not in self._armed:
                    heapq.heappop(self._heap)  # disarmed in time
                if not self._heap:
                    if not self._cond.wait(timeout=30):
                        self._thread = None
                        return  # idle: a new thread starts with the next deadline
                    continue
                due, token = self._heap[0]
                now = time.monotonic()
                if due > now:
                    self._cond.wait(timeout=due - now)
                    continue
                heapq.heappop(self._heap)
                fd = self._armed.pop(token)
                self._fired.add(token)
                _cut(fd)


def _cut(fd: int) -> None:
    """Shut the socket down (both ways) without closing the descriptor libpq owns."""
    with contextlib.suppress(OSError), socket.socket(fileno=os.dup(fd)) as sock:
        sock.shutdown(socket.SHUT_RDWR)


_WATCHDOG = _Watchdog()


class BoundedConnection(psycopg.Connection[tuple[object, ...]]):
    """A connection whose every wait on the server (a statement, a commit, a pipeline sync)
    is cut after :attr:`bound` seconds without an answer, raising :class:`ServerUnresponsive`.
    Only waits on the server count, never the caller's own work inside a transaction."""

    #: seconds one wait may take (None: unbounded); set with :func:`bound_waits`
    bound: float | None = None

    def wait(self, gen: PQGen[RV], *args: float | None, **kwargs: float | None) -> RV:
        bound = self.bound
        if bound is None or self.closed:
            return super().wait(gen, *args, **kwargs)  # type: ignore[arg-type]
        error: psycopg.OperationalError | None = None
        with _WATCHDOG.guard(self.pgconn.socket, bound) as fired:
            try:
                # (psycopg's own arguments as given: 3.2 takes interval, 3.3 interval, timeout)
                result = super().wait(gen, *args, **kwargs)  # type: ignore[arg-type]
            except psycopg.OperationalError as exc:
                error = exc
        if fired:  # cut (an answer in the same instant as the cut is lost with it)
            raise self._unresponsive(bound) from error
        if error is not None:
            raise error
        return result

    def _unresponsive(self, bound: float) -> ServerUnresponsive:
        with contextlib.suppress(Exception):
            self.pgconn.finish()
        return ServerUnresponsive(f"the server did not answer within {bound:g} s")


def bound_waits(conn: Conn, seconds: float) -> None:
    """Bound every later wait of ``conn`` on the server (a :class:`BoundedConnection`)."""
    if isinstance(conn, BoundedConnection):
        conn.bound = seconds


def check_connection(conn: Conn) -> None:
    """The pool's check before handing out a connection: an idle connection's socket has
    nothing to read unless the server sent something (a termination notice, or the end of
    the connection); only then is the server asked (and a dead connection raises)."""
    if not conn.closed and hasattr(select, "poll"):
        try:
            poller = select.poll()
            poller.register(conn.pgconn.socket, select.POLLIN)
            quiet = not poller.poll(0)
        except (OSError, ValueError, psycopg.Error):
            quiet = False
        if quiet:
            return
    psycopg_pool.ConnectionPool.check_connection(conn)


def public_url(url: str) -> str:
    """``url`` without user, password and query parameters (safe to log and show)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def split_param(url: str, name: str) -> tuple[str, str | None]:
    """The connection URL without the query parameter ``name`` (one of contextfold's own,
    which libpq would refuse), and that parameter."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    value = next((v for k, v in query if k == name), None)
    rest = urlencode([(k, v) for k, v in query if k != name], quote_via=quote)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, rest, parts.fragment)), value


def split_schema(url: str) -> tuple[str, str | None]:
    """The connection URL without a ``schema`` query parameter, and that parameter."""
    return split_param(url, "schema")


__all__ = [
    "BoundedConnection",
    "ServerUnresponsive",
    "bound_waits",
    "check_connection",
    "public_url",
    "split_param",
    "split_schema",
]
