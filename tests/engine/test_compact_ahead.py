"""ContextManager.compact_ahead: after an answer, the compaction the next prepare() would make
is made ahead, so that call finds its view ready; the history is never changed, and a storage
failure leaves the session exactly as before."""

from __future__ import annotations

from typing import Any

import pytest

from contextfold import ContextManager
from contextfold.errors import StorageError
from contextfold.storage import MemoryStore
from tests.engine.test_manager_failed_units import OutageStore, fresh, held

WINDOW = 3_000


def tool_turn(i: int, words: int = 120) -> list[dict[str, Any]]:
    call = {"id": f"c{i}", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    return [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{i}", "content": f"out {i} " + "z " * words},
    ]


def grow_until_due(cm: ContextManager, lookahead: int) -> int:
    """Add tool turns (each prepared, as an agent would) until compaction is due within
    ``lookahead`` tokens; returns the turns added."""
    cm.add_many(
        [
            {"role": "system", "content": "You are a careful agent."},
            {"role": "user", "content": "list the files"},
        ]
    )
    for i in range(200):
        cm.prepare()
        if cm.compaction_due(lookahead):
            return i
        cm.add_many(tool_turn(i))
    raise AssertionError("never due")


def test_compacting_ahead_leaves_the_next_prepare_nothing_to_do() -> None:
    cm = ContextManager(store=MemoryStore(), session_id="s", context_window=WINDOW)
    grow_until_due(cm, lookahead=400)
    history = [(m.role, m.text) for m in cm.history]
    records = len(cm.records())
    record = cm.compact_ahead(400)
    assert record is not None and record.changed
    assert len(cm.records()) == records + 1
    assert [(m.role, m.text) for m in cm.history] == history  # the history is never changed
    assert not cm.compaction_due(400)  # the lookahead is bought
    cm.add_many(tool_turn(999, words=100))  # the expected continuation (under 400 tokens)
    cm.prepare()
    assert cm.last_prepare is not None and not cm.last_prepare.changed  # its view was ready
    assert cm.view_tokens <= WINDOW
    view = cm.view_messages
    assert view[0].role == "system" and any(m.role == "user" for m in view)


def test_nothing_due_changes_nothing() -> None:
    cm = ContextManager(store=MemoryStore(), session_id="s", context_window=100_000)
    cm.add_many([{"role": "user", "content": "hi"}, *tool_turn(0)])
    cm.prepare()
    before = [m.text for m in cm.view_messages]
    assert not cm.compaction_due(100)
    assert cm.compact_ahead(100) is None
    assert [m.text for m in cm.view_messages] == before and not cm.records()


def test_an_unexpected_continuation_is_compacted_on_its_own_path() -> None:
    cm = ContextManager(store=MemoryStore(), session_id="s", context_window=WINDOW)
    grow_until_due(cm, lookahead=200)
    assert cm.compact_ahead(200) is not None
    # far more than foreseen: prepare() decides again on what it has, as always
    cm.add_many(tool_turn(500, words=900))
    cm.prepare()
    assert cm.view_tokens <= WINDOW
    assert cm.history[-1].text.startswith("out 500")


def test_a_storage_failure_ahead_leaves_the_session_as_before() -> None:
    store = OutageStore()
    cm = ContextManager(store=store, session_id="s", context_window=WINDOW)
    grow_until_due(cm, lookahead=400)
    before = held(cm)
    store.down = True
    with pytest.raises(StorageError):
        cm.compact_ahead(400)
    store.down = False
    assert held(cm) == before == fresh(store)
    assert cm.compact_ahead(400) is not None  # once the store is back it is done, once
    assert held(cm) == fresh(store)


def test_the_lookahead_is_the_largest_growth_of_the_latest_turns() -> None:
    from contextfold.engine.ahead import MARGIN, Lookahead

    default = Lookahead()
    for total in (100, 400, 500):
        default.note(total)
    assert default.tokens == int(MARGIN * 300) and MARGIN > 1  # with a margin by default
    look = Lookahead(keep=3, margin=1.0)
    assert look.tokens == 0  # nothing known yet: nothing foreseen
    for total in (100, 400, 500, 450, 1_450, 2_450):  # a rewrite shrank it once: no growth
        look.note(total)
    assert look.tokens == 1_000  # the largest of the last three growths (100, 1000, 1000)
    look.note(2_460)
    look.note(2_470)
    look.note(2_480)
    assert look.tokens == 10  # the large ones are older than the last three
