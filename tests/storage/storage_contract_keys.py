"""The storage contract, exact lookup keys: every backend must pass these tests, unchanged.

Imported by the backends' contract modules next to :mod:`tests.storage.storage_contract` (same
``store_factory`` fixture). A search document may carry exact keys; :meth:`Store.lookup`
finds, for one session and namespace, which documents have which keys (equal to a key, or
starting with a prefix), and :meth:`Store.metas` reads documents' meta by id.
"""

from __future__ import annotations

import pytest

from contextfold.errors import StorageError
from contextfold.storage import SearchDoc, Store
from tests.storage.storage_contract import StoreFactory, append, ev


def kdoc(
    doc_id: str, keys: list[str], *, sid: str = "s", ns: str = "ev", body: str = "x"
) -> SearchDoc:
    return SearchDoc(
        namespace=ns,
        doc_id=doc_id,
        scope="a",
        session_id=sid,
        fields={"body": body},
        meta={"id": doc_id},
        keys=keys,
    )


def _index(store: Store, docs: list[SearchDoc]) -> None:
    with store.transaction() as txn:
        txn.index(docs)


def test_lookup_exact_keys_and_prefixes(store_factory: StoreFactory) -> None:
    store = store_factory.new()
    _index(
        store,
        [
            kdoc("d1", ["cmd:pytest -x", "path:a/b.py", "path:b.py"]),
            kdoc("d2", ["cmd:pytest", "path:b.py", "cmd:pytest -x"]),
            kdoc("d3", ["cmdx", "tool:bash"]),
            kdoc("o1", ["cmd:pytest -x"], sid="other"),
            kdoc("n1", ["cmd:pytest -x"], ns="memo"),
        ],
    )
    assert store.lookup("ev", session_id="s", keys=["cmd:pytest -x"]) == [
        ("cmd:pytest -x", "d1"),
        ("cmd:pytest -x", "d2"),
    ]
    # a prefix is a prefix of the key, nothing else ("cmdx" does not start with "cmd:")
    assert store.lookup("ev", session_id="s", prefixes=["cmd:"]) == [
        ("cmd:pytest", "d2"),
        ("cmd:pytest -x", "d1"),
        ("cmd:pytest -x", "d2"),
    ]
    both = store.lookup("ev", session_id="s", keys=["tool:bash", "absent"], prefixes=["path:b"])
    assert both == [("path:b.py", "d1"), ("path:b.py", "d2"), ("tool:bash", "d3")]
    assert len(store.lookup("ev", session_id="s", prefixes=[""])) == 8
    assert store.lookup("ev", session_id="s") == []
    assert store.lookup("ev", session_id="nobody", keys=["cmd:pytest -x"]) == []
    assert store.lookup("memo", session_id="s", prefixes=["cmd:"]) == [("cmd:pytest -x", "n1")]
    assert store_factory.new().lookup("ev", session_id="other", keys=["cmd:pytest -x"]) == [
        ("cmd:pytest -x", "o1")
    ]


def test_lookup_orders_by_code_point(store_factory: StoreFactory) -> None:
    """Keys compare by code point on every backend (not by a locale's collation), so a prefix
    ending in any character is one range of keys."""
    store = store_factory.new()
    keys = ["k:a b", "k:aB", "k:a~", "k:aé", "k:a中", "k:a😀", "k:A", "k:b", "k:a"]
    _index(store, [kdoc("d", keys)])
    assert [k for k, _ in store.lookup("ev", session_id="s", prefixes=["k:"])] == sorted(keys)
    assert [k for k, _ in store.lookup("ev", session_id="s", prefixes=["k:a"])] == sorted(
        k for k in keys if k.startswith("k:a")
    )
    assert store.lookup("ev", session_id="s", prefixes=["k:a中"]) == [("k:a中", "d")]
    assert store.lookup("ev", session_id="s", prefixes=["k:a\uffff"]) == []
    assert store.lookup("ev", session_id="s", prefixes=["k:a "]) == [("k:a b", "d")]


