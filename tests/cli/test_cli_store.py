"""One store option everywhere: every command that reads or writes sessions takes ``--store``
(a folder or a ``postgresql://`` URL; ``--workspace`` is the same option) and honours
``$CONTEXTFOLD_STORE``. Run here against the shared PostgreSQL server, one schema per test."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from contextfold.cli import main
from contextfold.engine.manager import ContextManager
from tests.conftest import load_trace, trace_files
from tests.support.pg_support import drop_schema, new_schema_name, require_postgres


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def trace(part: str) -> list[dict[str, object]]:
    return load_trace(next(p for p in trace_files() if part in p.name))


@pytest.fixture
def pg_store(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.delenv("CONTEXTFOLD_STORE", raising=False)
    server = require_postgres()
    schema = new_schema_name()
    try:
        yield f"{server}?schema={schema}"
    finally:
        drop_schema(server, schema)


def test_every_session_command_reads_a_postgresql_store(pg_store: str, tmp_path: Path) -> None:
    src = tmp_path / "t.json"
    src.write_text(json.dumps(trace("django-15213")))
    code, out, err = run("compact", str(src), "--window", "16000", "--store", pg_store)
    assert code == 0, err
    assert "kept in postgresql://" in err and not (tmp_path / ".contextfold").exists()

    code, out, err = run("records", "cli", "--store", pg_store)
    assert code == 0 and "tier" in out.splitlines()[0], err
    code, out, err = run("blocks", "cli", "--workspace", pg_store)  # the alias, same option
    assert code == 0 and "ev-" in out, err
    evidence_id = next(w for w in out.split() if w.startswith("ev-"))
    code, out, err = run("restore", "cli", evidence_id, "--store", pg_store)
    assert code == 0 and "sha256 ok" in out, err
    code, out, err = run("sessions", "list", "--store", pg_store)
    assert code == 0 and "- cli (agent default" in out, err
    code, out, err = run("sessions", "show", "cli", "--last", "1", "--store", pg_store)
    assert code == 0 and "Session cli (agent default)" in out, err
    code, out, err = run("sessions", "search", "ExpressionWrapper", "--store", pg_store)
    assert code == 0 and "session cli seq" in out, err
    code, out, err = run("export", "cli", "-o", str(tmp_path / "exp"), "--store", pg_store)
    assert code == 0 and (tmp_path / "exp" / "log.jsonl").is_file(), err


def test_contextfold_store_is_the_default(
    pg_store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ContextManager(store=pg_store, session_id="env-1") as cm:
        cm.add({"role": "user", "content": "list the walrus accounts"})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CONTEXTFOLD_STORE", pg_store)
    code, out, err = run("sessions", "list")
    assert code == 0 and "- env-1 (agent default, 1 messages" in out, err
    code, out, err = run("sessions", "fork", "env-1", "env-2")
    assert code == 0 and "1 messages copied" in out, err
    code, out, err = run("sessions", "delete", "env-1")
    assert code == 2 and "--yes" in err  # refused: nothing deleted
    code, out, err = run("sessions", "delete", "env-1", "--yes")
    assert code == 0 and "deleted session env-1 (1 messages)" in out, err
    code, out, _ = run("sessions", "list")
    assert "env-1 " not in out and "- env-2 " in out
    code, _, err = run("records", "env-1")
    assert code == 2 and "no session 'env-1'" in err
    assert not (tmp_path / ".contextfold").exists()  # the environment's store, not a folder


def test_a_password_is_not_shown(tmp_path: Path, pg_store: str) -> None:
    secret = pg_store.replace("postgres@", "postgres:hunter2@", 1)
    code, _, err = run("records", "nope", "--store", secret)
    assert code == 2 and "hunter2" not in err and "no session 'nope'" in err


def test_sessions_tail_follows_a_session_another_thread_writes(pg_store: str) -> None:
    """The CLI prints the stored messages from --start, then each one the writer commits."""
    with ContextManager(store=pg_store, session_id="live") as cm:
        cm.add({"role": "system", "content": "You are a coding agent."})
    written = threading.Event()

    def writer() -> None:
        with ContextManager(store=pg_store, session_id="live") as w:
            for i in range(3):
                w.add({"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"})
        written.set()

    thread = threading.Thread(target=writer)
    thread.start()
    code, out, err = run(
        "sessions", "tail", "live", "--start", "0", "--count", "4", "--interval", "0.05",
        "--store", pg_store,
    )  # fmt: skip
    thread.join()
    assert written.is_set() and code == 0, err
    assert [line.split(":")[0] for line in out.splitlines() if line.startswith("[")] == [
        "[0] system",
        "[1] user",
        "[2] assistant",
        "[3] user",
    ]


def test_serve_takes_the_same_store_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from contextfold.cli import build_parser
    from contextfold.gateway.cli import config_from_args

    monkeypatch.delenv("CONTEXTFOLD_GATEWAY_STORE", raising=False)
    up = ["serve", "--upstream", "http://127.0.0.1:9"]
    monkeypatch.setenv("CONTEXTFOLD_STORE", str(tmp_path / "env"))
    assert config_from_args(build_parser().parse_args(up)).store == str(tmp_path / "env")
    args = build_parser().parse_args([*up, "--workspace", str(tmp_path / "flag")])
    assert config_from_args(args).store == str(tmp_path / "flag")  # the flag wins
    monkeypatch.setenv("CONTEXTFOLD_GATEWAY_STORE", str(tmp_path / "gw"))  # the specific one
    assert config_from_args(build_parser().parse_args(up)).store == str(tmp_path / "gw")
