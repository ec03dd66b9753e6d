"""The storage contract, names: a session id, agent id, title or document key that UTF-8
cannot encode (a lone surrogate) is refused with StorageError before anything is written, the
same way by every backend; reading by such a name never raises anything else."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from contextfold.errors import StorageError
from contextfold.storage import Store, Transaction
from tests.storage.storage_contract import StoreFactory, append, ev

BAD = "name \udc80 here"

WRITES: dict[str, Callable[[Transaction], object]] = {
    "session id": lambda t: t.append(BAD, [ev(i=0)], expected_seq=0, agent_id="a"),
    "agent id": lambda t: t.append("s2", [ev(i=0)], expected_seq=0, agent_id=BAD),
    "title": lambda t: t.append("s2", [ev(i=0)], expected_seq=0, agent_id="a", title=BAD),
    "document key": lambda t: t.put_doc("d", BAD, {"v": 1}),
    "document namespace": lambda t: t.put_doc(BAD, "k", {"v": 1}),
    "deleted document key": lambda t: t.delete_doc("d", BAD),
}

READS: dict[str, Callable[[Store], object]] = {
    "head": lambda s: s.head(BAD),
    "read": lambda s: list(s.read(BAD)),
    "read_last": lambda s: s.read_last(BAD, 3),
    "read_heads": lambda s: s.read_heads(BAD),
    "session": lambda s: s.session(BAD),
    "sessions": lambda s: s.sessions([BAD]),
    "get_doc": lambda s: s.get_doc("d", BAD),
    "docs": lambda s: s.docs("d", prefix=BAD),
    "search": lambda s: s.search("session", "x", session_id=BAD),
    "lookup": lambda s: s.lookup("session", session_id=BAD, keys=["x"]),
}


@pytest.mark.parametrize("what", sorted(WRITES))
def test_unencodable_names_are_refused_and_write_nothing(
    store_factory: StoreFactory, what: str
) -> None:
    store = store_factory.new()
    append(store, "s", [ev(i=0)], 0)
    with pytest.raises(StorageError, match="surrogate"), store.transaction() as txn:
        txn.append("s", [ev(i=1)], expected_seq=1, agent_id="a")
        WRITES[what](txn)
    assert store.head("s") == 1  # the whole unit rolled back
    assert store.head("s2") == 0 and store.get_doc("d", "k") is None
    append(store, "s", [ev(i=1)], 1)  # and the store keeps working
    assert store.head("s") == 2


def test_reading_by_an_unencodable_name_is_a_storage_error_or_nothing(
    store_factory: StoreFactory,
) -> None:
    store = store_factory.new()
    append(store, "s", [ev(i=0)], 0)
    for what, read in READS.items():
        try:
            got = read(store)
        except StorageError:
            continue
        assert got in (0, None, [], {}), what
    assert store.head("s") == 1
