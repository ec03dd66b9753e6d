"""Contract: ``Transaction.delete_session`` replaces a session atomically, and a session's title
comes from the first append that has one (imported by every backend's contract module)."""

from __future__ import annotations

import pytest

from contextfold.storage import ConcurrentWriteError
from tests.storage.storage_contract import StoreFactory, append, doc, ev


def _state(store: object) -> tuple[list[object], object, list[str], list[str]]:
    return (
        [e.data for e in store.read("s")],  # type: ignore[attr-defined]
        store.get_doc("cache", "s/view"),  # type: ignore[attr-defined]
        [h.doc_id for h in store.search("session", "old")],  # type: ignore[attr-defined]
        [h.doc_id for h in store.search("session", "new")],  # type: ignore[attr-defined]
    )


def test_a_session_is_replaced_in_one_transaction(store_factory: StoreFactory) -> None:
    store = store_factory.new()
    append(store, "s", [ev(n=1), ev(n=2)], 0)
    append(store, "t", [ev(n=9)], 0)
    with store.transaction() as txn:
        txn.put_doc("cache", "s/view", {"v": 1})
        txn.index([doc("session", "s:0", "old words", sid="s")])
        txn.index([doc("session", "t:0", "other words", sid="t")])
    old = _state(store)
    assert old == ([{"n": 1}, {"n": 2}], {"v": 1}, ["s:0"], [])

    with pytest.raises(RuntimeError), store.transaction() as txn:
        txn.delete_session("s")
        txn.append("s", [ev(n=3)], expected_seq=0, agent_id="a")
        raise RuntimeError("the new session could not be written")
    assert _state(store) == old  # rolled back: the old session as it was

    with pytest.raises(ConcurrentWriteError):  # without the delete, the id is taken
        append(store, "s", [ev(n=3)], 0)

    with store.transaction() as txn:
        txn.delete_session("s")
        txn.append("s", [ev(n=3)], expected_seq=0, agent_id="b")
        txn.index([doc("session", "s:0", "new words", sid="s")])
    assert _state(store) == ([{"n": 3}], None, [], ["s:0"])
    info = store.session("s")
    assert info is not None and info.agent_id == "b" and info.events == 1
    assert [e.data for e in store.read("t")] == [{"n": 9}]  # other sessions untouched
    assert [h.doc_id for h in store.search("session", "other")] == ["t:0"]


def test_the_title_comes_from_the_first_append_that_has_one(store_factory: StoreFactory) -> None:
    """A session that starts with its system prompt gets its title from the first user
    message, appended later (the same on every backend: ``sessions list`` shows it)."""
    store = store_factory.new()
    with store.transaction() as txn:
        txn.append("s", [ev(role="system")], expected_seq=0, agent_id="a")
    with store.transaction() as txn:
        txn.append("s", [ev(role="user")], expected_seq=1, agent_id="a", title="Fix the bug")
    with store.transaction() as txn:
        txn.append("s", [ev(role="user")], expected_seq=2, agent_id="a", title="Later")
    info = store.session("s")
    assert info is not None and info.title == "Fix the bug"
    assert [i.title for i in store.sessions() if i.session_id == "s"] == ["Fix the bug"]
