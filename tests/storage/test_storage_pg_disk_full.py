"""The PostgreSQL store on a nearly full disk: a private server (tests/support/pg_private.py) whose
store tables live in a tablespace on a small tmpfs (``default_tablespace`` set through the
store URL's ``options``), filled up by a ballast file. Creating the store there fails with the
server's disk-full error and leaves no half-made schema; once space is back it opens and works.
A write that finds the disk full fails, the session is exactly as stored, and the same write
succeeds (stored once) once space is back."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from contextfold import ContextManager
from contextfold.errors import StorageError
from contextfold.storage.postgres import PostgresStore
from tests.conftest import skip_or_fail
from tests.support.pg_private import PrivatePostgres, private_postgres

pytestmark = pytest.mark.timeout(300)

DISK_FULL = r"(?i)no space left|disk full|could not extend|could not write"


@pytest.fixture(scope="module")
def server() -> Iterator[PrivatePostgres]:
    yield from private_postgres()


@pytest.fixture
def small(server: PrivatePostgres, request: pytest.FixtureRequest) -> Iterator[tuple[str, Path]]:
    """A store URL whose tables go to a 3 MB tmpfs, and the mount."""
    name = request.node.name.split("[")[0][-30:].lower()
    mnt = server.dir / f"small_{name}"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)], capture_output=True
    )
    if done.returncode != 0:
        mnt.rmdir()
        skip_or_fail(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        if os.geteuid() == 0:
            shutil.chown(mnt, "postgres", "postgres")
        space = f"ts_{name}"
        server.sql(f"CREATE TABLESPACE {space} LOCATION '{mnt}'")
        options = quote(f"-c default_tablespace={space}")
        yield f"{server.url}?schema=s_{name}&timeout=5&options={options}", mnt
        server.sql(f'DROP SCHEMA IF EXISTS "s_{name}" CASCADE')
        server.sql(f"DROP TABLESPACE {space}")
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
        mnt.rmdir()


def _leave_free(disk: Path, free_bytes: int) -> Path:
    """Fill the disk, then give back ``free_bytes``; returns the ballast file."""
    ballast = disk / "ballast"
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError:
        pass
    finally:
        os.close(fd)
    os.truncate(ballast, max(0, ballast.stat().st_size - free_bytes))
    return ballast


def _schema_exists(server: PrivatePostgres, url: str) -> bool:
    schema = url.split("schema=", 1)[1].split("&", 1)[0]
    return bool(server.sql(f"SELECT 1 FROM pg_namespace WHERE nspname = '{schema}'"))


def turn(i: int, size: int = 40_000) -> list[dict[str, Any]]:
    words = " ".join(f"t{i}w{j}" for j in range(size // 8))
    return [
        {"role": "user", "content": f"request {i}: {words}"},
        {"role": "assistant", "content": f"done {i}"},
    ]


def history(cm: ContextManager) -> list[tuple[str, str, str]]:
    return [(m.role, m.text, m.uuid) for m in cm.history]


def stored(url: str) -> list[tuple[str, str, str]]:
    with ContextManager(store=url, session_id="s", context_window=1_000_000) as fresh:
        return history(fresh)


@pytest.mark.parametrize("free_kb", [0, 50, 200])
def test_creating_the_store_on_a_nearly_full_disk_fails_then_opens_complete(
    server: PrivatePostgres, small: tuple[str, Path], free_kb: int
) -> None:
    url, disk = small
    ballast = _leave_free(disk, free_kb * 1024)
    with pytest.raises(StorageError, match=DISK_FULL):
        PostgresStore(url)
    assert not _schema_exists(server, url)  # nothing half made
    ballast.unlink()  # the space comes back
    with ContextManager(store=url, session_id="s", context_window=1_000_000) as cm:
        cm.add_many(turn(0, 200))
        assert len(cm.history) == 2
    assert [r for _, _, r in stored(url)] == [u for _, _, u in history(cm)]


def test_a_write_on_a_full_disk_fails_and_the_session_stays_as_stored(
    small: tuple[str, Path],
) -> None:
    url, disk = small
    cm = ContextManager(store=url, session_id="s", context_window=1_000_000)
    cm.add_many(turn(0))
    ballast = _leave_free(disk, 8 * 1024)
    before = stored(url)
    failed: StorageError | None = None
    added = 1
    for i in range(1, 200):  # until a write finds the disk full
        try:
            cm.add_many(turn(i))
            added += 1
        except StorageError as exc:
            failed = exc
            break
    assert failed is not None, "the disk never filled up"
    assert any(k in str(failed).lower() for k in ("space", "full", "extend", "write")), failed
    assert history(cm) == stored(url)  # exactly what is stored: the failed add is not there
    assert len(history(cm)) == 2 * added and history(cm)[: len(before)] == before
    ballast.unlink()
    cm.add_many(turn(added))  # the same add, retried: stored once
    after = stored(url)
    assert history(cm) == after and len(after) == 2 * (added + 1)
    assert len({u for _, _, u in after}) == len(after)
    cm.close()
