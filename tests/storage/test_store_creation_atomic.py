"""Creating a store is all or nothing: a first open that fails midway (a nearly full disk, a
migration statement that fails) leaves nothing half made, and once the cause is gone the next
open creates the store and works."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from contextfold import ContextManager
from contextfold.errors import StorageError
from tests.conftest import skip_or_fail
from tests.support import pg_support

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True
    )
    if done.returncode != 0:
        skip_or_fail(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _leave_free(disk: Path, free_bytes: int) -> Path:
    """Fill the disk, then give back ``free_bytes``; returns the ballast file."""
    ballast = disk / "ballast"
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    os.truncate(ballast, max(0, ballast.stat().st_size - free_bytes))
    return ballast


@pytest.mark.parametrize("free_kb", [0, 6, 20, 50, 90])
def test_first_open_on_a_full_disk_fails_clearly_then_opens(small_disk: Path, free_kb: int) -> None:
    ws = small_disk / "ws"
    ballast = _leave_free(small_disk, free_kb * 1024)
    with pytest.raises(StorageError, match=r"full|I/O|space") as info:
        ContextManager(workspace=ws, session_id="s")
    assert "no such table" not in str(info.value)  # never taken for a read-only workspace
    ballast.unlink()  # the space comes back
    with ContextManager(workspace=ws, session_id="s") as cm:
        cm.add({"role": "user", "content": "hello"})
    with ContextManager(workspace=ws, session_id="s") as cm:
        assert [m.text for m in cm.history] == ["hello"]


def test_postgres_migration_failing_midway_leaves_no_tables() -> None:
    import psycopg

    from contextfold.storage.postgres import PostgresStore

    factory = pg_support.SchemaFactory(pg_support.require_postgres())
    schema = factory.schema()
    try:
        with psycopg.connect(factory.url, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
            # in the way of a table the first migration creates late
            conn.execute(f'CREATE TABLE "{schema}".blobs (x int)')
        with pytest.raises(StorageError, match="blobs"):
            PostgresStore(factory.url, schema=schema)
        with psycopg.connect(factory.url, autocommit=True) as conn:
            tables = conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (schema,),
            ).fetchall()
            assert tables == [("blobs",)]  # the tables made before the failure rolled back
            conn.execute(f'DROP TABLE "{schema}".blobs')
        store = factory.open(schema)
        assert store.head("s") == 0
        with store.transaction() as txn:
            txn.put_doc("d", "k", {"v": 1})
        assert store.get_doc("d", "k") == {"v": 1}
    finally:
        factory.cleanup()
