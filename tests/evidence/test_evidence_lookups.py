"""Evidence search from the store's exact lookups: nothing is rebuilt on open, and sessions
written before the lookups existed get them once (or in memory when the store is read-only)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from contextfold import ContextManager
from contextfold.core.messages import Message, ToolCall
from contextfold.errors import StorageError
from contextfold.evidence.keys import NAMESPACE, search_docs, state_key
from contextfold.evidence.rank import parse_ordinal
from contextfold.evidence.search import EvidenceSearch
from contextfold.evidence.store import EvidenceStore
from contextfold.storage import MemoryStore, SQLiteStore, Store
from contextfold.storage.session import SessionStore
from tests.evidence.evidence_helpers import index_block
from tests.support import pg_support

QUERIES = [
    "show me the full error output of `pytest -x tests/test_parser.py`",
    "the first time I ran `pytest -x tests/test_parser.py`",
    "the second run of `pytest -x`",
    "what did `python run.py --fast` print",
    "python run.py",
    "src/pkg/parser.py",
    "tests/test_parser.py::test_empty",
    "the ValueError traceback",
    "the grep for parse_config",
    "What was the full error output of the first failing command?",
    "What was the full error output of the last failing command?",
    "worker notes about the cache",
    "数据库连接超时",
]


def call(cid: str, name: str, args: dict[str, Any]) -> Message:
    return Message(
        role="assistant",
        tool_calls=(ToolCall(id=cid, name=name, arguments=json.dumps(args)),),
    )


def result(cid: str, text: str) -> Message:
    return Message(role="tool", tool_call_id=cid, content=text)


FAIL = (
    "============ FAILURES ============\n"
    "FAILED tests/test_parser.py::test_empty - ValueError: empty input\n"
    'Traceback (most recent call last):\n  File "src/pkg/parser.py", line 12, in parse\n'
    "ValueError: empty input\nexit code: 1"
)


def messages(n: int) -> list[Message]:
    out: list[Message] = []
    for i in range(n):
        c = f"c{n}-{i}"
        if i % 4 == 0:
            out += [call(c, "bash", {"command": "pytest -x tests/test_parser.py"}), result(c, FAIL)]
        elif i % 4 == 1:
            out += [call(c, "bash", {"command": "python run.py --fast"}), result(c, f"ok {i}")]
        elif i % 4 == 2:
            args = {"command": "view", "path": "/repo/src/pkg/parser.py"}
            out += [call(c, "str_replace_editor", args), result(c, f"def parse(): {i}")]
        else:
            args = {"pattern": "parse_config", "path": "src"}
            out += [call(c, "Grep", args), result(c, f"src/pkg/config.py:{i}: parse_config")]
        out.append(Message(role="assistant", content=f"Looked at the output number {i} closely."))
    return out


#: The messages of each range (one set of message uuids: the same message is the same pointer)
RANGES = {n: messages(n) for n in (5, 6, 7)}


def build(store: Store, sid: str = "s") -> EvidenceStore:
    es = EvidenceStore(SessionStore(store, sid, "agent"))
    for n in (5, 6, 7):
        msgs = RANGES[n]
        for start in range(0, len(msgs), 9):
            chunk = msgs[start : start + 9]
            index_block(es, chunk, known_calls=msgs[:start])
        if n == 6:  # the same range again: its pointers are not indexed twice
            index_block(es, msgs[:9])
    es.add_subagent_output("w1", "worker notes: the cache was cold; 数据库连接超时 twice")
    return es


def answers(search: EvidenceSearch) -> list[list[tuple[str, float]]]:
    return [[(h.pointer.id, h.score) for h in search.search(q, k=5)] for q in QUERIES]


def age(store: Store, sid: str = "s") -> None:
    """Make the session look as the previous release wrote it: every pointer's document
    (the last copy wins) with the whole pointer as its meta, no keys, no index state."""
    es = EvidenceStore(SessionStore(store, sid, "agent"))
    docs = []
    for block in es.blocks():
        placed = {p.id: 0 for p in block.evidence}
        for d in search_docs(sid, "agent", block, lambda p: es.restore(p).text, ords=placed):
            p = next(p for p in block.evidence if f"{sid}:{p.id}" == d.doc_id)
            docs.append(dataclasses.replace(d, keys=(), meta={"pointer": p.to_dict()}))
    with store.transaction() as txn:
        txn.unindex(NAMESPACE, session_id=sid)
        txn.index(docs)
        txn.delete_doc("evidence", state_key(sid))
        for key in store.docs("evidence", prefix=f"{sid}/ev/"):
            txn.delete_doc("evidence", key)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "postgres":
        schemas = pg_support.SchemaFactory(pg_support.require_postgres())
        try:
            yield schemas.open(schemas.schema())
        finally:
            schemas.cleanup()
        return
    s: Store = MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "ws")
    yield s
    s.close()


def test_old_session_gets_its_keys_once_and_answers_the_same(store: Store) -> None:
    fresh = answers(EvidenceSearch(build(store)))
    assert all(fresh) and fresh[0][0][1] > 0
    age(store)
    assert store.lookup(NAMESPACE, session_id="s", prefixes=[""]) == []
    first = EvidenceSearch(EvidenceStore(SessionStore(store, "s", "agent")))
    assert first.sync() > 0  # the keys are written now, in one transaction
    assert store.get_doc("evidence", state_key("s")) is not None
    assert store.docs("evidence", prefix="s/ev/")  # the hits' whole pointers
    assert store.lookup(NAMESPACE, session_id="s", prefixes=["cmd:"])
    assert answers(first) == fresh
    again = EvidenceSearch(EvidenceStore(SessionStore(store, "s", "agent")))
    assert again.sync() == 0  # never again
    assert answers(again) == fresh


class ReadOnly:
    """A store that refuses every write (a read-only workspace)."""

    def __init__(self, inner: Store) -> None:
        self._inner = inner

    def transaction(self) -> AbstractContextManager[Any]:
        raise StorageError("the workspace is read-only; nothing can be written")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_old_session_on_a_read_only_store_is_searched_in_memory(store: Store) -> None:
    fresh = answers(EvidenceSearch(build(store)))
    age(store)
    ro: Any = ReadOnly(store)
    search = EvidenceSearch(EvidenceStore(SessionStore(ro, "s", "agent")))
    assert answers(search) == fresh
    assert store.lookup(NAMESPACE, session_id="s", prefixes=[""]) == []  # nothing written
    assert search.by_call("c5-0") and search.get(search.by_call("c5-0")[0].id) is not None


def test_reopened_session_reads_no_blocks(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Searching and indexing more evidence after a reopen never reads the blocks."""
    fresh = answers(EvidenceSearch(build(store)))

    def no_blocks(self: EvidenceStore) -> Any:
        raise AssertionError("the blocks were read")

    es = EvidenceStore(SessionStore(store, "s", "agent"))
    monkeypatch.setattr(EvidenceStore, "_load", no_blocks)
    search = EvidenceSearch(es)
    plain = [i for i, q in enumerate(QUERIES) if parse_ordinal(q) is None]
    assert len(plain) > 5
    for i in plain:  # (an ordinal without the session's calls counts the indexed ones)
        assert [(h.pointer.id, h.score) for h in search.search(QUERIES[i], k=5)] == fresh[i]
    before = es.state().blocks
    es.add_subagent_output("w2", "late worker notes about the cache")
    assert es.state().blocks == before + 1
    hits = EvidenceSearch(es).search("late worker notes", k=1)
    assert hits[0].pointer.agent_run_id == "w2"
    assert es.indexed_calls(["c5-0", "nope"]) == {"c5-0"}
    monkeypatch.undo()
    assert answers(EvidenceSearch(EvidenceStore(SessionStore(store, "s", "agent"))))[0] == fresh[0]


