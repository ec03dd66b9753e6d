"""Harder than tests/engine/test_concurrent_refusals.py: four writers on one session (threads with a
manager each, or processes), each mixing single adds, batches, staged writes committed later
and compactions, with a small window so that compactions (units that meet conflicts too) run
all the time. Every call that raised ContextFoldError must have stored nothing, every call
that returned must be stored exactly once, on SQLite and on PostgreSQL.

``CONTEXTFOLD_STRESS_ROUNDS`` sets the calls per writer (default 60)."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from contextfold import ContextManager
from contextfold.errors import ContextFoldError
from tests.support import pg_support

pytestmark = pytest.mark.timeout(600)

ROUNDS = int(os.environ.get("CONTEXTFOLD_STRESS_ROUNDS", "60"))
WRITERS = "abcd"
WINDOW = 2_500


def _batch(tag: str, i: int) -> list[dict[str, Any]]:
    head = f"{tag}:{i}"
    if i % 4 == 1:
        return [{"role": "user", "content": f"{head} " + "word " * 30}]
    return [
        {"role": "user", "content": f"{head} run it"},
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
        {"role": "tool", "tool_call_id": f"{tag}{i}", "content": f"{head} out " + "z " * 150},
    ]


def _one_call(cm: ContextManager, tag: str, i: int) -> None:
    """One call of the writer's mix; raises ContextFoldError when refused."""
    batch = _batch(tag, i)
    if i % 4 == 1:
        cm.add(batch[0])
    elif i % 4 == 2:
        with cm.staged():
            cm.add_many(batch)
        cm.commit_staged()
    else:
        cm.add_many(batch)


def writer(open_manager: Callable[[], ContextManager], tag: str) -> dict[str, list[str]]:
    done: dict[str, list[str]] = {"ok": [], "refused": []}
    cm = open_manager()
    for i in range(ROUNDS):
        head = f"{tag}:{i}"
        for _ in range(3):
            try:
                _one_call(cm, tag, i)
            except ContextFoldError:
                done["refused"].append(head)
                continue
            done["ok"].append(head)
            break
        if i % 3 == 0:
            with contextlib.suppress(ContextFoldError):
                cm.prepare()
    cm.close()
    return done


def _process_writer(url: str, tag: str, queue: Any) -> None:
    queue.put(writer(_opener(url), tag))


def _opener(target: str) -> Callable[[], ContextManager]:
    return lambda: ContextManager(store=target, session_id="s", context_window=WINDOW)


def _check(results: list[dict[str, list[str]]], target: str) -> None:
    with _opener(target)() as cm:
        heads = [m.text.split(" ", 1)[0] for m in cm.history if m.role == "user"]
    stored = Counter(heads)
    ok = [h for r in results for h in r["ok"]]
    refused = [h for r in results for h in r["refused"]]
    twice = {h: n for h, n in stored.items() if n > 1}
    refused_stored = sorted(set(refused) - set(ok) & set(stored))
    assert twice == {}, f"stored twice: {twice}"
    assert refused_stored == [], f"refused, yet stored: {refused_stored}"
    assert sorted(stored) == sorted(ok), "a returned call is not stored"
    print(f"\n{len(ok)} calls stored once, {len(refused)} refusals, none of them stored")


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "ws")
    else:
        for factory in pg_support.schema_factory():
            yield f"{factory.url}?schema={factory.schema()}"


def test_four_threads_with_a_manager_each(target: str) -> None:
    _opener(target)().close()
    results: list[dict[str, list[str]]] = []
    threads = [
        threading.Thread(target=lambda t=t: results.append(writer(_opener(target), t)))
        for t in WRITERS
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert len(results) == len(WRITERS)
    _check(results, target)


def test_four_processes(target: str) -> None:
    _opener(target)().close()
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_process_writer, args=(target, t, queue)) for t in WRITERS]
    for p in procs:
        p.start()
    results = [queue.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * len(WRITERS)
    _check(results, target)
