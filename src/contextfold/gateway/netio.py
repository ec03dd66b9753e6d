"""The upstream connections' network layer: httpcore streams on plain asyncio transports.

httpx reads a streamed answer through httpcore, one network read per upstream event; its
default backend (anyio) opens a cancel scope for every read and write and polls the socket of
every idle pooled connection when a request starts or ends. This backend keeps what arrived in
a buffer filled by the transport's protocol: a read that finds data returns at once, a read
that must wait arms one timer, and whether an idle connection was closed by the server is a
look at that buffer (no system call). Errors are httpcore's own, which httpx maps as usual.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Iterable
from typing import cast

import httpcore
import httpx

#: pause reading from the socket while this much is buffered and unread
_HIGH_WATER = 1 << 20


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.eof = False
        self.error: BaseException | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.drain: asyncio.Future[None] | None = None
        self.paused = False
        self.reading_paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > _HIGH_WATER and self.transport is not None:
            self.transport.pause_reading()
            self.reading_paused = True
        self._wake()

    def eof_received(self) -> bool | None:
        self.eof = True
        self._wake()
        return None  # close the transport

    def connection_lost(self, exc: BaseException | None) -> None:
        self.eof = True
        self.error = exc
        self._wake()
        self.resume_writing()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        drain, self.drain = self.drain, None
        if drain is not None and not drain.done():
            drain.set_result(None)

    def _wake(self) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


def _expire(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_exception(TimeoutError())


async def _wait(future: asyncio.Future[None], timeout: float | None) -> None:
    """Wait for ``future``; TimeoutError after ``timeout`` seconds (None: no limit)."""
    if timeout is None:
        await future
        return
    timer = asyncio.get_running_loop().call_later(timeout, _expire, future)
    try:
        await future
    finally:
        timer.cancel()


class AsyncioStream(httpcore.AsyncNetworkStream):
    def __init__(self, transport: asyncio.Transport, protocol: _Protocol) -> None:
        self._transport = transport
        self._protocol = protocol

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        p = self._protocol
        if not p.buffer and not p.eof:
            p.waiter = asyncio.get_running_loop().create_future()
            try:
                await _wait(p.waiter, timeout)
            except TimeoutError:
                raise httpcore.ReadTimeout("timed out reading from the upstream") from None
            finally:
                p.waiter = None
        if p.buffer:
            data = bytes(p.buffer[:max_bytes])
            del p.buffer[:max_bytes]
            if p.reading_paused and len(p.buffer) < _HIGH_WATER // 2:
                p.reading_paused = False
                self._transport.resume_reading()
            return data
        if p.error is not None:
            raise httpcore.ReadError(str(p.error) or type(p.error).__name__)
        return b""  # the server closed the connection

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        p = self._protocol
        if p.eof or self._transport.is_closing():
            raise httpcore.WriteError("the upstream connection is closed")
        self._transport.write(buffer)
        if p.paused:
            p.drain = asyncio.get_running_loop().create_future()
            try:
                await _wait(p.drain, timeout)
            except TimeoutError:
                raise httpcore.WriteTimeout("timed out writing to the upstream") from None
            if p.error is not None:
                raise httpcore.WriteError(str(p.error) or type(p.error).__name__)

    async def aclose(self) -> None:
        self._transport.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            tls = await asyncio.wait_for(
                loop.start_tls(
                    self._transport, self._protocol, ssl_context, server_hostname=server_hostname
                ),
                timeout,
            )
        except (TimeoutError, asyncio.TimeoutError):
            self._transport.close()
            raise httpcore.ConnectTimeout("timed out in the TLS handshake") from None
        except (OSError, ssl.SSLError) as exc:
            self._transport.close()
            raise httpcore.ConnectError(str(exc)) from None
        if tls is None:  # pragma: no cover - the transport closed during the handshake
            raise httpcore.ConnectError("the upstream closed the connection during TLS")
        self._protocol.transport = tls
        return AsyncioStream(tls, self._protocol)

    def get_extra_info(self, info: str) -> object:
        if info == "is_readable":  # an idle connection the server closed, or sent to
            return bool(self._protocol.buffer) or self._protocol.eof
        if info == "ssl_object":
            return self._transport.get_extra_info("ssl_object")
        if info == "client_addr":
            return self._transport.get_extra_info("sockname")
        if info == "server_addr":
            return self._transport.get_extra_info("peername")
        if info == "socket":
            return self._transport.get_extra_info("socket")
        return None


SocketOptions = Iterable[
    tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]
]


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: SocketOptions | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        local = (local_address, 0) if local_address else None
        try:
            transport, protocol = await asyncio.wait_for(
                loop.create_connection(_Protocol, host, port, local_addr=local), timeout
            )
        except (TimeoutError, asyncio.TimeoutError):
            raise httpcore.ConnectTimeout(f"timed out connecting to {host}:{port}") from None
        except OSError as exc:
            raise httpcore.ConnectError(str(exc) or type(exc).__name__) from None
        sock = transport.get_extra_info("socket")
        if sock is not None:
            for option in socket_options or ():
                sock.setsockopt(*option)
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return AsyncioStream(transport, protocol)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: SocketOptions | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            transport, protocol = await asyncio.wait_for(
                loop.create_unix_connection(_Protocol, path), timeout
            )
        except (TimeoutError, asyncio.TimeoutError):
            raise httpcore.ConnectTimeout(f"timed out connecting to {path}") from None
        except OSError as exc:
            raise httpcore.ConnectError(str(exc) or type(exc).__name__) from None
        return AsyncioStream(transport, protocol)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def transport(
    limits: httpx.Limits, verify: ssl.SSLContext | bool = True
) -> httpx.AsyncHTTPTransport:
    """httpx's transport with its connections on :class:`AsyncioBackend` (httpx's own
    backend if this httpx does not keep its connection pool where expected)."""
    out = httpx.AsyncHTTPTransport(limits=limits, verify=verify, trust_env=False)
    pool = getattr(out, "_pool", None)
    if isinstance(pool, httpcore.AsyncConnectionPool) and hasattr(pool, "_network_backend"):
        pool._network_backend = AsyncioBackend()
    return out


__all__ = ["AsyncioBackend", "AsyncioStream", "transport"]