def test_duplicate_pointers_keep_their_first_document(store: Store) -> None:
    es = build(store)
    pointers = es.pointers()
    assert len({p.id for p in pointers}) < len(pointers)  # the range indexed twice
    search = EvidenceSearch(es)
    for p in pointers:
        got = search.get(p.id)
        first = next(q for q in pointers if q.id == p.id)
        assert got == first


def test_a_writer_that_reopened_does_not_index_a_pointer_again(store: Store) -> None:
    """After a reopen the writer has not read the blocks: it asks the store which pointers
    and calls are there already, and keeps their first documents."""
    build(store)
    search = EvidenceSearch(EvidenceStore(SessionStore(store, "s", "agent")))
    before = {q: answers_of(search, q) for q in QUERIES[:6]}
    es = EvidenceStore(SessionStore(store, "s", "agent"))
    calls = es.state().calls
    again = RANGES[5][:9]  # indexed before, by another writer
    index_block(es, again)
    assert es.state().calls == calls  # no new documents
    fresh = EvidenceSearch(EvidenceStore(SessionStore(store, "s", "agent")))
    assert {q: answers_of(fresh, q) for q in QUERIES[:6]} == before


def answers_of(search: EvidenceSearch, query: str) -> list[tuple[str, float]]:
    return [(h.pointer.id, h.score) for h in search.search(query, k=5)]


def test_manager_restore_after_reopen_uses_stored_positions(tmp_path: Path) -> None:
    """Through ContextManager: what a reopened session restores equals what the live one did,
    also for a session aged back to the previous release's index."""
    ws = tmp_path / "ws"
    cm = ContextManager(workspace=ws, session_id="m", context_window=3_000)
    big = "\n".join(f"line {i}: ValueError in module parser" for i in range(150))
    for i in range(12):
        cid = f"t{i}"
        cmd = "pytest -x" if i % 3 == 0 else f"cat notes{i}.txt"
        cm.add({"role": "user", "content": f"step {i}"})
        cm.add(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": cid,
                        "type": "function",
                        "function": {"name": "bash", "arguments": json.dumps({"command": cmd})},
                    }
                ],
            }
        )
        cm.add({"role": "tool", "tool_call_id": cid, "content": f"{big}\nrun {i}"})
        cm.prepare()
    queries = ["the output of `pytest -x`", "the first run of `pytest -x`", "notes3.txt"]
    live = [[h.pointer.id for h in cm.restore(q)] for q in queries]
    assert all(live)
    cm.close()
    reopened = ContextManager(workspace=ws, session_id="m", context_window=3_000)
    assert [[h.pointer.id for h in reopened.restore(q)] for q in queries] == live
    reopened.close()
    store = SQLiteStore(ws)
    age(store, "m")
    store.close()
    aged = ContextManager(workspace=ws, session_id="m", context_window=3_000)
    assert [[h.pointer.id for h in aged.restore(q)] for q in queries] == live
    assert aged.recover_tool_result("t0") is not None
    aged.close()
