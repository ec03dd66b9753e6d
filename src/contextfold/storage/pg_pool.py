"""The PostgreSQL store's connections: a pool while the server answers, and a bounded wait
when it does not.

Every wait is bounded by one timeout (:data:`DEFAULT_TIMEOUT` seconds unless the store URL's
``timeout`` parameter or ``$CONTEXTFOLD_PG_TIMEOUT`` says otherwise): connecting, waiting for a
pooled connection, unanswered data on an open connection (``tcp_user_timeout``), and each wait
for the server's answer on a connection (a client-side deadline: a frozen server, or a network
path that stops forwarding while the kernel still accepts the bytes, is cut after the timeout;
see :class:`~.pg_connect.BoundedConnection`). A server found unresponsive counts as down.

A pool that cannot hand out a connection within :data:`POOL_WAIT` (the server is down, the
pool is still backing off after an outage, or every connection is busy) is bypassed: the store
connects directly, once, within the timeout. If that fails too the server is taken as down and each later call tries one direct
connection (refused at once while the server is stopped) instead of waiting on the pool; the
first direct connection that succeeds brings a fresh pool back, so a call made after the server
returns works at once rather than after the old pool's reconnection backoff.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from typing import TypedDict

import psycopg
import psycopg_pool

from ..errors import ConfigError
from .pg_connect import BoundedConnection, ServerUnresponsive, bound_waits, check_connection

Conn = psycopg.Connection[tuple[object, ...]]


class ConnectArgs(TypedDict, total=False):
    """The keyword arguments of every connection of a store (``psycopg.connect``)."""

    autocommit: bool
    application_name: str
    options: str
    tcp_user_timeout: int
    connect_timeout: int


#: Seconds any one wait on the server may take (connect, a pooled connection, an answer).
DEFAULT_TIMEOUT = 5.0
TIMEOUT_ENV = "CONTEXTFOLD_PG_TIMEOUT"
#: a connection attempt past its connect_timeout (psycopg >= 3.2; else never singled out)
_CONNECT_TIMEOUT: type[Exception] | tuple[()] = getattr(psycopg.errors, "ConnectionTimeout", ())
#: Seconds to wait for a pooled connection before connecting directly instead (a pool that
#: lost its connections, or one whose connections are all busy).
POOL_WAIT = 1.0


def resolve_timeout(given: float | None, from_url: str | None) -> float:
    """The timeout: the argument, else the URL's ``timeout``, else the environment, else
    :data:`DEFAULT_TIMEOUT`."""
    for value, where in (
        (given, "timeout"),
        (from_url, "the store URL's timeout parameter"),
        (os.environ.get(TIMEOUT_ENV) or None, f"${TIMEOUT_ENV}"),
    ):
        if value is None:
            continue
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where} must be a number of seconds, got {value!r}") from None
        if not seconds > 0 or seconds == float("inf"):
            raise ConfigError(f"{where} must be a positive number of seconds, got {value!r}")
        return seconds
    return DEFAULT_TIMEOUT


class Connections:
    """The pool, the direct fallback and the "server is down" state of one store."""

    def __init__(
        self,
        conninfo: str,
        kwargs: ConnectArgs,
        *,
        min_size: int,
        max_size: int,
        timeout: float,
        name: str,
    ) -> None:
        self.conninfo = conninfo
        self.timeout = timeout
        #: connect within the timeout, in the pool's own connection attempts too
        self.kwargs: ConnectArgs = {**kwargs, "connect_timeout": max(2, round(timeout))}
        self._sizes = (min_size, max(max_size, min_size))
        self._name = name
        self._lock = threading.Lock()
        #: when the server was last found down (monotonic), or None while it answers
        self.down_since: float | None = None
        self._renewed_at = 0.0
        self.pool = self._new_pool()
        self.pool.open(wait=True, timeout=timeout)

    def _configure(self, conn: Conn) -> None:
        bound_waits(conn, self.timeout)

    def _new_pool(self) -> psycopg_pool.ConnectionPool[Conn]:
        return psycopg_pool.ConnectionPool(
            self.conninfo,
            connection_class=BoundedConnection,
            configure=self._configure,
            min_size=self._sizes[0],
            max_size=self._sizes[1],
            open=False,
            timeout=self.timeout,
            kwargs=dict(self.kwargs),
            check=check_connection,
            name=self._name,
        )

    def direct(self) -> Conn:
        """One connection outside the pool, within the timeout (its waits bounded too)."""
        try:
            conn = BoundedConnection.connect(self.conninfo, **self.kwargs)
        except _CONNECT_TIMEOUT as exc:
            # accepted but never answered (frozen, or a network path that stopped): no
            # retry of the caller's would fare better
            raise ServerUnresponsive(
                f"the server did not answer a new connection within {self.timeout:g} s"
            ) from exc
        bound_waits(conn, self.timeout)
        return conn

    @contextlib.contextmanager
    def connection(self) -> Iterator[Conn]:
        """A connection for one call: pooled, or direct when the pool cannot give one in
        time; raises psycopg.OperationalError when the server cannot be reached."""
        if self.down_since is None:
            entered = False
            try:
                with self.pool.connection(timeout=min(POOL_WAIT, self.timeout)) as conn:
                    entered = True
                    yield conn
                return
            except psycopg_pool.PoolTimeout:
                if entered:
                    raise
            except ServerUnresponsive:
                self.down_since = self.down_since or time.monotonic()
                raise
        try:
            conn = self.direct()
        except psycopg.OperationalError:
            self.down_since = self.down_since or time.monotonic()
            raise
        try:
            if self.down_since is not None or self.pool.get_stats().get("pool_size", 0) == 0:
                self._renew()
            yield conn
        except ServerUnresponsive:
            self.down_since = self.down_since or time.monotonic()
            raise
        finally:
            conn.close()

    def begin(self) -> tuple[contextlib.ExitStack, Conn]:
        """A connection in pipeline mode inside a transaction (close the stack to end it).
        A connection the server dropped (a terminated backend whose notice had not arrived
        when the pool checked it) fails here, before anything was written: one retry on a
        fresh connection."""
        for attempt in (0, 1):
            stack = contextlib.ExitStack()
            try:
                conn = stack.enter_context(self.connection())
                stack.enter_context(conn.pipeline())
                stack.enter_context(conn.transaction())
                return stack, conn
            except psycopg.OperationalError as exc:
                with contextlib.suppress(psycopg.Error):
                    stack.close()
                if attempt or isinstance(exc, ServerUnresponsive):
                    raise
        raise AssertionError("unreachable")

    def _renew(self) -> None:
        """The server answers again: a fresh pool (the old one may be waiting out a long
        reconnection backoff), the old one closed in the background."""
        with self._lock:
            recent = time.monotonic() - self._renewed_at < self.timeout
            if self.down_since is None and recent:
                return  # another thread just did (its pool is still connecting)
            old, self.pool = self.pool, self._new_pool()
            self.pool.open(wait=False)
            self.down_since = None
            self._renewed_at = time.monotonic()
        threading.Thread(target=old.close, kwargs={"timeout": 1.0}, daemon=True).start()

    def close(self) -> None:
        self.pool.close()


__all__ = ["DEFAULT_TIMEOUT", "TIMEOUT_ENV", "Connections", "resolve_timeout"]
