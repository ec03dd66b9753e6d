"""Test-wide guards and fixtures.

No test may open a network connection except to the loopback interface: ``socket.connect`` and
``getaddrinfo`` are wrapped for the whole session and raise for any other address.
"""

from __future__ import annotations

import importlib
import ipaddress
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
# 45 real trajectories bundled with the repository (attribution in NOTICE and the folder's README)
TRACES_DIR = REPO_ROOT / "benchmarks" / "traces"
# the design notes (Chinese prose samples for the token tests)
SEEDS_DIR = REPO_ROOT / "docs" / "design-notes"

# Semantic vectors cost tens of milliseconds per output indexed: the tests that replay every
# trajectory run without them; tests/evidence/test_evidence_semantic.py turns them on.
os.environ.setdefault("CONTEXTFOLD_SEMANTIC", "0")

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex
_real_getaddrinfo = socket.getaddrinfo
_LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


class NetworkBlockedError(RuntimeError):
    pass


def _is_local(host: Any) -> bool:
    if host is None:
        return True
    if isinstance(host, bytes):
        host = host.decode()
    host = str(host)
    if host in _LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def _check(sock: socket.socket, address: Any) -> None:
    if sock.family == getattr(socket, "AF_UNIX", None):
        return
    host = address[0] if isinstance(address, tuple) else address
    if not _is_local(host):
        raise NetworkBlockedError(f"tests may only connect to 127.0.0.1, not {address!r}")


def _guarded_connect(self: socket.socket, address: Any) -> None:
    _check(self, address)
    return _real_connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: Any) -> int:
    _check(self, address)
    return _real_connect_ex(self, address)


def _guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
    if not _is_local(host):
        raise NetworkBlockedError(f"tests may not resolve {host!r}")
    return _real_getaddrinfo(host, *args, **kwargs)


def pytest_configure(config: pytest.Config) -> None:
    socket.socket.connect = _guarded_connect  # type: ignore[method-assign]
    socket.socket.connect_ex = _guarded_connect_ex  # type: ignore[method-assign]
    socket.getaddrinfo = _guarded_getaddrinfo


def trace_files() -> list[Path]:
    """The bundled trajectories; a missing or empty folder fails loudly, never skips."""
    files = sorted(TRACES_DIR.glob("*.json"))
    if len(files) < 45:
        raise RuntimeError(
            f"expected the 45 bundled trajectories in {TRACES_DIR}, found {len(files)}: "
            "the repository checkout is incomplete"
        )
    return files


def load_trace(path: Path) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
    return data


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "ws"


@pytest.fixture(params=["folder", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A new store on each backend a gateway serves from, created first: a workspace folder,
    or a schema on the test PostgreSQL server (dropped afterwards; see tests/support/pg_support.py)."""
    from tests.support import pg_support

    yield from pg_support.fresh_store_url(request.param, tmp_path / "ws")


def skip_or_fail(reason: str) -> NoReturn:
    """Skip with a visible reason; under ``CONTEXTFOLD_REQUIRE_ALL=1`` (set by .ci/run) fail
    instead, so a missing package or service can never pass CI silently."""
    if os.environ.get("CONTEXTFOLD_REQUIRE_ALL") == "1":
        pytest.fail(f"required in CI but unavailable: {reason}", pytrace=False)
    pytest.skip(reason)


def require_module(name: str) -> ModuleType:
    """``pytest.importorskip`` that fails under ``CONTEXTFOLD_REQUIRE_ALL=1``."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        skip_or_fail(f"{name} is not installed ({exc})")
