"""A private PostgreSQL 15 server for the gateway's outage tests, started, stopped
(``pg_ctl stop -m immediate``: a crash, as clients see it) and restarted by the tests
themselves; never the shared server on 5432. ``initdb`` runs into a temporary folder owned by
the ``postgres`` user; the server listens on 127.0.0.1 on a free port with trust
authentication. Without the binaries (or the right to run them as ``postgres``) the tests
skip with the reason, and fail under ``CONTEXTFOLD_REQUIRE_ALL=1``. Waits poll with a
deadline."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.waiting import wait_until

BIN = Path(os.environ.get("CONTEXTFOLD_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
USER = "postgres"


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    runner = ["runuser", "-u", USER, "--"] if os.geteuid() == 0 else []
    return subprocess.run(runner + args, capture_output=True, text=True, cwd=cwd, timeout=120)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateServer:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="cf-gw-pg-"))
        self.data = self.dir / "data"
        self.port = _free_port()
        self.url = f"postgresql://{USER}@127.0.0.1:{self.port}/postgres"
        if os.geteuid() == 0:
            shutil.chown(self.dir, USER, USER)
        done = _run(
            [str(BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", USER, "-E", "UTF8"],
            self.dir,
        )
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stderr.strip() or done.stdout.strip()}")
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"\nlisten_addresses = '127.0.0.1'\nport = {self.port}\n"
                f"unix_socket_directories = '{self.dir}'\nfsync = off\nmax_connections = 40\n"
            )

    def start(self) -> None:
        log = str(self.dir / "log")
        done = _run([str(BIN / "pg_ctl"), "-D", str(self.data), "-l", log, "-w", "start"], self.dir)
        if done.returncode != 0:
            raise RuntimeError(f"pg_ctl start failed: {done.stderr.strip()}")
        self._wait(True)

    def stop(self) -> None:
        _run([str(BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"], self.dir)
        self._wait(False)

    def _wait(self, up: bool, timeout: float = 30.0) -> None:
        what = f"the private server did not {'start' if up else 'stop'}"
        wait_until(lambda: self.accepts() == up, timeout, what, interval=0.05)

    def accepts(self) -> bool:
        try:
            import psycopg

            with psycopg.connect(self.url, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
        except Exception:
            return False
        return True

    def destroy(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def _unavailable() -> str | None:
    if not (BIN / "initdb").is_file():
        return f"no PostgreSQL 15 binaries in {BIN} (set $CONTEXTFOLD_TEST_PG_BIN)"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser: cannot run the server as postgres"
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        return f"psycopg is not installed ({exc})"
    return None


@pytest.fixture
def private_pg() -> Iterator[PrivateServer]:
    reason = _unavailable()
    if reason is not None:
        if os.environ.get("CONTEXTFOLD_REQUIRE_ALL") == "1":
            pytest.fail(f"CONTEXTFOLD_REQUIRE_ALL=1 but {reason}")
        pytest.skip(reason)
    server = PrivateServer()
    try:
        server.start()
        yield server
    finally:
        server.destroy()


def short_pool_timeout(monkeypatch: pytest.MonkeyPatch, seconds: float = 3.0) -> None:
    """Make the PostgreSQL store give up waiting for a connection after ``seconds`` (a down
    server answers the request with a 503 sooner)."""
    from contextfold.storage import postgres

    defaults: dict[str, Any] = dict(postgres.PostgresStore.__init__.__kwdefaults__ or {})
    if "timeout" in defaults:
        defaults["timeout"] = seconds
        monkeypatch.setattr(postgres.PostgresStore.__init__, "__kwdefaults__", defaults)


__all__ = ["PrivateServer", "private_pg", "short_pool_timeout"]
