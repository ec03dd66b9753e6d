"""What the CLI says: whole error causes, CLI hints, one exit code per kind of error,
``--version``, usage of the subcommand on a typo, bounds the help states."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from contextfold import __version__
from contextfold.cli import main
from contextfold.compaction.emergency import LLM_SKIPPED
from contextfold.engine.manager import ContextManager
from contextfold.testing import ScriptedSummarizer
from tests.conftest import load_trace, trace_files
from tests.support.http_fakes import FakeLLMServer, fake_llm_server_fixture  # noqa: F401


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse: usage errors, --help, --version
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(autouse=True)
def _no_env_store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CONTEXTFOLD_STORE", raising=False)
    monkeypatch.chdir(tmp_path)


def _transcript(tmp_path: Path, n: int = 60) -> Path:
    src = tmp_path / "t.json"
    path = next(p for p in trace_files() if "django-15213" in p.name)
    src.write_text(json.dumps(load_trace(path)[:n]))
    return src


def test_a_failed_llm_summary_shows_its_whole_cause(
    fake_llm_server: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "t")
    src, ws = _transcript(tmp_path), tmp_path / "ws"
    argv = ["compact", str(src), "--window", "8000", "--store", str(ws), "--force"]
    code, _, err = run(
        *argv, "--summarizer", "openai", "--model", "summ-model",
        "--base-url", fake_llm_server.openai_base_url,
    )  # fmt: skip
    assert code == 0, err  # fails open: the extractive summary stands in
    notice = next(line for line in err.splitlines() if "⚠" in line)
    # the whole first error, with the provider's answer (it was cut at 80 characters)
    assert notice.endswith(
        "failed: BadRequestError: Error code: 400 - fake_llm_server: no response scripted for "
        "this request"
    )
    assert "LLMSummarizer: summarizer call 1 to" in notice
    code, out, _ = run("records", "cli", "--store", str(ws))
    assert code == 0 and "error: LLM summary failed" in out and "BadRequestError" in out


def test_the_emergency_tier_says_the_llm_summarizer_was_not_used(tmp_path: Path) -> None:
    summarizer = ScriptedSummarizer(default="### User Intent\nFix it\n## Summary\nworked")
    path = next(p for p in trace_files() if "django-15213" in p.name)
    cm = ContextManager(workspace=tmp_path / "ws", session_id="e", summarizer=summarizer)
    cm.add_many(load_trace(path)[:60])
    rec = cm.compact(tier="emergency")
    assert any(n.startswith(LLM_SKIPPED) for n in rec.notes)
    assert "(no LLM summary)" in rec.notification()
    cm.close()
    code, out, _ = run("records", "e", "--store", str(tmp_path / "ws"))
    assert code == 0 and f"note: {LLM_SKIPPED}: ScriptedSummarizer" in out


def test_version_and_exit_codes_in_the_help() -> None:
    code, out, _ = run("--version")
    assert code == 0 and out.strip() == f"contextfold {__version__}"
    code, out, _ = run("--help")
    assert code == 0
    for text in ("0 done", "1 ", "2 bad input", "3 ", "130"):
        assert text in out


def test_a_typo_shows_the_subcommands_usage(tmp_path: Path) -> None:
    code, _, err = run("sessions", "list", "--agnet-id", "a")
    assert code == 2
    assert err.startswith("usage: contextfold sessions list") and "--agnet-id" in err
    code, _, err = run("records", "s1", "--jsno")
    assert code == 2 and err.startswith("usage: contextfold records")


def test_search_limit_is_bounded_as_the_help_says() -> None:
    code, _, err = run("sessions", "search", "x", "--limit", "999")
    assert code == 2 and "at most 50" in err


def test_one_exit_code_per_kind_of_error(tmp_path: Path) -> None:
    missing = str(tmp_path / "nowhere")
    for argv in (
        ["records", "s1", "--store", missing],
        ["blocks", "s1", "--store", missing],
        ["restore", "s1", "q", "--store", missing],
        ["sessions", "list", "--store", missing],
        ["sessions", "show", "s1", "--store", missing],
        ["sessions", "tail", "s1", "--store", missing],
        ["export", "s1", "-o", str(tmp_path / "x"), "--store", missing],
    ):
        code, _, err = run(*argv)
        assert code == 2 and "no workspace at" in err, (argv, code, err)
    ws = tmp_path / "ws"
    ContextManager(workspace=ws, session_id="here").close()
    for argv in (
        ["records", "nope"],
        ["blocks", "nope"],
        ["restore", "nope", "q"],
        ["sessions", "show", "nope"],
        ["sessions", "delete", "nope", "--yes"],
        ["sessions", "fork", "nope", "new"],
    ):
        code, _, err = run(*argv, "--store", str(ws))
        assert code == 2 and "no session 'nope'" in err, (argv, code, err)


def test_history_hints_are_cli_flags(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    with ContextManager(workspace=ws, session_id="long") as cm:
        cm.add({"role": "user", "content": "x" * 5000})
        for i in range(30):
            cm.add({"role": "assistant" if i % 2 == 0 else "user", "content": f"turn {i}"})
    code, out, _ = run("sessions", "show", "long", "--store", str(ws), "--max-chars", "100")
    assert code == 0 and "session_history" not in out and "sessionId" not in out
    assert "contextfold sessions show long --start 0 --last 11" in out
    code, out, _ = run(
        "sessions", "show", "long", "--start", "0", "--last", "1", "--max-chars", "100",
        "--store", str(ws),
    )  # fmt: skip
    assert "contextfold sessions show long --start 0 --last 1 --max-chars 5000" in out
    code, out, _ = run("sessions", "search", "turn", "--store", str(ws))
    assert code == 0 and "contextfold sessions show SESSION --start SEQ" in out


def test_ctrl_c_while_starting_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command modules are imported inside main(): an interrupt there is reported in one
    line with status 130, like one while a command runs."""
    import importlib

    real = importlib.import_module

    def interrupted(name: str, package: str | None = None) -> object:
        if name == "contextfold.gateway.cli":
            raise KeyboardInterrupt
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", interrupted)
    code, out, err = run("sessions", "list")
    assert code == 130 and out == "" and err == "contextfold: interrupted\n"


def test_importing_the_cli_loads_nothing_heavy() -> None:
    """What runs before main() (and its Ctrl-C handling) is small: no manager, no gateway."""
    import subprocess
    import sys

    probe = (
        "import sys, contextfold.cli; "
        "print(sorted(m for m in sys.modules if m.startswith('contextfold')))"
    )
    import os

    import contextfold

    env = {**os.environ, "PYTHONPATH": str(Path(contextfold.__file__).parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60,
        env=env,
    )  # fmt: skip
    assert json.loads(done.stdout.replace("'", '"')) == ["contextfold", "contextfold.cli"]
