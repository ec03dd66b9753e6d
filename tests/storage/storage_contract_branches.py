"""The storage contract for branches: a branch session shares its parent's history up to the
fork point (stored once, in the parent) and every read composes the two. Imported by each
backend's contract module, like tests/storage/storage_contract.py."""

from __future__ import annotations

import pytest

from contextfold.errors import StorageError
from contextfold.storage import ConcurrentWriteError, NewEvent, SearchDoc, Store
from tests.storage.storage_contract import StoreFactory, append


def _ev(i: int, kind: str = "message") -> NewEvent:
    return NewEvent(kind=kind, data={"i": i}, head=[i], detail={"d": i})


def _branch(store: Store, sid: str, parent: str, at: int, agent: str = "a") -> None:
    with store.transaction() as txn:
        txn.branch(sid, parent_id=parent, at=at, agent_id=agent)


def _ids(store: Store, sid: str, **kw: object) -> list[tuple[str, int, int]]:
    return [(e.session_id, e.seq, e.data["i"]) for e in store.read(sid, **kw)]  # type: ignore[arg-type]


def _family(store: Store) -> None:
    """p: events 0-5 (5 is a state event); b: p's first 4, then 100, 101; c: b's first 5."""
    append(store, "p", [_ev(i, "state" if i == 5 else "message") for i in range(6)], 0)
    _branch(store, "b", "p", 4)
    append(store, "b", [_ev(100), _ev(101)], 4)
    _branch(store, "c", "b", 5)
    append(store, "c", [_ev(200)], 5)


def test_branch_reads_parent_prefix_then_its_own(store_factory: StoreFactory) -> None:
    store = store_factory.new()
    _family(store)
    assert _ids(store, "b") == [("b", i, i) for i in range(4)] + [("b", 4, 100), ("b", 5, 101)]
    assert _ids(store, "c") == [("c", s, i) for s, i in enumerate([0, 1, 2, 3, 100, 200])]
    assert store.head("b") == 6 and store.head("c") == 6
    assert _ids(store, "b", start=3, stop=5) == [("b", 3, 3), ("b", 4, 100)]
    assert _ids(store, "c", start=4) == [("c", 4, 100), ("c", 5, 200)]
    assert [e.data["i"] for e in store.read_last("c", 3)] == [3, 100, 200]
    assert [e.data["i"] for e in store.read_last("b", 10)] == [0, 1, 2, 3, 100, 101]
    assert [e.seq for e in store.read_last("c", 2, kinds=["message"])] == [4, 5]
    heads = store.read_heads("c", details=True)
    assert [(h.seq, h.head, h.detail) for h in heads] == [
        (s, [i], {"d": i}) for s, i in enumerate([0, 1, 2, 3, 100, 200])
    ]
    assert [h.head for h in store.read_heads("c", start=2, stop=5)] == [[2], [3], [100]]
    # the parent is untouched, and what it gets later is not in its branches
    assert _ids(store, "p") == [("p", i, i) for i in range(6)]
    append(store, "p", [_ev(6)], 6)
    assert [e.data["i"] for e in store.read("b")] == [0, 1, 2, 3, 100, 101]


def test_branch_info_and_listing(store_factory: StoreFactory) -> None:
    store = store_factory.new()
    _family(store)
    b, c, p = store.session("b"), store.session("c"), store.session("p")
    assert b is not None and c is not None and p is not None
    assert (b.parent_id, b.fork_at, b.events, b.messages) == ("p", 4, 6, 6)
    assert (c.parent_id, c.fork_at, c.events, c.messages) == ("b", 5, 6, 6)
    assert (p.parent_id, p.fork_at) == (None, 0)
    assert {i.session_id for i in store.sessions()} == {"p", "b", "c"}
    assert store.branches("p") == ["b"] and store.branches("c") == []
    # a branch at the parent's very start, or at its end, is a branch too
    _branch(store, "e", "p", 0)
    _branch(store, "f", "p", 6)
    assert store.read("e") is not None and list(store.read("e")) == []
    assert [e.data["i"] for e in store.read("f")] == [0, 1, 2, 3, 4, 5]
    assert store.branches("p") == ["b", "e", "f"]


