"""The storage contract: every backend must pass these tests, unchanged.

A backend's test module imports everything from here and provides two fixtures:

- ``store_factory``: a :class:`StoreFactory` for a fresh, empty storage;
- ``shared_store_factory``: the same, for backends whose storage is shared between processes
  (the multi-process tests use it; the in-memory backend lives in one process and is not one).

``factory.new()`` opens another Store on the same storage (another connection, as another
worker would); ``factory.url`` opens it with :func:`contextfold.storage.open_store` in a child
process; ``factory.close_all()`` closes every store it opened.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import multiprocessing
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from contextfold.errors import ContextFoldError, StorageError
from contextfold.storage import (
    BlobNotFoundError,
    ConcurrentWriteError,
    Event,
    NewEvent,
    SearchDoc,
    Store,
    open_store,
)
from tests.support.waiting import wait_until


@dataclass
class StoreFactory:
    """How a test opens stores on one (fresh) storage."""

    url: str
    opener: Callable[[], Store]
    opened: list[Store] = field(default_factory=list)

    def new(self) -> Store:
        store = self.opener()
        self.opened.append(store)
        return store

    def close_all(self) -> None:
        for s in self.opened:
            with contextlib.suppress(ContextFoldError):
                s.close()


def ev(kind: str = "message", **data: object) -> NewEvent:
    return NewEvent(kind=kind, data=data)


def append(
    store: Store, sid: str, events: list[NewEvent], expected: int, agent: str = "a"
) -> list[Event]:
    with store.transaction() as txn:
        return txn.append(sid, events, expected_seq=expected, agent_id=agent)


def doc(
    ns: str, doc_id: str, body: str, *, scope: str = "a", sid: str = "s", **fields: str
) -> SearchDoc:
    return SearchDoc(
        namespace=ns,
        doc_id=doc_id,
        scope=scope,
        session_id=sid,
        fields={"body": body, **fields},
        meta={"id": doc_id},
    )


# --------------------------------------------------------------------------- event log


def test_append_assigns_dense_sequence(store_factory: StoreFactory) -> None:
    store = store_factory.new()
    out = append(store, "s", [ev(n=0), ev(n=1)], 0)
    assert [e.seq for e in out] == [0, 1]
    out = append(store, "s", [ev(n=2)], 2)
    assert out[0].seq == 2 and out[0].data == {"n": 2} and out[0].ts
    assert store.head("s") == 3
    assert [e.data["n"] for e in store.read("s")] == [0, 1, 2]


def test_expected_seq_behind_or_ahead_is_refused(store_factory: StoreFactory) -> None:
    store = store_factory.new()
    append(store, "s", [ev(), ev()], 0)
    for wrong in (0, 1, 3):
        with pytest.raises(ConcurrentWriteError) as info:
            append(store, "s", [ev(n=9)], wrong)
        assert info.value.expected == wrong and info.value.actual == 2
        assert isinstance(info.value, StorageError)
    assert store.head("s") == 2
    assert all("n" not in e.data for e in store.read("s"))


def test_new_session_needs_expected_zero(store_factory: StoreFactory) -> None:
    store = store_factory.new()
    with pytest.raises(ConcurrentWriteError):
        append(store, "new", [ev()], 1)
    assert store.session("new") is None and store.head("new") == 0


def test_bad_append_arguments_are_clear_and_write_nothing(store_factory: StoreFactory) -> None:
    """Every backend checks the same arguments the same way (a StorageError naming them)."""
    store = store_factory.new()
    bad: list[tuple[object, object, object, str]] = [
        ("", "a", 0, "session id"),
        (None, "a", 0, "session id"),
        ("s", "", 0, "agent id"),
        ("s", "a", -1, "expected_seq"),
        ("s", "a", True, "expected_seq"),
    ]
    for sid, agent, seq, what in bad:
        with pytest.raises(StorageError, match=what), store.transaction() as tx:
            tx.append(sid, [ev()], expected_seq=seq, agent_id=agent)  # type: ignore[arg-type]
    assert store.sessions() == []


def test_owner_fixed_by_first_event(store_factory: StoreFactory) -> None:
    store = store_factory.new()
    with store.transaction() as txn:
        txn.append("s", [ev()], expected_seq=0, agent_id="alice", title="first title")
    with pytest.raises(StorageError, match="alice"):
        append(store, "s", [ev()], 1, agent="mallory")
    info = store.session("s")
    assert info is not None and info.agent_id == "alice" and info.events == 1
    with store.transaction() as txn:
        txn.append("s", [ev()], expected_seq=1, agent_id="alice", title="other title")
    info = store.session("s")
    assert info is not None and info.title == "first title" and info.events == 2
    other = store_factory.new()
    info2 = other.session("s")
    assert info2 is not None and info2.agent_id == "alice"


def test_read_ranges_kinds_and_last(store_factory: StoreFactory) -> None:
    store = store_factory.new()
    kinds = ["message", "state", "message", "compaction", "message", "state"]
    append(store, "s", [ev(k, i=i) for i, k in enumerate(kinds)], 0)
    assert [e.seq for e in store.read("s", start=2, stop=5)] == [2, 3, 4]
    assert [e.seq for e in store.read("s", kinds=["message"])] == [0, 2, 4]
    assert [e.seq for e in store.read("s", start=1, kinds=["state", "compaction"])] == [1, 3, 5]
    assert [e.seq for e in store.read_last("s", 2)] == [4, 5]
    assert [e.seq for e in store.read_last("s", 2, kinds=["message"])] == [2, 4]
    assert [e.seq for e in store.read_last("s", 10, kinds=["compaction"])] == [3]
    assert store.read_last("s", 0) == []
    assert store.read_last("missing", 3) == []
    assert list(store.read("missing")) == []


def _next_millisecond() -> None:
    """Stores stamp writes with millisecond resolution: wait until the clock has passed a
    whole millisecond, so that the next write is stamped later."""
    now = time.time_ns() // 1_000_000
    wait_until(lambda: time.time_ns() // 1_000_000 > now + 1, 1, "the clock ticked")


def test_session_info_and_listing(store_factory: StoreFactory) -> None:
    store = store_factory.new()
    append(store, "one", [ev(), ev("state")], 0, agent="a")
    _next_millisecond()
    append(store, "two", [ev()], 0, agent="b")
    _next_millisecond()
    append(store, "one", [ev()], 2, agent="a")
    info = store.session("one")
    assert info is not None and (info.events, info.messages) == (3, 2)
    assert info.created_at <= info.updated_at
    assert [i.session_id for i in store.sessions()] == ["one", "two"]  # newest first
    assert [i.session_id for i in store.sessions(["b"])] == ["two"]
    assert store.sessions([]) == []
    assert store.session("missing") is None


def test_events_are_json_and_bad_data_writes_nothing(store_factory: StoreFactory) -> None:
    store = store_factory.new()
    append(store, "s", [ev(text="naïve ✓ 中文", nested={"a": [1, 2.5, None, True]})], 0)
    got = next(iter(store.read("s")))
    assert got.data == {"text": "naïve ✓ 中文", "nested": {"a": [1, 2.5, None, True]}}
    with pytest.raises(StorageError):
        append(store, "s", [ev(ok=1), ev(bad=object())], 1)
    assert store.head("s") == 1


def test_lone_surrogates_round_trip(store_factory: StoreFactory) -> None:
    """Undecodable bytes decoded with surrogateescape reach the store as lone surrogates."""
    store = store_factory.new()
    text = "bad byte \udcff here"
    append(store, "s", [ev(text=text)], 0)
    with store.transaction() as txn:
        txn.put_doc("d", "s/k", {"text": text})
        txn.index([doc("session", "s:0", text + " findable")])
    assert next(iter(store.read("s"))).data == {"text": text}
    assert store.get_doc("d", "s/k") == {"text": text}
    assert [h.doc_id for h in store.search("session", "findable")] == ["s:0"]


# --------------------------------------------------------------------------- transactions


def test_event_heads(store_factory: StoreFactory) -> None:
    """Heads are stored beside their events and read without the data, in order."""
    store = store_factory.new()
    big = "x" * 50_000
    events = [
        NewEvent(kind="message", data={"i": 0, "body": big}, head={"pos": 0, "uuid": "u0"}),
        NewEvent(kind="state", data={"i": 1}),
        NewEvent(kind="message", data={"i": 2}, head={"pos": 1, "calls": [{"id": "c", "n": None}]}),
        NewEvent(kind="offload", data={"i": 3}, head={"k": "\u00e9\ud800 ok"}),
    ]
    append(store, "s", events, 0)
    heads = store.read_heads("s")
    assert [(h.seq, h.kind) for h in heads] == [
        (0, "message"),
        (1, "state"),
        (2, "message"),
        (3, "offload"),
    ]
    assert heads[0].head == {"pos": 0, "uuid": "u0"} and heads[1].head is None
    assert heads[2].head == {"pos": 1, "calls": [{"id": "c", "n": None}]}
    assert heads[3].head == {"k": "\u00e9\ud800 ok"}
    assert [h.seq for h in store.read_heads("s", kinds=["message"])] == [0, 2]
    assert [h.seq for h in store.read_heads("s", start=1, stop=3)] == [1, 2]
    assert store.read_heads("s", kinds=[]) == [] and store.read_heads("missing") == []
    assert [e.data["i"] for e in store.read("s")] == [0, 1, 2, 3]  # data unchanged
    with pytest.raises(StorageError), store.transaction() as txn:  # a bad head writes nothing
        txn.append(
            "s", [NewEvent(kind="m", data={}, head={"x": object()})], expected_seq=4, agent_id="a"
        )
    assert store.head("s") == 4 and len(store.read_heads("s")) == 4
    with pytest.raises(RuntimeError), store.transaction() as txn:  # rolled back with its unit
        txn.append("s", [NewEvent(kind="m", data={}, head={"x": 1})], expected_seq=4, agent_id="a")
        raise RuntimeError("boom")
    assert len(store.read_heads("s")) == 4
    store.delete_session("s")
    assert store.read_heads("s") == []


def test_event_details(store_factory: StoreFactory) -> None:
    """A head may be any JSON value; an event's detail is read only when asked for."""
    store = store_factory.new()
    events = [
        NewEvent(
            kind="message", data={"i": 0}, head=[0, "u0", None, ["c1"]], detail=[{"id": "c1"}]
        ),
        NewEvent(kind="message", data={"i": 1}, head=[1, "u1"]),
        NewEvent(kind="state", data={"i": 2}, detail={"only": "detail"}),
    ]
    append(store, "s", events, 0)
    plain = store.read_heads("s")
    assert [h.head for h in plain] == [[0, "u0", None, ["c1"]], [1, "u1"], None]
    assert [h.detail for h in plain] == [None, None, None]
    full = store.read_heads("s", details=True)
    assert [h.head for h in full] == [h.head for h in plain]
    assert [h.detail for h in full] == [[{"id": "c1"}], None, {"only": "detail"}]
    only = store.read_heads("s", kinds=["state"], start=1, details=True)
    assert [(h.seq, h.detail) for h in only] == [(2, {"only": "detail"})]
    # a head too big for an index entry (a message with very many calls) is stored and read
    # back in order like the others
    ids = [f"call_{i:04d}_" + hashlib.sha256(str(i).encode()).hexdigest() for i in range(80)]
    append(store, "big", [ev("state"), NewEvent(kind="message", data={}, head=[1, ids]), ev()], 0)
    assert [h.head for h in store.read_heads("big")] == [None, [1, ids], None]
    assert [h.seq for h in store.read_heads("big", kinds=["message"], start=1)] == [1, 2]
    with pytest.raises(StorageError), store.transaction() as txn:  # a bad detail writes nothing
        txn.append(
            "s", [NewEvent(kind="m", data={}, detail={"x": object()})], expected_seq=3, agent_id="a"
        )
    assert store.head("s") == 3


