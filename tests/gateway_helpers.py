"""Fixtures for the gateway tests: the fake upstream and a gateway in front of it, both real
HTTP servers on 127.0.0.1 (port 0)."""

from __future__ import annotations

import os
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
from tests.gateway_fakes import FakeUpstream


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
