"""After any failed unit (add, staged commit, compaction) the manager holds exactly what is
stored, even when the store cannot be read at that moment: the next call reloads first, and
works once the store is back."""

from __future__ import annotations

from typing import Any

import pytest

from contextfold import ContextManager
from contextfold.engine import reopen
from contextfold.errors import StorageError
from contextfold.storage import MemoryStore


class OutageStore(MemoryStore):
    """A store that can be taken down (every call raises StorageError) and brought back;
    ``interrupt`` makes the next transaction raise KeyboardInterrupt instead."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.interrupt = False

    def _check_open(self) -> None:
        if self.down:
            raise StorageError("the database server is unreachable")
        super()._check_open()

    def transaction(self) -> Any:
        if self.interrupt:
            self.interrupt = False
            raise KeyboardInterrupt
        return super().transaction()


def turn(i: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"request {i} " + "word " * 80},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": f"c{i}", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": f"c{i}", "content": f"out {i} " + "z " * 400},
        {"role": "assistant", "content": f"done {i}"},
    ]


def held(cm: ContextManager) -> tuple[Any, ...]:
    history = [(m.role, m.text, m.uuid) for m in cm.history]
    return (
        history,
        [m.text for m in cm.view_messages],
        len(cm.records()),
        reopen.state_data(cm.context),
    )


def fresh(store: MemoryStore) -> tuple[Any, ...]:
    return held(ContextManager(store=store, session_id="s", context_window=3_000))


def test_add_while_the_store_is_down() -> None:
    store = OutageStore()
    cm = ContextManager(store=store, session_id="s", context_window=3_000)
    cm.add_many(turn(0))
    before = held(cm)
    store.down = True
    with pytest.raises(StorageError):
        cm.add_many(turn(1))
    assert not cm.in_sync
    with pytest.raises(StorageError):  # nothing served from what was not stored
        cm.prepare()
    store.down = False
    assert held(cm) == before == fresh(store) and cm.in_sync
    cm.add_many(turn(1))  # the retry stores it once
    assert held(cm) == fresh(store) and len(cm.history) == 8


def test_staged_commit_while_the_store_is_down() -> None:
    store = OutageStore()
    cm = ContextManager(store=store, session_id="s", context_window=3_000)
    cm.add_many(turn(0))
    before = held(cm)
    with cm.staged():
        cm.add_many(turn(1))
    assert cm.stored_length == 4 and len(cm.history) == 8
    store.down = True
    with pytest.raises(StorageError):
        cm.commit_staged()
    store.down = False
    assert cm.stored_length == 4
    assert held(cm) == before == fresh(store)


def test_compaction_while_the_store_is_down() -> None:
    store = OutageStore()
    cm = ContextManager(store=store, session_id="s", context_window=3_000)
    for i in range(6):
        cm.add_many(turn(i))
    before = held(cm)
    store.down = True
    with pytest.raises(StorageError):
        cm.prepare()
    store.down = False
    assert held(cm) == before == fresh(store)
    view = cm.prepare()
    assert len(cm.records()) == 1 and held(cm) == fresh(store)
    assert view == ContextManager(store=store, session_id="s", context_window=3_000).prepare()


def test_interrupted_commit_leaves_nothing_in_memory() -> None:
    store = OutageStore()
    cm = ContextManager(store=store, session_id="s", context_window=3_000)
    cm.add_many(turn(0))
    before = held(cm)
    store.interrupt = True
    with pytest.raises(KeyboardInterrupt):
        cm.add_many(turn(1))
    assert held(cm) == before == fresh(store)
    cm.add_many(turn(1))
    assert held(cm) == fresh(store)


def test_refresh_brings_a_stale_manager_back() -> None:
    store = OutageStore()
    cm = ContextManager(store=store, session_id="s", context_window=3_000)
    cm.add_many(turn(0))
    store.down = True
    with pytest.raises(StorageError):
        cm.add_many(turn(1))
    with pytest.raises(StorageError):
        cm.refresh()
    store.down = False
    cm.refresh()
    assert cm.in_sync and cm.stored_length == 4 == len(cm.history)


def test_staged_writes_dropped_by_a_failed_unit_are_never_reported_stored() -> None:
    store = OutageStore()
    cm = ContextManager(store=store, session_id="s", context_window=3_000)
    for i in range(5):
        cm.add_many(turn(i))
    before = fresh(store)
    with cm.staged():
        cm.add_many(turn(5))
    store.down = True
    with pytest.raises(StorageError):
        cm.prepare()  # the compaction takes the staged writes along, and fails
    store.down = False
    with pytest.raises(StorageError, match="staged writes were dropped"):
        cm.commit_staged()
    assert held(cm) == before == fresh(store) and cm.in_sync


def test_staged_writes_dropped_by_a_conflict_are_never_reported_stored() -> None:
    store = OutageStore()
    cm = ContextManager(store=store, session_id="s", context_window=3_000)
    other = ContextManager(store=store, session_id="s", context_window=3_000)
    for i in range(5):
        cm.add_many(turn(i))
    with cm.staged():
        cm.add_many(turn(5))
    other.refresh()
    other.add({"role": "user", "content": "another writer"})
    with pytest.raises(StorageError):
        cm.prepare()  # the compaction takes the staged writes along: a conflict
    with pytest.raises(StorageError, match="staged writes were dropped"):
        cm.commit_staged()
    assert held(cm) == fresh(store) and cm.history[-1].text == "another writer"
    with cm.staged():  # a new turn starts clean
        cm.add_many(turn(6))
    cm.commit_staged()
    assert held(cm) == fresh(store)


def test_prepare_after_another_writer_appended_compacts_the_latest_log() -> None:
    """An add that returned is stored; the prepare after it does not fail because another
    writer appended meanwhile: the compaction is decided again on the latest log."""
    store = OutageStore()
    cm = ContextManager(store=store, session_id="s", context_window=3_000)
    other = ContextManager(store=store, session_id="s", context_window=3_000)
    for i in range(6):
        cm.add_many(turn(i))
    other.refresh()
    other.add({"role": "user", "content": "another writer"})
    view = cm.prepare()  # behind by one message: reloads and compacts the latest log
    assert cm.history[-1].text == "another writer" and len(cm.records()) == 1
    assert view == ContextManager(store=store, session_id="s", context_window=3_000).prepare()
