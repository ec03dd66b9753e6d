"""The HTTP server's own limits: uvicorn's options for the gateway, and its HTTP protocol with
a header deadline (uvicorn closes idle kept-alive connections, but a connection that never
finishes its request headers would stay open for ever) and a limit on the header bytes."""

from __future__ import annotations

import asyncio
import os
from typing import Any, TypedDict

from uvicorn import Config
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from .config import GatewayConfig

#: the header deadline of servers whose uvicorn config does not say (worker processes set it
#: from their settings)
HEADER_TIMEOUT = GatewayConfig().header_timeout

_Base: Any = AutoHTTPProtocol


class GuardedHTTPProtocol(_Base):  # type: ignore[misc]
    """uvicorn's HTTP protocol, closing a connection that has not sent a whole request line
    and headers within the header timeout (from connecting, or from the first byte of a
    request on a kept-alive connection) or whose headers exceed the limit."""

    def __init__(self, config: Config, *args: object, **kwargs: object) -> None:
        super().__init__(config, *args, **kwargs)
        self._header_timeout = float(getattr(config, "header_timeout", HEADER_TIMEOUT))
        self._header_limit = int(config.h11_max_incomplete_event_size or 64 * 1024)
        self._header_timer: asyncio.TimerHandle | None = None
        self._seen_cycle: object = None
        self._header_bytes = 0

    def _arm(self) -> None:
        self._disarm()
        self._header_bytes = 0
        self._header_timer = self.loop.call_later(self._header_timeout, self._header_expired)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_expired(self) -> None:
        self._header_timer = None
        if not self._in_request() and not self.transport.is_closing():
            self.transport.close()

    def _closing(self) -> bool:
        return bool(self.transport.is_closing())

    def _in_request(self) -> bool:
        cycle = getattr(self, "cycle", None)
        return cycle is not None and not getattr(cycle, "response_complete", True)

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._header_timer is None and not self._in_request():
            self._arm()  # the first bytes of a new request: its headers are due in time
        waiting = self._header_timer is not None
        if waiting:
            self._header_bytes += len(data)
        super().data_received(data)
        cycle = getattr(self, "cycle", None)
        if cycle is not None and cycle is not self._seen_cycle:
            self._seen_cycle = cycle  # a new request's headers are in
            self._disarm()
        elif waiting and self._header_bytes > self._header_limit and not self._closing():
            self.transport.close()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._disarm()  # idle now: uvicorn's keep-alive timeout closes it


#: the most server processes ``workers = 0`` starts
AUTO_WORKERS_MAX = 8


def worker_count(config: GatewayConfig, cores: int | None = None) -> int:
    """The server processes to run: ``config.workers``, or for 0 one per core this process
    may use (at most :data:`AUTO_WORKERS_MAX`) when the store is one several processes share
    (a workspace folder: SQLite in WAL mode; PostgreSQL), and one for ``memory://`` (each
    process would hold a store of its own). One process spends at most about one core (its
    threads share one interpreter lock), and a process per core keeps a burst of sessions from
    queueing behind one lock; the store's own work (SQLite's writes, PostgreSQL) runs outside
    it. Conversations whose requests arrive on fresh connections reopen their session in
    whichever process answers (a resync from the store)."""
    if config.workers:
        return config.workers
    if config.store.startswith("memory://"):
        return 1
    if cores is None:
        try:
            cores = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):  # not Linux
            cores = os.cpu_count() or 1
    return max(1, min(AUTO_WORKERS_MAX, cores))


class UvicornOptions(TypedDict):
    """The keyword arguments :func:`uvicorn_options` gives ``uvicorn.Config``."""

    host: str
    port: int
    log_level: str
    access_log: bool
    server_header: bool
    http: type[asyncio.Protocol]
    timeout_keep_alive: int
    h11_max_incomplete_event_size: int


def uvicorn_options(config: GatewayConfig) -> UvicornOptions:
    """uvicorn's settings for the gateway (its own logging, no server header, the limits)."""
    return {
        "host": config.host,
        "port": config.port,
        "log_level": "warning",
        "access_log": False,
        "server_header": False,
        "http": GuardedHTTPProtocol,
        # uvicorn types it int, and waits a float of seconds as well
        "timeout_keep_alive": config.idle_timeout,  # type: ignore[typeddict-item]
        "h11_max_incomplete_event_size": config.max_header_bytes,
    }


__all__ = [
    "AUTO_WORKERS_MAX",
    "HEADER_TIMEOUT",
    "GuardedHTTPProtocol",
    "UvicornOptions",
    "uvicorn_options",
    "worker_count",
]
