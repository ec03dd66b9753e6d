"""Helpers of the gateway attack suite: a recorder of every request the scripted upstream got
(any path, so an escape from the base would show), raw-socket requests, ``contextfold serve``
in its own process with its output kept, and a seeded generator of hostile request bodies."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.gateway.gateway_fakes import FakeUpstream
from tests.gateway.gateway_helpers import REPO, free_port
from tests.support.waiting import wait_until

# ---------------------------------------------------------------------- the upstream's view


@dataclass
class Seen:
    method: str
    raw_path: str
    headers: dict[str, str]


class Recorder:
    """ASGI middleware on the fake upstream: every request's method, raw path and headers."""

    def __init__(self, app: Any, seen: list[Seen]) -> None:
        self.app = app
        self.seen = seen

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            raw = scope.get("raw_path") or scope["path"].encode()
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            self.seen.append(Seen(scope["method"], raw.decode("latin-1"), headers))
        await self.app(scope, receive, send)


def recorded_upstream() -> tuple[FakeUpstream, list[Seen]]:
    """A started fake upstream and the list its recorder fills."""
    fake = FakeUpstream()
    seen: list[Seen] = []
    fake.app.add_middleware(Recorder, seen=seen)
    return fake.start(), seen


# ---------------------------------------------------------------------- raw sockets


def address(url: str) -> tuple[str, int]:
    host, port = url.split("//", 1)[1].split(":")
    return host, int(port.split("/")[0])


def raw_exchange(url: str, data: bytes, timeout: float = 30.0) -> bytes:
    """Send ``data`` as is on a new connection and read until the server closes it."""
    with socket.create_connection(address(url), timeout=timeout) as sock:
        sock.sendall(data)
        chunks: list[bytes] = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


