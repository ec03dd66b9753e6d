"""Faults on the embedded backend, through ContextManager: disk full, read-only workspace,
kill -9 at random points, damaged files, concurrent writers.

Disk full and read-only use real mounts: a small tmpfs, remounted read-only (tests run as root,
so chmod alone would not stop writes). Without the right to mount, those tests skip with the
reason (and fail under CONTEXTFOLD_REQUIRE_ALL=1).
"""

from __future__ import annotations

import json
import multiprocessing
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contextfold import ContextManager
from contextfold.core.wire import from_openai
from contextfold.errors import ContextFoldError, StorageError
from contextfold.storage import ConcurrentWriteError, MemoryStore
from tests.conftest import skip_or_fail

REPO = Path(__file__).resolve().parents[2]


def _words(tag: str, size: int) -> str:
    return " ".join(f"{tag}{j}" for j in range(size // 6))


def turn(i: int, size: int = 200) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"request {i}: " + _words("u", size)},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": f"call_{i}",
                    "type": "function",
                    "function": {"name": "bash", "arguments": json.dumps({"command": f"ls {i}"})},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": f"call_{i}",
            "content": f"output {i} " + _words("o", size),
        },
        {"role": "assistant", "content": f"done {i}"},
    ]


def manager(ws: Path, **kw: Any) -> ContextManager:
    kw.setdefault("context_window", 8_000)
    return ContextManager(workspace=ws, session_id="s", **kw)


def contents(cm: ContextManager) -> list[str]:
    return [m.text for m in cm.history]


