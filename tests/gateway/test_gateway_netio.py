"""The gateway's upstream network layer (asyncio transports under httpx): plain and TLS
connections, kept-alive connections the server closed, and httpx's usual errors."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("httpcore")

from contextfold.gateway import netio  # noqa: E402

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head + (await reader.readexactly(length) if length else b"")


#: a scripted slow stream: each event reaches the client as a chunk of its own
CHUNK_GAP = 0.01
#: a server that does not answer for longer than the client's read timeout (what is tested)
SILENT_FOR = 2.0


def _answer(body: bytes, *, close: bool = False) -> bytes:
    extra = b"connection: close\r\n" if close else b""
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n%s\r\n%s" % (len(body), extra, body)


async def _serve(handler: Handler, ssl_ctx: ssl.SSLContext | None = None) -> Any:
    """A server whose connections end quietly when the client goes away."""

    async def guarded(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await handler(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(guarded, "127.0.0.1", 0, ssl=ssl_ctx)


async def _echo(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, prefix: bytes = b""
) -> None:
    """Answer every request on the connection with its own body."""
    while True:
        request = await _read_request(reader)
        writer.write(_answer(prefix + request.split(b"\r\n\r\n", 1)[1]))
        await writer.drain()


def _client(**kw: Any) -> Any:
    return httpx.AsyncClient(transport=netio.transport(httpx.Limits(), **kw), timeout=5)


def _port(server: Any) -> int:
    return int(server.sockets[0].getsockname()[1])


def test_requests_streams_and_kept_alive_connections() -> None:
    served: list[int] = []
    idle_closed = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served.append(1)
        first = len(served) == 1
        # the first connection answers twice, then closes while idle
        for _ in range(2 if first else 100):
            request = await _read_request(reader)
            if b"/stream" in request:
                writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
                for i in range(5):
                    data = b"data: %d\n\n" % i
                    writer.write(b"%x\r\n%s\r\n" % (len(data), data))
                    await writer.drain()
                    await asyncio.sleep(CHUNK_GAP)
                writer.write(b"0\r\n\r\n")
            else:
                writer.write(_answer(request.split(b"\r\n\r\n", 1)[1] or b"empty"))
            await writer.drain()
        if first:
            writer.close()
            await writer.wait_closed()
            idle_closed.set()

    async def main() -> None:
        server = await _serve(handler)
        url = f"http://127.0.0.1:{_port(server)}"
        async with server, _client() as client:
            assert (await client.post(url + "/echo", content=b"hello")).content == b"hello"
            chunks = []
            async with client.stream("POST", url + "/stream", content=b"x") as resp:
                async for chunk in resp.aiter_bytes():
                    chunks.append(chunk)
            assert b"".join(chunks) == b"".join(b"data: %d\n\n" % i for i in range(5))
            await idle_closed.wait()  # the server closed the idle connection meanwhile
            assert (await client.post(url + "/echo", content=b"again")).content == b"again"
        assert len(served) == 2  # the closed connection was replaced, not reused

    asyncio.run(main())


def test_timeouts_refused_and_cut_connections_are_httpx_errors() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        await asyncio.sleep(SILENT_FOR)
        writer.close()

    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial")
        await writer.drain()
        writer.close()

    async def main() -> None:
        quiet, broken = await _serve(silent), await _serve(cut)
        async with quiet, broken:
            async with httpx.AsyncClient(
                transport=netio.transport(httpx.Limits()), timeout=0.2
            ) as client:
                with pytest.raises(httpx.ReadTimeout):
                    await client.post(f"http://127.0.0.1:{_port(quiet)}/", content=b"x")
                with pytest.raises(httpx.RemoteProtocolError):
                    await client.post(f"http://127.0.0.1:{_port(broken)}/", content=b"x")
                free = _port(broken)
            broken.close()
            await broken.wait_closed()
            async with _client() as client:
                with pytest.raises(httpx.ConnectError):
                    await client.get(f"http://127.0.0.1:{free}/")

    asyncio.run(main())


def _self_signed(folder: Path) -> tuple[Path, Path]:
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def test_https_upstreams_are_verified(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _echo(reader, writer, b"secure:")

    async def main() -> None:
        server = await _serve(handler, server_ctx)
        url = f"https://127.0.0.1:{_port(server)}/"
        async with server:
            trusting = ssl.create_default_context(cafile=str(cert))
            async with _client(verify=trusting) as client:
                for word in (b"a", b"b"):  # the second request reuses the TLS connection
                    assert (await client.post(url, content=word)).content == b"secure:" + word
            async with _client() as client:  # the system's roots do not know this certificate
                with pytest.raises(httpx.ConnectError):
                    await client.post(url, content=b"x")

    asyncio.run(main())


def test_a_request_the_upstream_dropped_unanswered_is_sent_once_more() -> None:
    from contextfold.gateway.upstream import Upstream

    connections: list[int] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        if len(connections) > 1:
            await _echo(reader, writer)
            return
        request = await _read_request(reader)
        writer.write(_answer(request.split(b"\r\n\r\n", 1)[1]))
        await writer.drain()
        # kept alive, then dropped on the next request, as a server that timed the idle
        # connection out would
        await _read_request(reader)

    async def main() -> None:
        server = await _serve(handler)
        up = Upstream(f"http://127.0.0.1:{_port(server)}", timeout=5, pools=1)
        try:
            async with server:
                for word in (b"one", b"two", b"three"):
                    resp = await up.send("k", up.url("/v1/x"), word, {})
                    assert (await resp.aread()) == word
                    await resp.aclose()
        finally:
            await up.aclose()
        assert len(connections) == 2

    asyncio.run(main())