def raw_get(url: str, path: str, headers: str = "") -> tuple[int, Any]:
    """A GET with the path exactly as given (no client normalizes it): status and JSON."""
    host, port = address(url)
    request = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n{headers}Connection: close\r\n\r\n"
    answer = raw_exchange(url, request.encode("latin-1"))
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    try:
        return status, json.loads(body) if body else None
    except ValueError:
        return status, body


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes ``sock`` (end of stream) within ``seconds``."""
    sock.settimeout(seconds)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True
    return True


# ---------------------------------------------------------------------- a served gateway


@contextmanager
def serve(
    upstream: str, store: str, folder: Path, *extra: str, env: dict[str, str] | None = None
) -> Iterator[tuple[str, Path, Path]]:
    """``contextfold serve`` in its own process; yields its URL and the files of its stdout
    and stderr (info-level log lines)."""
    import httpx

    port = free_port()
    out, err = folder / "serve.out", folder / "serve.err"
    path = os.environ.get("PYTHONPATH") or str(REPO / "src")
    environ = {**os.environ, "PYTHONPATH": path, **(env or {})}
    command = [sys.executable, "-m", "contextfold", "serve", "--upstream", upstream]
    command += ["--port", str(port), "--store", store, "--log-level", "info", *extra]
    if "--workers" not in extra:  # one process, whatever the machine's cores
        command += ["--workers", "1"]
    with out.open("wb") as o, err.open("wb") as e:
        proc = subprocess.Popen(command, env=environ, stdout=o, stderr=e)
    url = f"http://127.0.0.1:{port}"
    try:

        def healthy() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"the gateway exited: {err.read_text()[-2000:]}")
            try:
                return httpx.get(url + "/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(healthy, 60, "the gateway answered /healthz", interval=0.1)
        yield url, out, err
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---------------------------------------------------------------------- hostile bodies

SYSTEM = "You are a careful coding agent."


def deep_list(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def _hostile_values(rng: random.Random) -> list[Any]:
    return [
        {},
        [],
        None,
        True,
        -1,
        2**70,
        1e308,
        float("nan"),
        "",
        "\ud800",
        "ok \udfff tail",
        "\ud83d",
        "x" * rng.randint(1, 5000),
        {"role": "user"},
        {"type": ["text"], "text": ["a"]},
        [{"type": {"a": 1}}],
        [[{"role": "user", "content": "hi"}]],
        deep_list(rng.randint(20, 120)),
        {"\ud800": 1},
        {"__proto__": {"x": 1}},
        "\x00\x01\x1b[31m",
        "../../etc/passwd",
    ]


def _openai_body(rng: random.Random) -> dict[str, Any]:
    n = rng.randint(0, 3)
    messages: list[Any] = [{"role": "system", "content": SYSTEM}]
    for i in range(n):
        messages.append({"role": "user", "content": f"task {i}"})
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": "ls", "arguments": '{"path": "."}'},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": "a.py"})
    messages.append({"role": "user", "content": [{"type": "text", "text": "go on"}]})
    return {"model": "m", "messages": messages, "stream": rng.random() < 0.3}


def _anthropic_body(rng: random.Random) -> dict[str, Any]:
    messages: list[Any] = []
    for i in range(rng.randint(0, 3)):
        messages.append({"role": "user", "content": [{"type": "text", "text": f"task {i}"}]})
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "looking"},
                    {"type": "tool_use", "id": f"t{i}", "name": "ls", "input": {"path": "."}},
                ],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "a.py"}],
            }
        )
    messages.append({"role": "user", "content": "go on"})
    return {
        "model": "m",
        "max_tokens": 64,
        "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
        "messages": messages,
        "stream": rng.random() < 0.3,
    }


def _slots(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every position of a JSON value (dict keys and list indices)."""
    yield path
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _slots(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _slots(v, (*path, i))


def _put(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    copy: Any = dict(value) if isinstance(value, dict) else list(value)
    copy[head] = _put(copy[head], rest, new) if rest else new
    return copy


def _mutate(rng: random.Random, body: dict[str, Any]) -> dict[str, Any]:
    pool = _hostile_values(rng)
    for _ in range(rng.randint(1, 3)):
        slots = [p for p in _slots(body) if 0 < len(p) < 8]
        path = rng.choice(slots)
        body = _put(body, path, rng.choice(pool))
        if rng.random() < 0.3 and isinstance(body, dict):  # and an extra field somewhere
            body = _put(
                body, (rng.choice(["tools", "tool_choice", "metadata", "n"]),), rng.choice(pool)
            )
    return body


def _raw_cases() -> list[tuple[str, bytes]]:
    """Bodies no JSON library writes: broken, not UTF-8, hugely nested."""
    ok = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    return [
        ("empty", b""),
        ("truncated", ok[:-7].encode()),
        ("not utf-8", ok.replace("hi", "\udcff").encode("utf-8", "surrogateescape")),
        ("bom", b"\xef\xbb\xbf" + ok.encode()),
        ("a JSON list", b"[1, 2]"),
        ("a JSON string", b'"hi"'),
        (
            "NaN and huge ints",
            b'{"model": NaN, "messages": [{"role": "user", "content": 1' + b"0" * 5000 + b"}]}",
        ),
        (
            "duplicate keys",
            b'{"model": "m", "model": {}, "messages": [], "messages": [{"role": {}}]}',
        ),
        ("lone surrogate escape", ok.replace("hi", "\\ud800").encode()),
        (
            "lone low surrogate key",
            b'{"model": "m", "messages": [{"role": "user", "\\udc00": 1, "content": "x"}]}',
        ),
        ("100k-deep JSON", b'{"model": "m", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
        ("100k-deep objects", b'{"a":' * 100_000 + b"1" + b"}" * 100_000),
        (
            "50k-deep messages",
            b'{"model": "m", "messages": '
            + b"[" * 50_000
            + b'{"role": "user", "content": "x"}'
            + b"]" * 50_000
            + b"}",
        ),
        ("unbalanced", b'{"model": "m", "messages": ' + b"[" * 5000),
        ("dict role", b'{"model": "m", "messages": [{"role": {"a": 1}, "content": "x"}]}'),
        ("list role", b'{"model": "m", "messages": [{"role": ["user"], "content": "x"}]}'),
        (
            "list block type",
            b'{"model": "m", "messages": [{"role": "user", "content": [{"type": ["text"], "text": "x"}]}]}',
        ),
        (
            "list block text",
            b'{"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": ["x"]}]}]}',
        ),
    ]


Case = tuple[str, str, bytes]  # route, label, body

_POST = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
_BODY = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'
_LEN = b"Content-Length: %d\r\n" % len(_BODY)
_CLOSE = b"Connection: close\r\n"

#: whole HTTP requests no HTTP client writes (each ends its connection with Connection: close
#: or is refused by the parser, which closes it)
MALFORMED_HTTP: dict[str, bytes] = {
    "garbage": b"GARBAGE\r\n\r\n",
    "no host": b"GET /healthz HTTP/1.1\r\n" + _CLOSE + b"\r\n",
    "HTTP/0.9": b"GET /\r\n\r\n",
    "negative length": _POST + b"Content-Length: -1\r\n\r\n" + _BODY,
    "letters as length": _POST + b"Content-Length: abc\r\n\r\n" + _BODY,
    "huge length": _POST + b"Content-Length: 99999999999999999999\r\n\r\n" + _BODY,
    "two lengths": _POST + b"Content-Length: 5\r\n" + _LEN + b"\r\n" + _BODY,
    "length and chunked": _POST + _LEN + b"Transfer-Encoding: chunked\r\n\r\n" + _BODY,
    "bad chunk size": _POST
    + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n"
    + _BODY
    + b"\r\n0\r\n\r\n",
    "chunked": _POST
    + b"Transfer-Encoding: chunked\r\n"
    + _CLOSE
    + b"\r\n%x\r\n" % len(_BODY)
    + _BODY
    + b"\r\n0\r\n\r\n",
    "NUL in a header": _POST + b"X-A: a\x00b\r\n" + _LEN + b"\r\n" + _BODY,
    "non-ASCII header": _POST + b"X-A: \xff\xfe\r\n" + _CLOSE + _LEN + b"\r\n" + _BODY,
    "100 kB URL": b"GET /v1/models/" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    "3000 headers": b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
    + b"".join(b"X-H%d: v\r\n" % i for i in range(3000))
    + _CLOSE
    + b"\r\n",
    "pipelined": b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n"
    + _CLOSE
    + b"\r\n",
    "space in a header name": _POST + b"X A: b\r\n" + _LEN + b"\r\n" + _BODY,
    "folded header": _POST + b"X-A: b\r\n c\r\n" + _LEN + b"\r\n" + _BODY,
    "unknown method": b"BREW /v1/models HTTP/1.1\r\nHost: x\r\n" + _CLOSE + b"\r\n",
    "HTTP/2 preface": b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    "absolute URL": b"GET http://evil.example/admin HTTP/1.1\r\nHost: x\r\n" + _CLOSE + b"\r\n",
    "OPTIONS *": b"OPTIONS * HTTP/1.1\r\nHost: x\r\n" + _CLOSE + b"\r\n",
    "gzip claimed": _POST + b"Content-Encoding: gzip\r\n" + _CLOSE + _LEN + b"\r\n" + _BODY,
}


def hostile_bodies(seed: int, count: int) -> list[Case]:
    """``count`` hostile bodies (deterministic for ``seed``) plus the fixed raw cases, for both
    routes."""
    rng = random.Random(seed)
    cases: list[Case] = []
    for route in ("/v1/chat/completions", "/v1/messages"):
        cases += [(route, label, body) for label, body in _raw_cases()]
    builders: dict[str, Callable[[random.Random], dict[str, Any]]] = {
        "/v1/chat/completions": _openai_body,
        "/v1/messages": _anthropic_body,
    }
    while len(cases) < count:
        route = rng.choice(list(builders))
        body = _mutate(rng, builders[route](rng))
        raw = json.dumps(body, ensure_ascii=rng.random() < 0.5, allow_nan=True)
        cases.append((route, f"generated {len(cases)}", raw.encode("utf-8", "surrogatepass")))
    return cases


__all__ = [
    "MALFORMED_HTTP",
    "Recorder",
    "Seen",
    "closed_within",
    "deep_list",
    "hostile_bodies",
    "raw_exchange",
    "raw_get",
    "recorded_upstream",
    "serve",
]