def test_exception_rolls_back_everything(store_factory: StoreFactory) -> None:
    store = store_factory.new()
    append(store, "s", [ev()], 0)
    with pytest.raises(RuntimeError), store.transaction() as txn:
        txn.append("s", [ev(n=1)], expected_seq=1, agent_id="a")
        txn.append("t", [ev(n=1)], expected_seq=0, agent_id="a")
        txn.put_doc("settings", "s/x", {"v": 1})
        txn.index([doc("session", "s:1", "rollback marker")])
        raise RuntimeError("boom")
    assert store.head("s") == 1 and store.head("t") == 0 and store.session("t") is None
    assert store.get_doc("settings", "s/x") is None
    assert store.search("session", "rollback marker") == []
    # retrying the same unit succeeds
    with store.transaction() as txn:
        txn.append("s", [ev(n=1)], expected_seq=1, agent_id="a")
        txn.index([doc("session", "s:1", "rollback marker")])
    assert store.head("s") == 2 and len(store.search("session", "marker")) == 1


def test_conflict_inside_unit_rolls_back_earlier_writes(store_factory: StoreFactory) -> None:
    store = store_factory.new()
    append(store, "s", [ev()], 0)
    with pytest.raises(ConcurrentWriteError), store.transaction() as txn:
        txn.put_doc("settings", "k", {"v": 1})
        txn.append("t", [ev()], expected_seq=0, agent_id="a")
        txn.append("s", [ev()], expected_seq=0, agent_id="a")
    assert store.get_doc("settings", "k") is None and store.head("t") == 0


