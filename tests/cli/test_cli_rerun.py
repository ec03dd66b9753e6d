"""Running a command twice is safe: ``demo`` starts fresh in a new session and says so;
``compact`` refuses before writing (or replaces with ``--replace``), validates its input first,
never writes the input and keeps nothing unless told where."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from contextfold.cli import main
from contextfold.storage import open_store
from tests.conftest import load_trace, trace_files


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(autouse=True)
def _no_env_store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CONTEXTFOLD_STORE", raising=False)
    monkeypatch.chdir(tmp_path)


def _sessions(ws: Path) -> dict[str, int]:
    store = open_store(ws)
    try:
        return {i.session_id: i.messages for i in store.sessions()}
    finally:
        store.close()


def test_demo_twice_in_one_workspace_starts_fresh_and_says_so(tmp_path: Path) -> None:
    ws = tmp_path / "w"
    code, out, err = run("demo", "--workspace", str(ws))
    assert code == 0, err
    assert "session: demo\n" in out
    code, out, err = run("demo", "--workspace", str(ws))
    assert code == 0, err
    assert "session: demo-2" in out and "starts fresh in demo-2" in out
    assert "contextfold records demo-2 --store" in out
    code, out, err = run("demo", "--workspace", str(ws))
    assert code == 0 and "session: demo-3" in out, err
    assert _sessions(ws) == {"demo": 188, "demo-2": 188, "demo-3": 188}  # none grew


def _transcript(tmp_path: Path) -> Path:
    src = tmp_path / "t.json"
    path = next(p for p in trace_files() if "django-15213" in p.name)
    src.write_text(json.dumps(load_trace(path)[:40]))
    return src


def test_compact_twice_refuses_before_writing_then_replaces(tmp_path: Path) -> None:
    src, ws = _transcript(tmp_path), tmp_path / "ws"
    code, _, err = run("compact", str(src), "--window", "8000", "--store", str(ws))
    assert code == 0, err
    code, _, err = run("compact", str(src), "--window", "8000", "--store", str(ws))
    assert code == 2 and "already has 40 messages" in err and "--replace" in err
    assert _sessions(ws) == {"cli": 40}
    code, _, err = run("compact", str(src), "--window", "8000", "--store", str(ws), "--replace")
    assert code == 0 and "kept in" in err, err
    assert _sessions(ws) == {"cli": 40}
    code, out, _ = run("records", "cli", "--store", str(ws))
    assert code == 0 and len(out.splitlines()) >= 3


def test_compact_keeps_nothing_without_a_store(tmp_path: Path) -> None:
    src = _transcript(tmp_path)
    code, out, err = run("compact", str(src), "--window", "8000")
    assert code == 0 and json.loads(out)[0]["role"] == "system", err
    assert "not kept" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]  # no ./.contextfold
    code, out, err = run("compact", str(src), "--window", "8000")  # and so it reruns
    assert code == 0, err


def test_compact_checks_its_input_first_and_never_writes_it(tmp_path: Path) -> None:
    src, ws = _transcript(tmp_path), tmp_path / "ws"
    before = src.read_bytes()
    code, _, err = run("compact", str(src), "-o", str(src), "--store", str(ws))
    assert code == 2 and "that is the input file" in err
    assert src.read_bytes() == before and not ws.exists()
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    code, out, err = run("compact", str(empty), "--store", str(ws))
    assert code == 2 and out == "" and "no messages" in err and not ws.exists()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"role": "wizard", "content": "hi"}]))
    code, _, err = run("compact", str(bad), "--store", str(ws))
    assert code == 2 and "wizard" in err and not ws.exists()
