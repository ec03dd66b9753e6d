"""The PostgreSQL full-text index keeps no pending list (schema 6): a new entry goes into the
GIN tree at once instead of an unordered list only a VACUUM would merge, and the tsvectors are
compressed with LZ4 where the server has it. A schema-5 store, whose entries wait in the
list, is migrated on open: the list is merged, searches rank as before, writes go on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import pg_support
from tests.support.pg_support import SchemaFactory

pytestmark = pytest.mark.timeout(240)

WORDS = [f"module_{i}.c warning W{i % 7} step{i} compiled" for i in range(40)]


@pytest.fixture
def pg() -> Iterator[SchemaFactory]:
    yield from pg_support.schema_factory()


def _docs(sid: str, start: int) -> list[Any]:
    from contextfold.storage import SearchDoc

    return [
        SearchDoc(
            namespace=ns,
            doc_id=f"{sid}:{ns}:{i}",
            scope="a",
            session_id=sid,
            fields={"body": " ".join(WORDS[i : i + 5]) * 3, "hints": "shell" if ns else ""},
        )
        for i in range(start, start + 10)
        for ns in ("session", "evidence")
    ]


def _results(store: Any) -> list[list[tuple[str, float]]]:
    return [
        [(h.doc_id, round(h.score, 9)) for h in store.search(ns, q, limit=20)]
        for ns in ("session", "evidence")
        for q in ("warning W3", "module_12.c compiled", "shell step4")
    ]


def _index_state(store: Any) -> tuple[list[str], int, str]:
    """The GIN index's options, the pages its pending list holds (merged by the call: the
    answer is what was waiting) and the tsvector column's compression."""
    s = store.s

    def read(c: Any) -> tuple[list[str], int, str]:
        options = c.execute(
            f"SELECT coalesce(reloptions, '{{}}') FROM pg_class WHERE oid = "
            f"'{s}.search_docs_tsv'::regclass"
        ).fetchone()[0]
        pending = c.execute(
            f"SELECT gin_clean_pending_list('{s}.search_docs_tsv'::regclass)"
        ).fetchone()[0]
        method = c.execute(
            "SELECT attcompression FROM pg_attribute WHERE attrelid = "
            f"'{s}.search_docs'::regclass AND attname = 'tsv'"
        ).fetchone()[0]
        return list(options), int(pending), str(method or "")

    result: tuple[list[str], int, str] = store._run("read the GIN index state", read)
    return result


def _lz4(store: Any) -> bool:
    """Whether the server compresses with LZ4 (PostgreSQL 14 or later, built with it)."""

    def probe(c: Any) -> bool:
        row = c.execute(
            "SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' "
            "AND 'lz4' = ANY(enumvals)"
        ).fetchone()
        return row is not None

    found: bool = store._run("probe LZ4", probe)
    return found


def test_a_new_store_indexes_without_a_pending_list(pg: SchemaFactory) -> None:
    store = pg.open()
    with store.transaction() as txn:
        txn.index(_docs("s", 0))
    options, pending, method = _index_state(store)
    assert "fastupdate=off" in options and pending == 0
    assert method == ("l" if _lz4(store) else "")
    assert all(_results(store))
    store.close()


def test_a_schema_5_store_gets_its_pending_list_merged_and_goes_on(pg: SchemaFactory) -> None:
    schema = pg.schema()
    store = pg.open(schema)
    s = store.s

    def downgrade(c: Any) -> None:
        c.execute(f"ALTER INDEX {s}.search_docs_tsv SET (fastupdate = on)")
        c.execute(f"DELETE FROM {s}.schema_version WHERE version >= 6")

    store._run("downgrade to schema 5", downgrade)
    with store.transaction() as txn:  # these entries wait in the pending list
        txn.index(_docs("s", 0))
    before = _results(store)
    store.close()
    store = pg.open(schema)  # migrates: the list is merged
    options, pending, _ = _index_state(store)
    assert "fastupdate=off" in options and pending == 0
    assert _results(store) == before and all(before)
    with store.transaction() as txn:
        txn.index(_docs("s", 10))
        txn.unindex("evidence", session_id="s")
    got = _results(store)
    assert not any(got[3:]), "the evidence documents were taken out"
    assert "s:session:12" in [d for d, _ in got[1]], "a new document is found"
    store.close()