def test_several_appends_in_one_unit(store_factory: StoreFactory) -> None:
    store = store_factory.new()
    with store.transaction() as txn:
        txn.append("s", [ev(n=0)], expected_seq=0, agent_id="a")
        txn.append("s", [ev(n=1), ev(n=2)], expected_seq=1, agent_id="a")
    assert [e.data["n"] for e in store.read("s")] == [0, 1, 2]


def test_uncommitted_writes_are_invisible_to_other_stores(store_factory: StoreFactory) -> None:
    store, other = store_factory.new(), store_factory.new()
    seen: list[int] = []
    started, release = threading.Event(), threading.Event()

    def writer() -> None:
        with store.transaction() as txn:
            txn.append("s", [ev()], expected_seq=0, agent_id="a")
            started.set()
            release.wait(10)

    t = threading.Thread(target=writer)
    t.start()
    assert started.wait(10)
    reader = threading.Thread(target=lambda: seen.append(other.head("s")))
    reader.start()
    reader.join(0.5)
    release.set()
    t.join(10)
    reader.join(10)
    assert seen in ([0], [1])  # never a partial unit; 1 only if the reader waited for commit
    assert other.head("s") == 1


# --------------------------------------------------------------------------- documents


def test_documents(store_factory: StoreFactory) -> None:
    store = store_factory.new()
    with store.transaction() as txn:
        txn.put_doc("memory", "a/1", {"text": "one"})
        txn.put_doc("memory", "a/2", {"text": "two"})
        txn.put_doc("memory", "b/1", {"text": "three"})
        txn.put_doc("other", "a/1", {"text": "elsewhere"})
    assert store.get_doc("memory", "a/1") == {"text": "one"}
    assert set(store.docs("memory", prefix="a/")) == {"a/1", "a/2"}
    assert len(store.docs("memory")) == 3
    with store.transaction() as txn:
        txn.put_doc("memory", "a/1", {"text": "uno"})
        txn.delete_doc("memory", "a/2")
    assert store.get_doc("memory", "a/1") == {"text": "uno"}
    assert store.get_doc("memory", "a/2") is None
    assert store.get_doc("other", "a/1") == {"text": "elsewhere"}
    got = store.get_doc("memory", "a/1")
    assert got is not None
    got["text"] = "mutated"
    assert store.get_doc("memory", "a/1") == {"text": "uno"}  # a copy, not the stored value


