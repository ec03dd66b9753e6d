"""A private PostgreSQL 15 server for fault tests: started, stopped, restarted, made read-only
and stripped of its backends by the tests themselves (never the shared server on 5432).

``initdb`` runs into a temporary folder owned by the ``postgres`` user, the server listens on
127.0.0.1 on a free port of its own with trust authentication, and ``stop()`` is
``pg_ctl stop -m immediate`` (a crash, as far as clients can tell). Without the binaries or
the right to run them as ``postgres``, :func:`private_postgres` skips with the reason (and fails
under ``CONTEXTFOLD_REQUIRE_ALL=1``).

Every wait polls with a deadline; nothing sleeps a fixed time.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.support.waiting import wait_until

BIN = Path(os.environ.get("CONTEXTFOLD_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
USER = "postgres"


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll ``check`` until it is true; returns the seconds it took (fails past ``timeout``)."""
    return wait_until(check, timeout, what)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres(args: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    runner = ["runuser", "-u", USER, "--"] if os.geteuid() == 0 else []
    return subprocess.run(runner + args, capture_output=True, text=True, **kw)


class PrivatePostgres:
    """One private server: ``url`` for clients, and the faults a test needs."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="cf-pg-"))
        self.data = self.dir / "data"
        self.port = _free_port()
        self.url = f"postgresql://{USER}@127.0.0.1:{self.port}/postgres"
        if os.geteuid() == 0:
            shutil.chown(self.dir, USER, USER)
        done = _as_postgres(
            [str(BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", USER, "-E", "UTF8"],
            cwd=self.dir,
        )
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stderr.strip() or done.stdout.strip()}")
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"\nlisten_addresses = '127.0.0.1'\nport = {self.port}\n"
                f"unix_socket_directories = '{self.dir}'\nfsync = off\n"
                "shared_buffers = 16MB\nmax_connections = 40\n"
            )

    # ------------------------------------------------------------------ life cycle
    def start(self) -> None:
        done = _as_postgres(
            [
                str(BIN / "pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.dir / "log"),
                "-w",
                "-t",
                "60",
                "start",
            ],
            cwd=self.dir,
        )
        if done.returncode != 0:
            log = (self.dir / "log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"pg_ctl start failed: {done.stderr.strip()} {log}")
        wait_for(self.accepts, 30, "the private server accepting connections")

    def stop(self, mode: str = "immediate") -> None:
        _as_postgres(
            [str(BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop"],
            cwd=self.dir,
        )
        wait_for(lambda: not self.accepts(), 30, "the private server stopping")

    def restart(self) -> None:
        self.stop()
        self.start()

    def accepts(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                pass
        except OSError:
            return False
        try:
            self.sql("SELECT 1")
        except Exception:
            return False
        return True

    def destroy(self) -> None:
        self.thaw()
        if (self.data / "postmaster.pid").exists():
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------------ faults
    def processes(self) -> list[int]:
        """The postmaster and every process it started (backends, writer, checkpointer)."""
        pid_file = self.data / "postmaster.pid"
        if not pid_file.exists():
            return []
        postmaster = int(pid_file.read_text().split()[0])
        children = subprocess.run(
            ["ps", "-o", "pid=", "--ppid", str(postmaster)], capture_output=True, text=True
        ).stdout.split()
        return [postmaster, *(int(c) for c in children)]

    def freeze(self) -> None:
        """SIGSTOP the postmaster and all its processes: connections stay open and the kernel
        still accepts bytes, but nothing answers (a hung host, a paused VM)."""
        self._frozen = self.processes()
        for pid in self._frozen:
            # a backend that ended between the listing and the signal has nothing to freeze
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)

    def thaw(self) -> None:
        for pid in getattr(self, "_frozen", []):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        self._frozen = []

    def sql(self, statement: str) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.url, autocommit=True, connect_timeout=3) as conn:
            cur = conn.execute(statement)
            return list(cur.fetchall()) if cur.description else []

    def set_read_only(self, on: bool) -> None:
        """Every new transaction read-only (``default_transaction_read_only``), applied to the
        sessions already connected as well (a configuration reload)."""
        value = "on" if on else "off"
        self.sql(f"ALTER SYSTEM SET default_transaction_read_only = {value}")
        self.sql("SELECT pg_reload_conf()")
        wait_for(
            lambda: self.sql("SHOW default_transaction_read_only")[0][0] == value,
            10,
            "the read-only setting to apply",
        )

    def terminate_backends(self) -> int:
        """Terminate every other client backend (as an administrator or a failover would)."""
        rows = self.sql(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )
        return int(rows[0][0])


def private_postgres() -> Iterator[PrivatePostgres]:
    """A fixture body: a started private server, destroyed afterwards (skips without one)."""
    from tests.conftest import skip_or_fail

    if not (BIN / "initdb").exists():
        skip_or_fail(f"no PostgreSQL binaries at {BIN} (set $CONTEXTFOLD_TEST_PG_BIN)")
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        skip_or_fail(f"psycopg 3 not installed ({exc})")
    try:
        server = PrivatePostgres()
    except (RuntimeError, OSError) as exc:
        skip_or_fail(f"cannot create a private PostgreSQL server here: {exc}")
    try:
        server.start()
        yield server
    finally:
        server.destroy()


class StallingProxy:
    """A TCP proxy on 127.0.0.1 in front of ``port`` that can stop forwarding: while stalled
    it accepts connections and reads nothing more from either side (the network path of a
    cable pulled between two routers: the client's kernel still sends, nothing comes back)."""

    def __init__(self, port: int) -> None:
        import threading

        self.target = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.flowing = threading.Event()
        self.flowing.set()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, server_url: str) -> str:
        return server_url.replace(f":{self.target}/", f":{self.port}/")

    def _accept(self) -> None:
        import threading

        while not self._closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.flowing.wait()
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        while not self._closed.is_set():
            self.flowing.wait()
            try:
                data = source.recv(65536)
                if not data:
                    break
                self.flowing.wait()  # a stall cuts in between too: the bytes are held
                sink.sendall(data)
            except OSError:
                break
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def stall(self) -> None:
        self.flowing.clear()

    def resume(self) -> None:
        self.flowing.set()

    def close(self) -> None:
        self._closed.set()
        self.flowing.set()
        self.listener.close()
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.close()
