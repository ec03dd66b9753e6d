"""PostgreSQL faults through ContextManager, on a private server the tests start themselves
(tests/support/pg_private.py): stopped (``pg_ctl stop -m immediate``), restarted, made read-only, its
backends terminated. After each failed call the session is exactly what is stored, in memory
and in the store; the time to the error is bounded by the store's timeout; the next call works
once the server is back."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from contextfold import ContextManager
from contextfold.engine import reopen
from contextfold.errors import StorageError
from contextfold.storage.postgres import PostgresStore
from tests.support.pg_private import PrivatePostgres, StallingProxy, private_postgres

pytestmark = pytest.mark.timeout(300)

#: the store timeout the tests configure (seconds), through the URL parameter
TIMEOUT = 2


@pytest.fixture(scope="module")
def server() -> Iterator[PrivatePostgres]:
    yield from private_postgres()


@pytest.fixture
def url(server: PrivatePostgres, request: pytest.FixtureRequest) -> Iterator[str]:
    if not server.accepts():
        server.start()
    server.set_read_only(False)
    schema = "t_" + request.node.name.split("[")[0][-40:].lower()
    server.sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    yield f"{server.url}?schema={schema}&timeout={TIMEOUT}"
    if not server.accepts():
        server.start()
    server.set_read_only(False)


def turn(i: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"request {i}: " + " ".join(f"w{i}x{j}" for j in range(60))},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": f"c{i}", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": f"c{i}", "content": f"out {i} " + "z " * 300},
        {"role": "assistant", "content": f"done {i}"},
    ]


def snapshot(cm: ContextManager) -> tuple[Any, ...]:
    """What a manager holds (no compaction run): history, view, records, compactor state
    (boundary, summaries, counters, calibration)."""
    history = [(m.role, m.text, m.uuid) for m in cm.history]  # (reloads a stale manager)
    state = reopen.state_data(cm.context)
    return (
        history,
        [(m.role, m.text) for m in cm.view_messages],
        len(cm.records()),
        state,
    )


def stored(url: str) -> tuple[Any, ...]:
    with ContextManager(store=url, session_id="s", context_window=4_000) as fresh:
        return snapshot(fresh)


def timed_failure(fn: Any) -> float:
    start = time.monotonic()
    with pytest.raises(StorageError):
        fn()
    return time.monotonic() - start


def bound() -> float:
    """The longest a failed call may take: a few waits of the store's timeout (the call, the
    reload that finds the server down) plus scheduling slack on a busy machine."""
    return 3 * TIMEOUT + 5


def test_server_stopped_add_fails_in_bounded_time_and_recovers(
    server: PrivatePostgres, url: str
) -> None:
    cm = ContextManager(store=url, session_id="s", context_window=4_000)
    for i in range(3):
        cm.add_many(turn(i))
        cm.prepare()
    before = stored(url)
    server.stop()
    first = timed_failure(lambda: cm.add_many(turn(3)))
    again = timed_failure(lambda: cm.add_many(turn(3)))  # the server is known to be down
    assert first < bound() and again < bound(), (first, again)
    assert not cm.in_sync
    with pytest.raises(StorageError):
        len(cm.history)  # nothing is served from a state that was not stored
    server.start()
    assert snapshot(cm) == before == stored(url)  # exactly what is stored, once it is back
    cm.add_many(turn(3))  # the same call, retried: stored once
    cm.prepare()
    after = stored(url)
    assert snapshot(cm) == after
    uuids = [u for _, _, u in after[0]]
    assert len(uuids) == len(set(uuids)) == len(before[0]) + 4
    cm.close()


def test_failed_commit_of_staged_writes_leaves_the_stored_session(
    server: PrivatePostgres, url: str
) -> None:
    cm = ContextManager(store=url, session_id="s", context_window=4_000)
    cm.add_many(turn(0))
    before = stored(url)
    with cm.staged():
        cm.add_many(turn(1))
    assert len(cm.history) == 8 and cm.stored_length == 4
    server.stop()
    assert timed_failure(cm.commit_staged) < bound()
    server.start()
    assert snapshot(cm) == before == stored(url)
    assert cm.stored_length == 4 and not cm.has_staged
    cm.add_many(turn(1))
    assert snapshot(cm) == stored(url) and len(cm.history) == 8
    cm.close()


def test_compaction_during_an_outage_leaves_the_stored_session(
    server: PrivatePostgres, url: str
) -> None:
    cm = ContextManager(store=url, session_id="s", context_window=4_000)
    for i in range(2):
        cm.add_many(turn(i))
    before = stored(url)
    with cm.staged():
        for i in range(2, 8):
            cm.add_many(turn(i))  # over the window: the next prepare compacts
    server.stop()
    assert timed_failure(cm.prepare) < bound()
    server.start()
    assert snapshot(cm) == before == stored(url)
    for i in range(2, 8):
        cm.add_many(turn(i))
    view = cm.prepare()
    assert len(cm.records()) >= 1 and snapshot(cm) == stored(url)
    assert view == ContextManager(store=url, session_id="s", context_window=4_000).prepare()
    cm.close()


def test_restart_between_calls_is_invisible(server: PrivatePostgres, url: str) -> None:
    cm = ContextManager(store=url, session_id="s", context_window=4_000)
    cm.add_many(turn(0))
    server.restart()  # every pooled connection is dead now
    cm.add_many(turn(1))
    cm.prepare()
    assert snapshot(cm) == stored(url) and len(cm.history) == 8
    cm.close()


def test_terminated_backends_are_replaced(server: PrivatePostgres, url: str) -> None:
    cm = ContextManager(store=url, session_id="s", context_window=4_000)
    for i in range(3):
        cm.add_many(turn(i))
        assert server.terminate_backends() >= 1
    cm.prepare()
    assert snapshot(cm) == stored(url) and len(cm.history) == 12
    cm.close()


def test_read_only_server_refuses_writes_and_keeps_the_session(
    server: PrivatePostgres, url: str
) -> None:
    cm = ContextManager(store=url, session_id="s", context_window=4_000)
    cm.add_many(turn(0))
    before = stored(url)
    server.set_read_only(True)
    with pytest.raises(StorageError, match="read-only"):
        cm.add_many(turn(1))
    assert cm.in_sync  # the reload could read: nothing stale
    assert snapshot(cm) == before == stored(url)
    server.set_read_only(False)
    cm.add_many(turn(1))
    assert snapshot(cm) == stored(url) and len(cm.history) == 8
    cm.close()


def test_opening_a_store_while_the_server_is_down_fails_in_bounded_time(
    server: PrivatePostgres, url: str
) -> None:
    server.stop()
    assert timed_failure(lambda: PostgresStore(url)) < bound()
    server.start()
    with PostgresStore(url) as store:
        assert store.timeout == TIMEOUT
        assert store.head("s") == 0


@pytest.mark.parametrize("fault", ["frozen", "stalled network"])
def test_a_frozen_server_or_a_stalled_network_fails_in_bounded_time_and_recovers(
    server: PrivatePostgres, url: str, fault: str
) -> None:
    """SIGSTOP on the postmaster and every backend (connections stay open, the kernel keeps
    accepting bytes, nothing answers), or a TCP proxy that stops forwarding: each call fails
    within the bound instead of hanging; after SIGCONT (or the proxy flowing again) the
    session is exactly as stored and the same call, retried, is stored once."""
    proxy = StallingProxy(server.port) if fault == "stalled network" else None
    if proxy is not None:
        url = proxy.url(url)
    try:
        cm = ContextManager(store=url, session_id="s", context_window=4_000)
        for i in range(3):
            cm.add_many(turn(i))
            cm.prepare()
        before = stored(url)
        if proxy is not None:
            proxy.stall()
        else:
            server.freeze()
        took = [timed_failure(lambda: cm.add_many(turn(3))) for _ in range(2)]
        took.append(timed_failure(lambda: PostgresStore(url).close()))  # opening one, too
        if proxy is not None:
            proxy.resume()
        else:
            server.thaw()
        assert max(took) < bound(), took
        assert snapshot(cm) == before == stored(url)
        cm.add_many(turn(3))
        cm.prepare()
        after = stored(url)
        assert snapshot(cm) == after
        uuids = [u for _, _, u in after[0]]
        assert len(uuids) == len(set(uuids)) == len(before[0]) + 4
        print(f"\n{fault}: failures after {[round(t, 2) for t in took]} s")
        cm.close()
    finally:
        server.thaw()
        if proxy is not None:
            proxy.close()