# --------------------------------------------------------------------------- search


def _index(store: Store, docs: list[SearchDoc]) -> None:
    with store.transaction() as txn:
        txn.index(docs)


def test_search_bm25_ranking(store_factory: StoreFactory) -> None:
    store = store_factory.new()
    _index(
        store,
        [
            doc("ev", "once", "the parser failed once and then other words were written here"),
            doc("ev", "thrice", "parser parser parser failed"),
            doc("ev", "none", "nothing relevant at all"),
            doc("ev", "rare", "a zygomorphic flower and the parser"),
        ]
        + [doc("ev", f"filler{i}", f"filler text number {i} about parser") for i in range(6)],
    )
    hits = store.search("ev", "parser")
    ids = [h.doc_id for h in hits]
    assert ids[0] == "thrice" and "none" not in ids
    assert all(a.score >= b.score > 0 for a, b in itertools.pairwise(hits))
    # a rare term weighs more than a common one
    assert store.search("ev", "zygomorphic parser")[0].doc_id == "rare"
    assert store.search("ev", "parser", limit=2)[1].doc_id in {h.doc_id for h in hits}
    assert len(store.search("ev", "parser", limit=2)) == 2
    assert store.search("ev", "") == [] and store.search("ev", "   ") == []
    assert store.search("ev", "absentword") == []
    assert hits[0].meta == {"id": "thrice"}


def test_search_hint_fields_weigh_more(store_factory: StoreFactory) -> None:
    store = store_factory.new()
    _index(
        store,
        [
            doc("ev", "body", "pytest ran once here with words words words"),
            doc("ev", "cmd", "ran once here with other words words", command="pytest -x"),
        ],
    )
    assert store.search("ev", "pytest")[0].doc_id == "cmd"