def test_bad_branches_are_refused_and_write_nothing(store_factory: StoreFactory) -> None:
    store = store_factory.new()
    _family(store)
    with pytest.raises(ConcurrentWriteError):
        _branch(store, "b", "p", 2)  # exists already (another writer made it)
    for parent, at, agent in [("nope", 0, "a"), ("p", 7, "a"), ("p", -1, "a"), ("p", 2, "z")]:
        with pytest.raises(StorageError):
            _branch(store, "x", parent, at, agent)
    with pytest.raises(StorageError):
        _branch(store, "x", "x", 0)
    assert store.session("x") is None
    with pytest.raises(ConcurrentWriteError):
        append(store, "b", [_ev(9)], 0)  # a branch has its prefix: expected_seq is not 0
    with pytest.raises(RuntimeError), store.transaction() as txn:
        txn.branch("y", parent_id="p", at=3, agent_id="a")
        raise RuntimeError("boom")
    assert store.session("y") is None and store.branches("p") == ["b"]


def test_deleting_a_parent_keeps_its_branches_whole(store_factory: StoreFactory) -> None:
    store = store_factory.new()
    _family(store)
    before_c = _ids(store, "c")
    before_b = _ids(store, "b")
    store.delete_session("b")  # the middle of the chain: c takes what it shared with b
    assert store.session("b") is None and _ids(store, "c") == before_c
    c = store.session("c")
    assert c is not None and (c.parent_id, c.fork_at, c.events) == ("p", 4, 6)
    assert store.branches("p") == ["c"]
    store.delete_session("p")  # the root: c stands alone now, its history unchanged
    assert _ids(store, "c") == before_c and len(before_b) == 6
    c = store.session("c")
    assert c is not None and (c.parent_id, c.fork_at, c.events, c.messages) == (None, 0, 6, 6)
    append(store, "c", [_ev(300)], 6)
    assert [e.data["i"] for e in store.read_last("c", 2)] == [200, 300]
    assert [h.head for h in store.read_heads("c")][:2] == [[0], [1]]


def test_branch_seen_by_another_store(store_factory: StoreFactory) -> None:
    writer, reader = store_factory.new(), store_factory.new()
    _family(writer)
    assert [e.data["i"] for e in reader.read("c")] == [0, 1, 2, 3, 100, 200]
    info = reader.session("c")
    assert info is not None and info.parent_id == "b"


def _doc(sid: str, doc_id: str, body: str, seq: int, keys: tuple[str, ...] = ()) -> SearchDoc:
    return SearchDoc(
        namespace="session",
        doc_id=doc_id,
        scope="a",
        session_id=sid,
        fields={"body": body},
        meta={"event": seq},
        keys=keys,
    )


def test_branch_search_and_lookup_cover_the_shared_past(store_factory: StoreFactory) -> None:
    """The shared past is indexed once, in the parent: a branch's session-scoped search and
    lookup find the parent's documents made before the fork point, never those after it."""
    store = store_factory.new()
    _family(store)
    with store.transaction() as txn:
        txn.index(
            [
                _doc("p", "p:1", "traceback zebra before", 1, ("cmd:make",)),
                _doc("p", "p:5", "traceback zebra after", 5, ("cmd:make",)),
                _doc("b", "b:4", "traceback zebra mine", 4, ("cmd:make",)),
                _doc("c", "c:5", "giraffe only here", 5),
            ]
        )
    found = store.search("session", "zebra", session_id="b", limit=10)
    assert {h.doc_id for h in found} == {"p:1", "b:4"}
    assert {h.session_id for h in found} == {"b"}
    assert {h.doc_id for h in store.search("session", "zebra", session_id="c")} == {"p:1", "b:4"}
    assert [h.doc_id for h in store.search("session", "zebra", session_id="b", limit=1)] in (
        ["p:1"],
        ["b:4"],
    )
    assert {h.doc_id for h in store.search("session", "zebra", session_id="p")} == {"p:1", "p:5"}
    assert store.lookup("session", session_id="b", keys=["cmd:make"]) == [
        ("cmd:make", "b:4"),
        ("cmd:make", "p:1"),
    ]
    assert store.lookup("session", session_id="c", prefixes=["cmd:"]) == [
        ("cmd:make", "b:4"),
        ("cmd:make", "p:1"),
    ]
    assert {h.doc_id for h in store.search("session", "zebra")} == {"p:1", "p:5", "b:4"}


__all__ = [n for n in dir() if n.startswith("test_")]