def test_keys_replaced_added_and_removed(store_factory: StoreFactory) -> None:
    store = store_factory.new()
    _index(store, [kdoc("d1", ["k:old", "k:both"]), kdoc("d2", ["k:both"], sid="t")])
    _index(store, [kdoc("d1", ["k:new", "k:both"])])  # indexed again: its new keys only
    assert store.lookup("ev", session_id="s", prefixes=["k:"]) == [
        ("k:both", "d1"),
        ("k:new", "d1"),
    ]
    with store.transaction() as txn:  # keys for an indexed document, and under any other id
        txn.add_keys("ev", "s", {"d1": ["k:more", "k:new"], "s:#terms": ["t:x", "t:y"]})
        txn.add_keys("ev", "s", {"s:#terms": ["t:x"]})  # kept once
    assert store.lookup("ev", session_id="s", prefixes=["t:"]) == [
        ("t:x", "s:#terms"),
        ("t:y", "s:#terms"),
    ]
    assert ("k:more", "d1") in store.lookup("ev", session_id="s", keys=["k:more"])
    with store.transaction() as txn:
        txn.unindex("ev", session_id="s")
    assert store.lookup("ev", session_id="s", prefixes=[""]) == []
    assert store.lookup("ev", session_id="t", keys=["k:both"]) == [("k:both", "d2")]
    append(store, "t", [ev()], 0)
    store.delete_session("t")
    assert store.lookup("ev", session_id="t", prefixes=[""]) == []


def test_metas_by_id_and_update(store_factory: StoreFactory) -> None:
    store = store_factory.new()
    _index(store, [kdoc("d1", ["k:1"], body="alpha words"), kdoc("d2", [], body="beta")])
    assert store.metas("ev", ["d2", "d1", "absent", "d1"]) == {
        "d1": {"id": "d1"},
        "d2": {"id": "d2"},
    }
    assert store.metas("ev", []) == {} and store.metas("other", ["d1"]) == {}
    with store.transaction() as txn:
        txn.update_meta("ev", {"d1": {"id": "d1", "n": 7}, "absent": {"x": 1}})
    assert store.metas("ev", ["d1", "absent"]) == {"d1": {"id": "d1", "n": 7}}
    hit = store.search("ev", "alpha")[0]  # text, ranking and keys are left alone
    assert hit.doc_id == "d1" and hit.meta == {"id": "d1", "n": 7}
    assert store.lookup("ev", session_id="s", keys=["k:1"]) == [("k:1", "d1")]


def test_bad_keys_are_refused_and_write_nothing(store_factory: StoreFactory) -> None:
    store = store_factory.new()
    bad: list[object] = [
        [""],
        ["nul\x00key"],
        ["x" * 1025],
        ["é" * 513],
        ["\ud800"],
        [7],
        "a string",
    ]
    for keys in bad:
        with pytest.raises(StorageError):
            _index(store, [kdoc("d", keys)])  # type: ignore[arg-type]
        with pytest.raises(StorageError), store.transaction() as txn:
            txn.add_keys("ev", "s", {"d": keys})  # type: ignore[dict-item]
    assert store.lookup("ev", session_id="s", prefixes=[""]) == []
    assert store.search("ev", "x") == []
    _index(store, [kdoc("d", ["é" * 512, "k" * 1024])])  # the limit is in UTF-8 bytes
    assert len(store.lookup("ev", session_id="s", prefixes=[""])) == 2


def test_keys_roll_back_with_their_transaction(store_factory: StoreFactory) -> None:
    store = store_factory.new()
    _index(store, [kdoc("d", ["k:kept"])])
    with pytest.raises(RuntimeError), store.transaction() as txn:
        txn.index([kdoc("e", ["k:lost"])])
        txn.add_keys("ev", "s", {"d": ["k:lost2"]})
        txn.update_meta("ev", {"d": {"changed": True}})
        raise RuntimeError("boom")
    assert store.lookup("ev", session_id="s", prefixes=["k:"]) == [("k:kept", "d")]
    assert store.metas("ev", ["d", "e"]) == {"d": {"id": "d"}}
