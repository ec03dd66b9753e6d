"""Blob files written in a batch (FileBlobs.put_many: one group commit) and through a unit of
work (SessionStore: a unit's blobs written when it commits, before its rows)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from contextfold import ContextManager
from contextfold.errors import StorageError
from contextfold.storage.base import put_blobs
from contextfold.storage.files import FileBlobs
from contextfold.storage.memory import MemoryStore


def test_put_many_writes_every_blob_durably_named_by_its_hash(tmp_path: Path) -> None:
    blobs = FileBlobs(tmp_path)
    datas = [f"output {i}\n".encode() * (i + 1) for i in range(12)]
    first = blobs.put(datas[0])  # already there: skipped, still returned
    shas = blobs.put_many([*datas, datas[3]])
    assert shas[0] == first and shas[-1] == shas[3]
    assert shas[:12] == [hashlib.sha256(d).hexdigest() for d in datas]
    assert all(blobs.get(s) == d for s, d in zip(shas, datas, strict=False))
    assert not list(tmp_path.rglob("*.tmp"))  # no temporary file left
    assert blobs.put_many(datas) == shas[:12]  # idempotent


def test_put_many_failure_raises_storage_error_and_leaves_no_temp_files(tmp_path: Path) -> None:
    blobs = FileBlobs(tmp_path)
    (tmp_path / "blobs").write_text("not a folder")
    with pytest.raises(StorageError, match="cannot write"):
        blobs.put_many([f"x{i}".encode() for i in range(8)])
    assert not list(tmp_path.rglob("*.tmp"))


def test_put_blobs_uses_put_many_or_put() -> None:
    store = MemoryStore()
    assert put_blobs(store.blobs, [b"a", b"b"]) == [
        hashlib.sha256(x).hexdigest() for x in (b"a", b"b")
    ]

    class OnlyPut:
        def __init__(self) -> None:
            self.data: dict[str, bytes] = {}

        def put(self, data: bytes) -> str:
            sha = hashlib.sha256(data).hexdigest()
            self.data[sha] = data
            return sha

    only = OnlyPut()
    put_blobs(only, [b"c", b"d"])  # type: ignore[arg-type]
    assert len(only.data) == 2


def test_every_output_a_compaction_took_out_is_in_the_blobs_after_reopening(tmp_path: Path) -> None:
    cm = ContextManager(workspace=tmp_path, session_id="s", context_window=8_000)
    cm.add({"role": "system", "content": "You are a coding agent."})
    cm.add({"role": "user", "content": "Fix the parser."})
    for i in range(30):
        cm.add_many(
            [
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": f"c{i}",
                            "type": "function",
                            "function": {
                                "name": "bash",
                                "arguments": f'{{"command": "cat f{i}.py"}}',
                            },
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": f"c{i}", "content": f"line {i}\n" * 300},
            ]
        )
    cm.add({"role": "user", "content": "go on"})
    cm.prepare()
    assert cm.last_prepare is not None and cm.last_prepare.changed
    again = ContextManager(workspace=tmp_path, session_id="s", context_window=8_000)
    # every tool output that left the view is recoverable exactly after reopening: from the
    # blobs, or (a body that is the logged message itself, stored once) from the log
    evidence = again.recovery.store
    pointers = {p.tool_use_id: p for p in evidence.pointers()}
    for i in range(30):
        text = f"line {i}\n" * 300
        sha = hashlib.sha256(text.encode()).hexdigest()
        p = pointers.get(f"c{i}")
        if p is None:  # not evidence (offloaded at ingest): its blob
            assert again.store.blobs.get(sha) == text.encode()
            continue
        got = evidence.restore(p)
        assert p.sha256 == sha and got.text == text and got.sha256_ok is True
        assert got.source == "archived" and got.problem is None
    # and the export writes each body byte for byte, wherever it is stored
    from contextfold.engine.export import export_session

    export_session(again.store, "s", tmp_path / "out")
    for p in pointers.values():
        assert p.sha256 is not None
        body = (tmp_path / "out" / "evidence" / p.sha256[:2] / f"{p.sha256}.txt").read_bytes()
        assert hashlib.sha256(body).hexdigest() == p.sha256


def test_a_big_batch_is_written_on_the_helper_threads_and_every_blob_is_whole(
    tmp_path: Path,
) -> None:
    from contextfold.storage import util

    blobs = FileBlobs(tmp_path)
    datas = [(f"{i}: " + "log line of a long build\n" * 300).encode() for i in range(400)]
    assert sum(map(len, datas)) >= util.PARALLEL_MIN_BYTES
    shas = blobs.put_many(datas)
    assert shas == [hashlib.sha256(d).hexdigest() for d in datas]
    assert all(blobs.get(s) == d for s, d in zip(shas, datas, strict=True))
    assert not list(tmp_path.rglob("*.tmp"))


def test_in_parallel_keeps_the_order_and_raises_the_first_error_after_every_part() -> None:
    import threading

    from contextfold.storage.util import PARALLEL_MIN_BYTES, in_parallel, pack, pack_many, unpack

    names: set[str] = set()

    def square(x: int) -> int:
        names.add(threading.current_thread().name)
        return x * x

    items = list(range(1000))
    assert in_parallel(square, items, PARALLEL_MIN_BYTES) == [x * x for x in items]
    if (os.cpu_count() or 1) > 1:
        assert len(names) > 1  # some parts ran on a helper thread
    assert in_parallel(square, items, 10) == [x * x for x in items]  # small: this thread

    ended: list[int] = []

    def fails_at_10(x: int) -> int:
        if x == 10:
            raise ValueError("bad item 10")
        ended.append(x)
        return x

    with pytest.raises(ValueError, match="bad item 10"):
        in_parallel(fails_at_10, items, PARALLEL_MIN_BYTES)
    assert 999 in ended  # (this thread's part failed) the helpers' parts went on to their end
    texts = ["short", "x" * 600, "é" * 5000, *(f"line {i}\n" * 200 for i in range(300))]
    packed = pack_many(texts)
    assert packed == [pack(t) for t in texts]
    assert [unpack(p) for p in packed] == texts


def test_in_parallel_does_the_work_itself_when_no_helper_can_take_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from contextfold.storage import util

    items = list(range(100))
    pool = util._helpers()
    if pool is None:
        pytest.skip("one core: every part runs on the calling thread anyway")

    def refused(*args: object, **kwargs: object) -> object:
        raise RuntimeError("cannot schedule new futures after interpreter shutdown")

    # at interpreter shutdown the pool takes no new work: the calling thread does all of it
    monkeypatch.setattr(pool, "submit", refused)
    assert util.in_parallel(lambda x: x + 1, items, util.PARALLEL_MIN_BYTES) == [
        x + 1 for x in items
    ]
    monkeypatch.undo()
    # called from a helper thread (a part that writes in parallel itself): no waiting on itself
    nested = pool.submit(util.in_parallel, lambda x: -x, items, util.PARALLEL_MIN_BYTES)
    assert nested.result(timeout=30) == [-x for x in items]