def test_search_identifiers_paths_and_cjk(store_factory: StoreFactory) -> None:
    store = store_factory.new()
    _index(
        store,
        [
            doc("ev", "path", "edited src/contextfold/storage/sqlite.py and parseConfig"),
            doc("ev", "cjk", "数据库连接失败 then retried"),
            doc("ev", "other", "unrelated text"),
        ],
    )
    assert store.search("ev", "sqlite.py")[0].doc_id == "path"
    assert store.search("ev", "storage")[0].doc_id == "path"
    assert store.search("ev", "config")[0].doc_id == "path"
    assert store.search("ev", "连接失败")[0].doc_id == "cjk"
    assert store.search("ev", 'zzq" OR "yyq NEAR(*') == []  # query syntax is inert


def test_search_scoping_namespaces_and_sessions(store_factory: StoreFactory) -> None:
    store = store_factory.new()
    _index(
        store,
        [
            doc("session", "a1", "secret plan alpha", scope="alice", sid="s1"),
            doc("session", "b1", "secret plan beta", scope="bob", sid="s2"),
            doc("session", "a2", "secret plan gamma", scope="alice", sid="s3"),
            doc("memory", "m1", "secret plan delta", scope="alice", sid=""),
        ],
    )
    assert {h.doc_id for h in store.search("session", "secret")} == {"a1", "b1", "a2"}
    assert {h.doc_id for h in store.search("session", "secret", scopes=["alice"])} == {"a1", "a2"}
    assert {h.doc_id for h in store.search("session", "secret", scopes=["bob"])} == {"b1"}
    assert store.search("session", "secret", scopes=[]) == []
    assert {h.doc_id for h in store.search("session", "secret", session_id="s3")} == {"a2"}
    assert [h.doc_id for h in store.search("memory", "secret")] == ["m1"]
    hit = store.search("session", "beta")[0]
    assert (hit.doc_id, hit.session_id) == ("b1", "s2")


def test_search_replace_and_unindex(store_factory: StoreFactory) -> None:
    store = store_factory.new()
    _index(store, [doc("ev", "d", "first version", sid="s"), doc("ev", "e", "keep me", sid="t")])
    _index(store, [doc("ev", "d", "second edition", sid="s")])
    assert store.search("ev", "first") == []
    assert [h.doc_id for h in store.search("ev", "second")] == ["d"]
    with store.transaction() as txn:
        txn.unindex("ev", session_id="s")
    assert store.search("ev", "second") == []
    assert [h.doc_id for h in store.search("ev", "keep")] == ["e"]


# --------------------------------------------------------------------------- blobs


def test_blobs_content_addressed_and_checked(store_factory: StoreFactory) -> None:
    import hashlib

    store = store_factory.new()
    data = "résumé\n\x00 bytes ✓".encode() * 100
    sha = store.blobs.put(data)
    assert sha == hashlib.sha256(data).hexdigest()
    assert store.blobs.put(data) == sha  # idempotent
    assert store.blobs.get(sha) == data
    assert store.blobs.has(sha) and store.blobs.size(sha) == len(data)
    assert store.blobs.put(b"") == hashlib.sha256(b"").hexdigest()
    assert store.blobs.get(hashlib.sha256(b"").hexdigest()) == b""
    missing = hashlib.sha256(b"never stored").hexdigest()
    assert not store.blobs.has(missing) and store.blobs.size(missing) is None
    with pytest.raises(BlobNotFoundError):
        store.blobs.get(missing)
    for bad in ("../../etc/passwd", "A" * 64, sha[:10], ""):
        with pytest.raises(StorageError):
            store.blobs.get(bad)
    assert store_factory.new().blobs.get(sha) == data  # visible to another store


# --------------------------------------------------------------------------- deletion


def test_delete_session(store_factory: StoreFactory) -> None:
    store = store_factory.new()
    append(store, "s", [ev(), ev()], 0)
    append(store, "t", [ev()], 0)
    sha = store.blobs.put(b"shared body")
    with store.transaction() as txn:
        txn.put_doc("cache", "s/view", {"v": 1})
        txn.put_doc("cache", "t/view", {"v": 2})
        txn.put_doc("cache", "sx/view", {"v": 3})
        txn.index([doc("session", "s:0", "findable words", sid="s")])
        txn.index([doc("session", "t:0", "findable words", sid="t")])
    store.delete_session("s")
    assert store.head("s") == 0 and store.session("s") is None and list(store.read("s")) == []
    assert store.get_doc("cache", "s/view") is None
    assert store.get_doc("cache", "t/view") == {"v": 2}
    assert store.get_doc("cache", "sx/view") == {"v": 3}
    assert [h.session_id for h in store.search("session", "findable")] == ["t"]
    assert store.head("t") == 1 and store.blobs.get(sha) == b"shared body"
    append(store, "s", [ev()], 0, agent="b")  # the id can start over, with a new owner
    info = store.session("s")
    assert info is not None and info.agent_id == "b"
    store.delete_session("never-existed")


