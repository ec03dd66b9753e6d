"""Two writers (threads with a manager each, or processes) on one session: an add that raised
ContextFoldError stored nothing, an add that returned is stored exactly once, so a caller
that retries a refused add never duplicates it. On the embedded store, the in-memory store
and PostgreSQL."""

from __future__ import annotations

import contextlib
import multiprocessing
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from contextfold import ContextManager
from contextfold.errors import ContextFoldError
from contextfold.storage import MemoryStore, Store
from tests.support import pg_support

pytestmark = pytest.mark.timeout(300)

ADDS = 40


def _turn(tag: str, i: int) -> list[dict[str, Any]]:
    if i % 3:
        return [{"role": "user", "content": f"{tag} {i} " + "word " * 40}]
    return [
        {"role": "user", "content": f"{tag} {i} run it"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": f"{tag}{i}",
                    "type": "function",
                    "function": {"name": "ls", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": f"{tag}{i}", "content": f"{tag} {i} out " + "z " * 200},
    ]


def writer(open_manager: Callable[[], ContextManager], tag: str) -> dict[str, list[str]]:
    """Add ADDS batches; a refused one is retried once (after the manager reloaded). Returns
    the first message of each batch that returned and of each attempt that raised."""
    done: dict[str, list[str]] = {"ok": [], "refused": []}
    cm = open_manager()
    for i in range(ADDS):
        batch = _turn(tag, i)
        for _ in range(2):
            try:
                cm.add_many(batch)
            except ContextFoldError:
                done["refused"].append(batch[0]["content"])
                continue
            done["ok"].append(batch[0]["content"])
            break
        with contextlib.suppress(ContextFoldError):
            cm.prepare()  # compactions are units too, and meet conflicts as well
    cm.close()
    return done


def _process_writer(url: str, tag: str, queue: Any) -> None:
    queue.put(writer(lambda: ContextManager(store=url, session_id="s", context_window=3_000), tag))


def check(results: list[dict[str, list[str]]], history: list[str]) -> None:
    firsts = Counter(text for text in history if text.split(" ")[0] in ("a", "b"))
    ok = [t for r in results for t in r["ok"]]
    refused_only = {t for r in results for t in r["refused"]} - set(ok)
    assert {t: n for t, n in firsts.items() if n > 1} == {}  # nothing twice
    assert sorted(firsts) == sorted(ok)  # what returned is stored, and nothing else
    assert not refused_only & set(firsts)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store | str]:
    if request.param == "memory":
        yield MemoryStore()
    elif request.param == "sqlite":
        yield str(tmp_path / "ws")
    else:
        for factory in pg_support.schema_factory():
            yield f"{factory.url}?schema={factory.schema()}"


def _opener(target: Store | str) -> Callable[[], ContextManager]:
    return lambda: ContextManager(store=target, session_id="s", context_window=3_000)


def _first_lines(target: Store | str) -> list[str]:
    with _opener(target)() as cm:
        return [m.text for m in cm.history if m.role == "user"]


def test_two_threads_with_a_manager_each(target: Store | str) -> None:
    _opener(target)().close()
    results: list[dict[str, list[str]]] = []
    threads = [
        threading.Thread(target=lambda t=t: results.append(writer(_opener(target), t)))
        for t in "ab"
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert len(results) == 2
    check(results, _first_lines(target))


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_two_processes(backend: str, tmp_path: Path) -> None:
    if backend == "sqlite":
        url, cleanup = str(tmp_path / "ws"), None
    else:
        factory = pg_support.SchemaFactory(pg_support.require_postgres())
        url, cleanup = f"{factory.url}?schema={factory.schema()}", factory
    try:
        _opener(url)().close()
        ctx = multiprocessing.get_context("spawn")
        queue = ctx.Queue()
        procs = [ctx.Process(target=_process_writer, args=(url, t, queue)) for t in "ab"]
        for p in procs:
            p.start()
        results = [queue.get(timeout=300) for _ in procs]
        for p in procs:
            p.join(60)
        assert [p.exitcode for p in procs] == [0, 0]
        check(results, _first_lines(url))
    finally:
        if cleanup is not None:
            cleanup.cleanup()
