"""Fixtures for the gateway tests: the fake upstream and a gateway in front of it, both real
HTTP servers on 127.0.0.1 (port 0)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import load_trace, trace_files

try:
    import starlette  # noqa: F401
    import uvicorn  # noqa: F401
except ImportError as exc:  # pragma: no cover - the gateway extra is missing
    if os.environ.get("CONTEXTFOLD_REQUIRE_ALL") == "1":
        raise
    pytest.skip(f"the gateway extra is not installed ({exc})", allow_module_level=True)

from contextfold.gateway.cli import BackgroundServer
from contextfold.gateway.config import GatewayConfig
from tests.gateway.gateway_fakes import FakeUpstream
from tests.support.waiting import wait_until


@contextmanager
def running(
    tmp_path: Path, *, limit: int = 1_000_000, **config: Any
) -> Iterator[tuple[FakeUpstream, BackgroundServer]]:
    fake = FakeUpstream(limit=limit).start()
    try:
        cfg = GatewayConfig(upstream=fake.url, port=0, store=str(tmp_path / "ws"), **config).check()
        with BackgroundServer(cfg) as gw:
            yield fake, gw
    finally:
        fake.stop()


def long_trace(min_turns: int = 100) -> list[dict[str, Any]]:
    """The smallest bundled trajectory with at least ``min_turns`` assistant turns."""
    best: tuple[int, list[dict[str, Any]]] | None = None
    for path in trace_files():
        trace = load_trace(path)
        turns = sum(1 for m in trace if m.get("role") == "assistant")
        size = path.stat().st_size
        if turns >= min_turns and (best is None or size < best[0]):
            best = (size, trace)
    assert best is not None, f"no bundled trajectory has {min_turns} turns"
    return best[1]


REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def gateway_process(
    upstream: str, store: str, log: Path, *extra: str
) -> tuple[subprocess.Popen[bytes], str]:
    """``contextfold serve`` in its own process (log lines at info level into ``log``), once
    it answers /healthz; returns the process and its URL."""
    import httpx

    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    command = [sys.executable, "-m", "contextfold", "serve", "--upstream", upstream]
    command += ["--port", str(port), "--store", store, "--log-level", "info", *extra]
    if "--workers" not in extra:  # one process, whatever the machine's cores
        command += ["--workers", "1"]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=log.open("wb"))
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"the gateway exited: {log.read_text()[-2000:]}")
        try:
            return httpx.get(url + "/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(healthy, 60, "the gateway answered /healthz", interval=0.1)
    except AssertionError:
        proc.kill()
        raise
    return proc, url
