from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

from contextfold.cli import main
from contextfold.core.wire import messages_from_openai, to_anthropic
from contextfold.engine.manager import ContextManager
from tests.conftest import load_trace, trace_files


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def big_trace() -> list[dict[str, Any]]:
    path = next(p for p in trace_files() if "django-15213" in p.name)
    return load_trace(path)


def test_compact_openai_json_prints_notification_and_writes_view(tmp_path: Path) -> None:
    src = tmp_path / "t.json"
    src.write_text(json.dumps(big_trace()))
    ws = tmp_path / "ws"
    code, out, err = run(
        "compact", str(src), "--window", "32000", "--workspace", str(ws), "--session", "c1"
    )
    assert code == 0, err
    assert err.startswith("⚡ Context compacted [")
    view = json.loads(out)  # the view goes to stdout, status lines to stderr
    assert isinstance(view, list) and view[0]["role"] == "system"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json", "ws"]  # nothing beside it
    code, out, _ = run("records", "c1", "--workspace", str(ws))
    assert code == 0 and "tier" in out.splitlines()[0]
    assert any(label in out for label in ("Warn", "Soft", "Full", "Emergency"))


def test_compact_jsonl_and_anthropic(tmp_path: Path) -> None:
    data = big_trace()[:60]
    jl = tmp_path / "t.jsonl"
    jl.write_text("\n".join(json.dumps(m) for m in data))
    code, _, err = run(
        "compact",
        str(jl),
        "--window",
        "8000",
        "--workspace",
        str(tmp_path / "a"),
        "--out",
        str(tmp_path / "v1.json"),
    )
    assert code == 0 and "view written" in err
    system, msgs = to_anthropic(messages_from_openai(data))
    an = tmp_path / "anthropic.json"
    an.write_text(json.dumps({"system": system, "messages": msgs}))
    code, _, err = run(
        "compact",
        str(an),
        "--window",
        "8000",
        "--workspace",
        str(tmp_path / "b"),
        "--out",
        str(tmp_path / "v2.json"),
    )
    assert code == 0, err
    view = json.loads((tmp_path / "v2.json").read_text())
    assert set(view) == {"system", "messages"}
    assert view["messages"][0]["role"] == "user"


def test_compact_small_file_needs_nothing(tmp_path: Path) -> None:
    src = tmp_path / "s.json"
    src.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    code, out, err = run("compact", str(src), "--workspace", str(tmp_path / "w"))
    assert code == 0 and err.startswith("No compaction needed")
    assert json.loads(out) == [{"role": "user", "content": "hi"}]


def test_errors_are_clear(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"role": "wizard", "content": "x"}]))
    code, _, err = run("compact", str(bad), "--workspace", str(tmp_path / "w"))
    assert code == 2 and "message 0: unknown role 'wizard'" in err
    code, _, err = run("compact", str(tmp_path / "missing.json"))
    assert code == 2 and "cannot read" in err
    code, _, err = run("records", "../../etc/passwd", "--workspace", str(tmp_path))
    assert code == 2 and "not allowed" in err
    code, _, err = run("records", "nothing-here", "--workspace", str(tmp_path))
    assert code == 2 and "no session 'nothing-here'" in err
    ContextManager(workspace=tmp_path, session_id="quiet").add({"role": "user", "content": "hi"})
    code, out, _ = run("records", "quiet", "--workspace", str(tmp_path))
    assert code == 1 and "no compaction records" in out


def test_demo_replays_and_summarizes(tmp_path: Path) -> None:
    code, out, _ = run("demo", "--workspace", str(tmp_path / "demo"))
    assert code == 0
    assert "Context compacted [" in out
    assert "Summary" in out and "peak view" in out
    assert "MIT" in out  # attribution of the bundled trace


def test_restore_and_blocks(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    src = tmp_path / "t.json"
    src.write_text(json.dumps(big_trace()))
    assert (
        run("compact", str(src), "--window", "32000", "--workspace", str(ws), "--session", "r1")[0]
        == 0
    )
    code, out, _ = run("blocks", "r1", "--workspace", str(ws))
    assert code == 0 and out.startswith("cb-")
    code, out, _ = run("restore", "r1", "Traceback error", "--workspace", str(ws), "-k", "2")
    assert code == 0 and out.startswith("#1 score=") and "sha256 ok" in out