# --------------------------------------------------------------------------- mounts


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True
    )
    if done.returncode != 0:
        skip_or_fail(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def remount(mnt: Path, mode: str) -> None:
    done = subprocess.run(["mount", "-o", f"remount,{mode}", str(mnt)], capture_output=True)
    assert done.returncode == 0, done.stderr


# --------------------------------------------------------------------------- disk full


def test_disk_full_add_is_all_or_nothing_and_retry_succeeds(tmpfs: Path) -> None:
    ws = tmpfs / "ws"
    ballast = tmpfs / "ballast"
    cm = manager(ws, context_window=1_000_000)
    cm.add_many(turn(0))
    ballast.write_bytes(b"\0" * 1_000_000)  # freed later: the space that comes back
    _fill_up(tmpfs / "rest")
    failed: list[dict[str, Any]] | None = None
    for i in range(1, 10_000):
        batch = turn(i, size=20_000)
        before = contents(cm)
        try:
            cm.add_many(batch)
        except StorageError as exc:
            assert not isinstance(exc, ConcurrentWriteError)
            assert "full" in str(exc).lower() or "space" in str(exc).lower(), exc
            failed = batch
            break
        except Exception as exc:  # anything else is a bug: a raw OSError / sqlite3 error
            pytest.fail(f"raw {type(exc).__name__} escaped: {exc}")
    assert failed is not None, "the disk never filled up"
    assert contents(cm) == before  # the manager reloaded exactly what is stored
    assert contents(manager(ws, context_window=1_000_000)) == before  # and so does a reopen
    ballast.unlink()
    (tmpfs / "rest").unlink()
    cm.add_many(failed)  # the same call, once space is back
    again = manager(ws, context_window=1_000_000)
    assert contents(again) == before + [from_openai(m).text for m in failed]
    uuids = [m.uuid for m in again.history]
    assert len(uuids) == len(set(uuids))
    again.close()
    cm.close()


def _fill_up(path: Path) -> None:
    # unbuffered: a write the full disk cut short leaves nothing for close() to flush again
    with path.open("wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError:
            pass


def test_disk_full_during_compaction_keeps_the_session(tmpfs: Path) -> None:
    ws = tmpfs / "ws"
    cm = manager(ws, context_window=12_000)
    for i in range(12):
        cm.add_many(turn(i, size=1_500))
    ballast = tmpfs / "ballast"
    _fill_up(ballast)
    history = contents(cm)
    assert cm.view_tokens > cm.window  # the next prepare must compact
    try:
        cm.prepare()
        stored = True
    except StorageError as exc:  # the compaction could not be stored: nothing of it remains
        assert "full" in str(exc).lower() or "space" in str(exc).lower(), exc
        stored = False
    reopened = manager(ws, context_window=12_000)
    assert contents(reopened) == history == contents(cm)
    assert len(reopened.records()) == (1 if stored else 0)
    ballast.unlink()
    view = cm.prepare()
    assert len(cm.records()) == 1  # exactly one compaction, whether stored before or now
    assert manager(ws, context_window=12_000).prepare() == view


# --------------------------------------------------------------------------- read-only


def test_read_only_workspace_serves_reads(tmpfs: Path) -> None:
    ws = tmpfs / "ws"
    cm = manager(ws, context_window=6_000, preset="harness")
    big = "\n".join(f"line {i} of the build log" for i in range(5000))
    cm.add_many(turn(0))
    cm.add_many(
        [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "big",
                        "type": "function",
                        "function": {"name": "bash", "arguments": '{"command": "make"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "big", "content": big},
        ]
    )
    for i in range(1, 12):
        cm.add_many(turn(i, size=1_500))
    view = cm.prepare()
    assert cm.records()
    cm.close()
    remount(tmpfs, "ro")
    ro = manager(ws, context_window=6_000, preset="harness")
    assert ro.prepare() == view
    page = ro.handle_tool_call(
        {"id": "r", "function": {"name": "read_offloaded", "arguments": '{"id": "big"}'}}
    )
    assert page["content"].startswith("[sessions/s/tool_results/big.txt | lines 1-200")
    recall = ro.handle_tool_call(
        {"id": "r2", "function": {"name": "recall", "arguments": '{"query": "make build log"}'}}
    )
    assert "hit(s)" in recall["content"]
    assert ro.restore("output 3")
    found = ro.handle_tool_call(
        {"id": "r3", "function": {"name": "session_search", "arguments": '{"query": "request"}'}}
    )
    assert "match(es)" in found["content"]
    with pytest.raises(StorageError, match="read-only"):
        ro.add_many(turn(99))
    assert ro.prepare() == view  # still usable after the refused write
    ro.close()


# --------------------------------------------------------------------------- damaged files


def test_garbled_database_raises_storage_error(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    cm.add_many(turn(0))
    cm.close()
    db = tmp_path / "store.sqlite"
    for extra in ("store.sqlite-wal", "store.sqlite-shm"):
        (tmp_path / extra).unlink(missing_ok=True)
    db.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StorageError, match=r"store\.sqlite"):
        manager(tmp_path)


def test_truncated_database_raises_storage_error(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    for i in range(20):
        cm.add_many(turn(i, size=2_000))
    cm.close()
    db = tmp_path / "store.sqlite"
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 3])
    try:
        again = manager(tmp_path)
    except StorageError:
        return  # refused clearly
    # or opened: then every message it returns is one that was written, in order
    written = contents(cm)
    assert contents(again) == written[: len(again.history)]


def test_damaged_blob_is_reported_not_returned(tmp_path: Path) -> None:
    cm = manager(tmp_path, preset="harness", context_window=200_000)
    text = "\n".join(f"row {i}" for i in range(40_000))
    cm.add_many(turn(0))
    cm.add_many(
        [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "big",
                        "type": "function",
                        "function": {"name": "bash", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "big", "content": text},
        ]
    )
    entry = cm.offloaded()["big"]
    blob = tmp_path / "blobs" / entry.sha256[:2] / entry.sha256
    blob.write_bytes(blob.read_bytes()[:1000])  # truncated
    page = cm.handle_tool_call(
        {"id": "r", "function": {"name": "read_offloaded", "arguments": '{"id": "big"}'}}
    )
    assert page["content"].startswith("Error") and "sha256" in page["content"]
    # recovery falls back to the log, whose copy matches the recorded sha256
    assert cm.recover_tool_result("big") == text
    blob.unlink()
    page = cm.handle_tool_call(
        {"id": "r", "function": {"name": "read_offloaded", "arguments": '{"id": "big"}'}}
    )
    assert page["content"].startswith("Error")
    assert manager(tmp_path, preset="harness", context_window=200_000).history == cm.history


# --------------------------------------------------------------------------- kill -9

_KILL_WRITER = """
import json, sys
sys.path[:0] = [{src!r}, {repo!r}]
from contextfold import ContextManager
from tests.storage.test_storage_faults import turn
cm = ContextManager(workspace=sys.argv[1], session_id="s", context_window=5_000)
i = len(cm.history) // 4
while True:
    cm.add_many(turn(i, size=150))
    cm.prepare()
    print(i, flush=True)
    i += 1
"""


@pytest.mark.slow
def test_kill_9_at_random_points_leaves_an_exact_prefix(tmp_path: Path) -> None:
    rng = random.Random(8)
    script = _KILL_WRITER.format(src=str(REPO / "src"), repo=str(REPO))
    ws = tmp_path / "ws"
    expected: list[str] = []
    for trial in range(30):
        proc = subprocess.Popen(
            [sys.executable, "-c", script, str(ws)], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None
        proc.stdout.readline()  # it is writing: kill it at a random point from now on
        kill_after = rng.uniform(0.0, 0.4)  # the random point is what is tested
        time.sleep(kill_after)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        cm = manager(ws, context_window=5_000)
        got = contents(cm)
        assert len(got) % 4 == 0, "a unit was stored in part"
        expected = [from_openai(m).text for i in range(len(got) // 4) for m in turn(i, size=150)]
        assert got == expected, f"trial {trial}: not an exact prefix"
        view = cm.prepare()  # a valid view (tool pairs intact) after every kill
        assert len(view) == 0 if not got else [from_openai(d, i) for i, d in enumerate(view)]
        assert len({m.uuid for m in cm.history}) == len(got)
        cm.close()
    assert len(expected) > 30 * 4


# --------------------------------------------------------------------------- concurrency


def test_two_threads_share_one_manager(tmp_path: Path) -> None:
    cm = manager(tmp_path, context_window=1_000_000)
    errors: list[BaseException] = []

    def work(tag: str) -> None:
        try:
            for i in range(40):
                cm.add({"role": "user", "content": f"{tag} {i}"})
                cm.prepare()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    got = contents(manager(tmp_path, context_window=1_000_000))
    assert sorted(got) == sorted(f"{t} {i}" for t in "ab" for i in range(40))


def _add_until_done(ws: str, tag: str, n: int) -> int:
    """Add n messages with a manager of our own; a conflict reloads, then we retry."""
    cm = ContextManager(workspace=ws, session_id="s", context_window=1_000_000)
    conflicts = 0
    i = 0
    while i < n:
        try:
            cm.add({"role": "user", "content": f"{tag} {i}"})
            i += 1
        except ConcurrentWriteError:
            conflicts += 1  # the manager reloaded the latest log: retry the same message
    cm.close()
    return conflicts


def test_two_managers_in_two_threads_on_one_session(tmp_path: Path) -> None:
    manager(tmp_path).close()
    threads = [threading.Thread(target=_add_until_done, args=(str(tmp_path), t, 50)) for t in "xy"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    got = contents(manager(tmp_path, context_window=1_000_000))
    assert sorted(got) == sorted(f"{t} {i}" for t in "xy" for i in range(50))


def test_two_processes_on_one_session(tmp_path: Path) -> None:
    manager(tmp_path).close()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_add_until_done, args=(str(tmp_path), t, 60)) for t in "pq"]
    for p in procs:
        p.start()
    for p in procs:
        p.join(180)
    assert [p.exitcode for p in procs] == [0, 0]
    got = contents(manager(tmp_path, context_window=1_000_000))
    assert sorted(got) == sorted(f"{t} {i}" for t in "pq" for i in range(60))


def test_a_stale_manager_gets_concurrent_write_error_then_continues(tmp_path: Path) -> None:
    first, second = manager(tmp_path), manager(tmp_path)
    first.add_many(turn(0))
    with pytest.raises(ConcurrentWriteError):
        second.add_many(turn(1))
    assert contents(second) == contents(first)  # it reloaded the latest log
    second.add_many(turn(1))
    assert len(manager(tmp_path).history) == 8


def _session_worker(ws: str, sid: str, agent: str, turns: int) -> None:
    cm = ContextManager(workspace=ws, session_id=sid, agent_id=agent, context_window=6_000)
    for i in range(turns):
        cm.add_many(turn(i, size=120))
        cm.prepare()
    cm.close()


def test_eight_processes_on_eight_sessions(tmp_path: Path) -> None:
    manager(tmp_path).close()
    ctx = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(target=_session_worker, args=(str(tmp_path), f"s{i}", f"agent{i}", 12))
        for i in range(8)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    assert [p.exitcode for p in procs] == [0] * 8
    for i in range(8):
        cm = ContextManager(workspace=tmp_path, session_id=f"s{i}", agent_id=f"agent{i}")
        assert len(cm.history) == 48 and cm.store.session(f"s{i}").agent_id == f"agent{i}"  # type: ignore[union-attr]
        hits = cm.store.search("session", "request 3", scopes=[f"agent{i}"], limit=200)
        assert {h.session_id for h in hits} == {f"s{i}"}
        assert len({h.doc_id for h in hits}) == len(hits)
        assert len(cm.store.search("session", "done", session_id=f"s{i}", limit=500)) == 12
        cm.close()


# --------------------------------------------------------------------------- any backend


class FlakyStore(MemoryStore):
    """Fails the transaction number ``fail_at`` (a dropped connection mid-unit)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.fail_at = -1

    def transaction(self) -> Any:
        self.count += 1
        if self.count == self.fail_at:
            return _failing(super().transaction())
        return super().transaction()


class _failing:
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __enter__(self) -> Any:
        return self.inner.__enter__()

    def __exit__(self, *exc: Any) -> Any:
        err = StorageError("the database connection was lost")
        try:
            self.inner.__exit__(type(err), err, None)
        finally:
            raise err


def test_failed_compaction_unit_stores_nothing_and_retries(tmp_path: Path) -> None:
    store = FlakyStore()
    cm = ContextManager(store=store, session_id="s", context_window=5_000)
    for i in range(10):
        cm.add_many(turn(i, size=300))
    history = contents(cm)
    events = store.head("s")
    store.fail_at = store.count + 1
    with pytest.raises(StorageError, match="connection was lost"):
        cm.prepare()
    assert store.head("s") == events and cm.records() == []
    assert contents(cm) == history
    view = cm.prepare()
    assert len(cm.records()) == 1 and cm.last_record is not None and cm.last_record.changed
    again = ContextManager(store=store, session_id="s", context_window=5_000)
    assert again.prepare() == view and contents(again) == history


def test_context_manager_closes_what_it_opened(tmp_path: Path) -> None:
    with manager(tmp_path) as cm:
        cm.add_many(turn(0))
    with pytest.raises(ContextFoldError):
        cm.store.head("s")
    shared = MemoryStore()
    with ContextManager(store=shared, session_id="s") as cm2:
        cm2.add_many(turn(0))
    assert shared.head("s") == 4  # a store passed in stays open
