"""``contextfold compact --replace`` writes the new session whole, then swaps it in: one
transaction deletes the old session and writes the new one. A store failure in that
transaction (injected by a database trigger, late in the write) leaves the old session exactly
as it was, on the embedded store and on PostgreSQL; once the cause is gone the same command
works. A first ``compact`` into a store is one transaction too."""

from __future__ import annotations

import io
import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from contextfold.cli import main
from contextfold.storage import open_store
from tests.conftest import load_trace, trace_files
from tests.support.pg_support import drop_schema, new_schema_name, require_postgres


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


class Target:
    """A store for the CLI, and a way to make its writes fail inside the transaction."""

    def __init__(self, spec: str, server: str | None = None, schema: str | None = None):
        self.spec, self.server, self.schema = spec, server, schema

    def _sql(self, statements: list[str]) -> None:
        if self.server is None:
            con = sqlite3.connect(Path(self.spec) / "store.sqlite", timeout=30)
            try:
                for sql in statements:
                    con.execute(sql)
                con.commit()
            finally:
                con.close()
            return
        import psycopg

        with psycopg.connect(self.server, autocommit=True) as conn:
            for sql in statements:
                conn.execute(sql)

    @contextmanager
    def key_inserts_fail(self) -> Iterator[None]:
        """Inserting a search key fails: the transaction has deleted the old session and
        written the new one's events and documents by then."""
        if self.server is None:
            self._sql(
                [
                    "CREATE TRIGGER cf_test_fail BEFORE INSERT ON search_keys "
                    "BEGIN SELECT RAISE(ABORT, 'injected storage failure'); END"
                ]
            )
            undo = ["DROP TRIGGER cf_test_fail"]
        else:
            s = self.schema
            self._sql(
                [
                    f'CREATE FUNCTION "{s}".cf_test_fail() RETURNS trigger LANGUAGE plpgsql '
                    "AS $$ BEGIN RAISE EXCEPTION 'injected storage failure'; END $$",
                    f'CREATE TRIGGER cf_test_fail BEFORE INSERT ON "{s}".search_keys '
                    f'FOR EACH ROW EXECUTE FUNCTION "{s}".cf_test_fail()',
                ]
            )
            undo = [
                f'DROP TRIGGER cf_test_fail ON "{s}".search_keys',
                f'DROP FUNCTION "{s}".cf_test_fail()',
            ]
        try:
            yield
        finally:
            self._sql(undo)

    def snapshot(self, session_id: str) -> dict[str, Any]:
        """Everything the store answers about the session."""
        store = open_store(self.spec)
        try:
            info = store.session(session_id)
            events = [(e.seq, e.kind, e.data) for e in store.read(session_id)]
            evidence = store.docs("evidence", prefix=f"{session_id}/")
            hits = [h.doc_id for h in store.search("session", "error", session_id=session_id)]
            return {
                "messages": info.messages if info else None,
                "events": events,
                "evidence": evidence,
                "hits": hits,
            }
        finally:
            store.close()


@pytest.fixture(params=["embedded", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    if request.param == "embedded":
        yield Target(str(tmp_path / "ws"))
        return
    server = require_postgres()
    schema = new_schema_name()
    try:
        yield Target(f"{server}?schema={schema}", server, schema)
    finally:
        drop_schema(server, schema)


@pytest.fixture(autouse=True)
def _no_env_store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CONTEXTFOLD_STORE", raising=False)
    monkeypatch.chdir(tmp_path)


def _transcript(tmp_path: Path, name: str, n: int) -> Path:
    src = tmp_path / name
    path = next(p for p in trace_files() if "django-15213" in p.name)
    src.write_text(json.dumps(load_trace(path)[:n]))
    return src


def test_a_failed_replace_leaves_the_old_session_exactly_as_it_was(
    target: Target, tmp_path: Path
) -> None:
    old, new = _transcript(tmp_path, "old.json", 40), _transcript(tmp_path, "new.json", 60)
    code, _, err = run("compact", str(old), "--window", "8000", "--store", target.spec)
    assert code == 0, err
    before = target.snapshot("cli")
    assert before["messages"] == 40 and before["evidence"] and before["hits"]

    with target.key_inserts_fail():
        code, out, err = run(
            "compact", str(new), "--window", "8000", "--store", target.spec, "--replace"
        )
    assert code == 3, err  # the store failed; nothing half written
    assert "injected storage failure" in err and out == ""
    assert target.snapshot("cli") == before

    code, _, err = run("compact", str(new), "--window", "8000", "--store", target.spec, "--replace")
    assert code == 0 and "kept in" in err, err
    after = target.snapshot("cli")
    assert after["messages"] == 60 and after["evidence"]
    assert after["events"][0][0] == 0  # a new session, not the old one appended to
    code, out, _ = run("restore", "cli", "error", "--store", target.spec)
    assert code == 0 and "sha256 ok" in out


def test_a_failed_first_compact_keeps_no_half_session(target: Target, tmp_path: Path) -> None:
    src = _transcript(tmp_path, "t.json", 40)
    code, _, err = run("compact", str(src), "--window", "8000", "--store", target.spec)
    assert code == 0, err
    with target.key_inserts_fail():
        code, _, err = run(
            "compact", str(src), "--window", "8000", "--store", target.spec, "--session", "two"
        )
    assert code == 3, err
    assert target.snapshot("two")["messages"] is None and target.snapshot("two")["events"] == []
    code, _, err = run(
        "compact", str(src), "--window", "8000", "--store", target.spec, "--session", "two"
    )
    assert code == 0, err
    assert target.snapshot("two")["messages"] == 40
