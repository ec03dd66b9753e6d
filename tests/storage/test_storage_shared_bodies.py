"""The embedded store keeps a long indexed text once however many documents index it (a tool
output is a session message and a piece of evidence, byte for byte): searches rank as with
a copy per document, a shared text goes with the last document naming it, and a store of
schema 5 (every body inline) is migrated and keeps working."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from contextfold.storage import SearchDoc, SQLiteStore, sqlite_bodies
from contextfold.storage.sqlite_schema import DB_NAME, SCHEMA_VERSION

OUTPUT = "\n".join(f"step {i}: compiled module_{i}.c with warning W{i % 7}" for i in range(80))
OTHER = "Traceback (most recent call last): KeyError 'token' in parser.py line 12 " * 8


def _docs(session: str) -> list[SearchDoc]:
    """The same output as a session message and as evidence (with hints), plus texts of
    their own in each namespace (one short, kept inline)."""
    return [
        SearchDoc(
            namespace="session",
            doc_id=f"{session}:1",
            scope="a",
            session_id=session,
            fields={"body": OUTPUT},
        ),
        SearchDoc(
            namespace="session",
            doc_id=f"{session}:2",
            scope="a",
            session_id=session,
            fields={"body": OTHER},
        ),
        SearchDoc(
            namespace="session",
            doc_id=f"{session}:3",
            scope="a",
            session_id=session,
            fields={"body": "warning W3 again"},
        ),
        SearchDoc(
            namespace="evidence",
            doc_id=f"{session}:ev-1",
            scope="a",
            session_id=session,
            fields={"body": OUTPUT, "command": "make all", "hints": "shell"},
            meta={"ord": 0},
        ),
    ]


QUERIES = [
    ("session", "warning W3"),
    ("session", "module_5.c KeyError"),
    ("evidence", "compiled make"),
    ("evidence", "W4"),
]


def _results(store: SQLiteStore) -> list[list[tuple[str, str, float]]]:
    return [
        [(h.doc_id, h.session_id, round(h.score, 9)) for h in store.search(ns, q, limit=10)]
        for ns, q in QUERIES
    ]


def _count(root: Path, sql: str) -> int:
    con = sqlite3.connect(root / DB_NAME)
    try:
        return int(con.execute(sql).fetchone()[0])
    finally:
        con.close()


def _fill(root: Path) -> SQLiteStore:
    store = SQLiteStore(root)
    assert store.fts5, "the shared bodies are those of the FTS5 index"
    with store.transaction() as txn:
        txn.index(_docs("s1"))
        txn.index(_docs("s2"))
    return store


def test_a_text_indexed_twice_is_kept_once_and_ranks_as_two_copies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = _fill(tmp_path / "shared")
    got = _results(shared)
    shared.close()
    # the output and the other long text: one row each, for the four documents of each
    assert _count(tmp_path / "shared", "SELECT count(*) FROM search_bodies") == 2
    assert _count(tmp_path / "shared", "SELECT count(*) FROM search_docs WHERE body_id") == 6
    monkeypatch.setattr(sqlite_bodies, "SHARE_MIN", 10**9)  # every body inline, as before
    inline = _fill(tmp_path / "inline")
    want = _results(inline)
    inline.close()
    assert _count(tmp_path / "inline", "SELECT count(*) FROM search_bodies") == 0
    assert got == want and all(got), got


def test_a_shared_text_goes_with_the_last_document_naming_it(tmp_path: Path) -> None:
    store = _fill(tmp_path)
    with store.transaction() as txn:  # replaced by another text: the output stays for s2
        txn.index(
            [
                SearchDoc(
                    namespace="evidence",
                    doc_id="s1:ev-1",
                    scope="a",
                    session_id="s1",
                    fields={"body": "no output"},
                )
            ]
        )
        txn.unindex("session", session_id="s1")
    assert _count(tmp_path, "SELECT count(*) FROM search_bodies") == 2
    assert [h.doc_id for h in store.search("session", "module_5.c")] == ["s2:1"]
    assert [h.doc_id for h in store.search("evidence", "output")] == ["s1:ev-1"]
    store.delete_session("s2")
    assert _count(tmp_path, "SELECT count(*) FROM search_bodies") == 0
    assert store.search("session", "module_5.c") == []
    assert store.search("evidence", "compiled") == []
    with store.transaction() as txn:  # the same text indexed again is found again
        txn.index(_docs("s3"))
    assert [h.doc_id for h in store.search("evidence", "compiled")] == ["s3:ev-1"]
    store.close()


def _as_schema_5(root: Path) -> None:
    """The store as schema 5 wrote it: every body inline, no shared bodies."""
    con = sqlite3.connect(root / DB_NAME)
    con.execute(
        "UPDATE search_docs SET body = (SELECT body FROM search_bodies b "
        "WHERE b.id = search_docs.body_id) WHERE body_id IS NOT NULL"
    )
    con.execute("DROP INDEX search_docs_body")
    con.execute("ALTER TABLE search_docs DROP COLUMN body_id")
    con.execute("DROP TABLE search_bodies")
    con.execute("UPDATE store_meta SET value='5' WHERE key='schema'")
    con.commit()
    con.close()


def test_schema_5_store_is_migrated_and_its_index_keeps_working(tmp_path: Path) -> None:
    store = _fill(tmp_path)
    want = _results(store)
    store.close()
    _as_schema_5(tmp_path)
    store = SQLiteStore(tmp_path)
    assert _count(tmp_path, "SELECT value FROM store_meta WHERE key='schema'") == SCHEMA_VERSION
    assert _results(store) == want
    with store.transaction() as txn:  # its inline documents are replaced and taken out
        txn.index(_docs("s1"))
        txn.unindex("session", session_id="s2")
    assert _count(tmp_path, "SELECT count(*) FROM search_bodies") == 2
    assert [h.doc_id for h in store.search("session", "module_5.c")] == ["s1:1"]
    store.delete_session("s1")
    store.delete_session("s2")
    assert store.search("evidence", "compiled") == []
    assert _count(tmp_path, "SELECT count(*) FROM search_bodies") == 0
    assert _count(tmp_path, "SELECT count(*) FROM search_docs") == 0
    store.close()


def test_a_text_whose_hash_prefix_is_taken_keeps_its_body_inline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_bodies, "body_key", lambda text: 7)  # every text: one prefix
    store = _fill(tmp_path)
    assert _count(tmp_path, "SELECT count(*) FROM search_bodies") == 1
    # the output took the one prefix (four documents name it); the other text stays inline
    assert _count(tmp_path, "SELECT count(*) FROM search_docs WHERE body_id") == 4
    assert [h.doc_id for h in store.search("session", "KeyError")] in (
        ["s1:2", "s2:2"],
        ["s2:2", "s1:2"],
    )
    store.delete_session("s1")
    store.delete_session("s2")
    assert _count(tmp_path, "SELECT count(*) FROM search_bodies") == 0
    assert store.search("session", "KeyError") == []
    store.close()