def test_closed_store_raises_storage_error(store_factory: StoreFactory) -> None:
    store = store_factory.new()
    append(store, "s", [ev()], 0)
    store.close()
    with pytest.raises(StorageError):
        store.head("s")
    with pytest.raises(StorageError), store.transaction() as txn:
        txn.append("s", [ev()], expected_seq=1, agent_id="a")


# --------------------------------------------------------------------------- concurrency


def _writer_loop(store: Store, sid: str, n: int, tag: str, agent: str = "a") -> int:
    """Append ``n`` events one at a time, re-reading the head after each conflict."""
    conflicts = 0
    done = 0
    while done < n:
        head = store.head(sid)
        try:
            with store.transaction() as txn:
                txn.append(sid, [ev(tag=tag, i=done)], expected_seq=head, agent_id=agent)
                txn.index([doc("session", f"{sid}:{tag}:{done}", f"word{tag} w{done}", sid=sid)])
        except ConcurrentWriteError:
            conflicts += 1
            continue
        done += 1
    return conflicts


def _check_log(store: Store, sid: str, tags: list[str], n: int) -> None:
    events = list(store.read(sid))
    assert [e.seq for e in events] == list(range(len(tags) * n))
    got = sorted((e.data["tag"], e.data["i"]) for e in events)
    assert got == sorted((t, i) for t in tags for i in range(n))  # each exactly once
    info = store.session(sid)
    assert info is not None and info.events == len(tags) * n


def test_threads_share_one_store(store_factory: StoreFactory) -> None:
    store = store_factory.new()
    tags = [f"t{i}" for i in range(4)]
    threads = [threading.Thread(target=_writer_loop, args=(store, "s", 25, t)) for t in tags]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    _check_log(store, "s", tags, 25)


def test_threads_with_a_store_each(store_factory: StoreFactory) -> None:
    tags = ["x", "y"]
    stores = [store_factory.new() for _ in tags]
    threads = [
        threading.Thread(target=_writer_loop, args=(s, "s", 30, t))
        for s, t in zip(stores, tags, strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    _check_log(store_factory.new(), "s", tags, 30)
    assert len(store_factory.new().search("session", "wordx", limit=100)) == 30


def _process_writer(url: str, sid: str, n: int, tag: str, agent: str) -> None:
    store = open_store(url)
    try:
        _writer_loop(store, sid, n, tag, agent)
    finally:
        store.close()


def _run_processes(args: list[tuple[str, str, int, str, str]]) -> None:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_process_writer, args=a) for a in args]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    assert [p.exitcode for p in procs] == [0] * len(procs)


def test_two_processes_on_one_session(shared_store_factory: StoreFactory) -> None:
    url = shared_store_factory.url
    shared_store_factory.new()  # create the storage before the children race to
    _run_processes([(url, "s", 40, "p", "a"), (url, "s", 40, "q", "a")])
    _check_log(shared_store_factory.new(), "s", ["p", "q"], 40)


def test_eight_processes_on_eight_sessions(shared_store_factory: StoreFactory) -> None:
    url = shared_store_factory.url
    shared_store_factory.new()
    _run_processes([(url, f"s{i}", 30, f"k{i}", f"agent{i}") for i in range(8)])
    store = shared_store_factory.new()
    for i in range(8):
        _check_log(store, f"s{i}", [f"k{i}"], 30)
        hits = store.search("session", f"wordk{i}", limit=100)
        assert len(hits) == 30 and {h.session_id for h in hits} == {f"s{i}"}
        info = store.session(f"s{i}")
        assert info is not None and info.agent_id == f"agent{i}"
    assert len(store.sessions()) == 8


def iter_contract_tests() -> Iterator[str]:
    """Names of the contract tests (a backend module re-exports them all)."""
    for name, value in globals().items():
        if name.startswith("test_") and callable(value):
            yield name
