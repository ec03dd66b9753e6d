"""The storage contract, large units: a unit of work that indexes thousands of documents at
once (a long history's first request, a compaction that files every message it takes out of
the view) behaves exactly as documents indexed one at a time, and a unit that fails stores
none of it. Imported by every backend's contract module."""

from __future__ import annotations

from dataclasses import replace

import pytest

from contextfold.errors import StorageError
from contextfold.storage import SearchDoc, Store
from tests.storage.storage_contract import StoreFactory, append, doc, ev

#: more documents than one statement's lookup of ids covers (the backends work in chunks)
MANY = 1_300


def _docs(n: int, word: str, *, sid: str = "s") -> list[SearchDoc]:
    return [
        replace(
            doc("ev", f"{sid}{i}" if sid != "s" else f"d{i}", f"{word} item{i} shared", sid=sid),
            keys=(f"k:{word}:{i}",),
        )
        for i in range(n)
    ]


def _state(store: Store) -> tuple[object, ...]:
    return (
        store.head("s"),
        sorted(h.doc_id for h in store.search("ev", "shared", limit=5_000)),
        store.lookup("ev", session_id="s", prefixes=["k:"]),
        [h.meta for h in store.search("ev", "item7", limit=5)],
    )


def test_a_large_unit_indexes_like_documents_one_at_a_time(store_factory: StoreFactory) -> None:
    bulk = store_factory.new()
    with bulk.transaction() as txn:
        txn.index(_docs(MANY, "alpha"))
    with bulk.transaction() as txn:  # and one at a time, in another session
        for d in _docs(5, "alpha", sid="t"):
            txn.index([d])
    assert {h.doc_id for h in bulk.search("ev", "item3 alpha", session_id="t")} >= {"t3"}
    hits = bulk.search("ev", "item1234")
    assert [h.doc_id for h in hits] == ["d1234"] and hits[0].meta == {"id": "d1234"}
    assert len(bulk.lookup("ev", session_id="s", prefixes=["k:alpha:"])) == MANY
    assert len(bulk.search("ev", "shared", session_id="s", limit=5_000)) == MANY
    # indexed again in one unit, some twice (the last one wins): rows and keys replaced
    again = _docs(MANY, "beta")
    again.append(replace(doc("ev", "d3", "gamma item3 shared"), keys=("k:gamma:3",)))
    with bulk.transaction() as txn:
        txn.index(again)
    assert bulk.search("ev", "alpha", session_id="s") == []
    assert bulk.lookup("ev", session_id="s", prefixes=["k:alpha:"]) == []
    assert len(bulk.search("ev", "shared", session_id="s", limit=5_000)) == MANY
    assert [h.doc_id for h in bulk.search("ev", "gamma")] == ["d3"]
    assert bulk.lookup("ev", session_id="s", keys=["k:beta:3"], prefixes=["k:gamma:"]) == [
        ("k:gamma:3", "d3")
    ]
    assert len(bulk.lookup("ev", session_id="t", prefixes=["k:alpha:"])) == 5


def test_a_failed_large_unit_leaves_everything_as_it_was(store_factory: StoreFactory) -> None:
    store = store_factory.new()
    append(store, "s", [ev(n=0)], 0)
    with store.transaction() as txn:
        txn.index(_docs(40, "before"))
    was = _state(store)
    with pytest.raises(RuntimeError), store.transaction() as txn:
        txn.append("s", [ev(n=i) for i in range(1, MANY)], expected_seq=1, agent_id="a")
        txn.index(_docs(MANY, "after"))
        txn.add_keys("ev", "s", {"d1": ["k:extra"]})
        raise RuntimeError("the unit fails after everything was written")
    assert _state(store) == was
    assert store.search("ev", "after") == []
    # a unit whose last document is refused stores nothing either
    bad = [*_docs(MANY, "after"), replace(doc("ev", "bad", "x"), keys=("",))]
    with pytest.raises(StorageError), store.transaction() as txn:
        txn.append("s", [ev(n=1)], expected_seq=1, agent_id="a")
        txn.index(bad)
    assert _state(store) == was
    # and the same unit, valid, then commits whole
    with store.transaction() as txn:
        txn.append("s", [ev(n=1)], expected_seq=1, agent_id="a")
        txn.index(_docs(MANY, "after"))
    assert store.head("s") == 2 and len(store.search("ev", "after", limit=5_000)) == MANY
