"""What tripped a new user up on the command line (issue 9 part 8, issue 11 part 1)."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from contextfold.bench.cli import build_parser as bench_parser
from contextfold.cli import build_parser, main
from contextfold.engine.manager import ContextManager
from tests.conftest import load_trace, trace_files

SRC = str(Path(__file__).resolve().parents[2] / "src")


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def usage_error(*argv: str) -> str:
    """argparse rejects the arguments: exit status 2, message on stderr."""
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()), pytest.raises(SystemExit) as exc:
        main(list(argv))
    assert exc.value.code == 2
    return err.getvalue()


def trace(name: str) -> list[dict[str, Any]]:
    return load_trace(next(p for p in trace_files() if name in p.name))


@pytest.fixture(scope="module")
def compacted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace with session r1: a real trajectory compacted at a 32K window."""
    tmp = tmp_path_factory.mktemp("cli")
    src = tmp / "t.json"
    src.write_text(json.dumps(trace("django-15213")))
    ws = tmp / "ws"
    code, _, err = run(
        "compact", str(src), "--window", "32000", "--workspace", str(ws), "--session", "r1"
    )
    assert code == 0, err
    return ws


def test_compact_writes_stdout_or_the_path_asked_never_beside_the_input(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    src = data / "t.json"
    src.write_text(json.dumps(trace("django-15213")[:40]))
    code, out, err = run(
        "compact", str(src), "--window", "8000", "--workspace", str(tmp_path / "w")
    )
    assert code == 0, err
    assert json.loads(out)[0]["role"] == "system"
    target = tmp_path / "elsewhere" / "view.json"
    target.parent.mkdir()
    code, out, err = run(
        "compact", str(src), "-o", str(target), "--workspace", str(tmp_path / "w2")
    )
    assert code == 0 and out == "" and f"view written to {target}" in err
    assert json.loads(target.read_text())[0]["role"] == "system"
    assert [p.name for p in data.iterdir()] == ["t.json"]  # the data folder is untouched


def test_restore_by_an_evidence_id_that_blocks_lists(compacted: Path) -> None:
    code, out, _ = run("blocks", "r1", "--workspace", str(compacted))
    assert code == 0
    ids = re.findall(r"^\s+(ev-[0-9a-f]+) ", out, flags=re.M)
    assert ids
    cm = ContextManager(workspace=compacted, session_id="r1")
    for evidence_id in (ids[0], ids[-1]):
        code, out, _ = run("restore", "r1", evidence_id, "--full", "--workspace", str(compacted))
        assert code == 0, out
        first = out.splitlines()[0]
        assert first.startswith("#1 ") and f"id={evidence_id} " in first and "sha256 ok" in first
        pointer = cm.recovery.search.get(evidence_id)
        assert pointer is not None
        body = cm.recovery.store.restore(pointer).text
        assert "   " + body.replace("\n", "\n   ") in out
    code, out, _ = run("restore", "r1", "ev-000000000000", "--workspace", str(compacted))
    assert code == 1 and "no evidence with id 'ev-000000000000'" in out


def test_missing_workspace_says_so(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    for argv in (
        ("records", "s"),
        ("blocks", "s"),
        ("restore", "s", "Traceback"),
        ("sessions", "list"),
        ("sessions", "search", "x"),
        ("sessions", "history", "s"),
    ):
        code, _, err = run(*argv, "--workspace", str(missing))
        assert code == 2, argv
        assert f"no workspace at {missing}" in err, (argv, err)
        assert "compaction blocks" not in err and not missing.exists()
    (tmp_path / "empty").mkdir()
    code, _, err = run("blocks", "s", "--workspace", str(tmp_path / "empty"))
    assert code == 2 and "no session 's'" in err


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_non_positive_counts_are_usage_errors(value: str, compacted: Path) -> None:
    err = usage_error("restore", "r1", "x", "-k", value, "--workspace", str(compacted))
    assert "argument -k: must be" in err
    err = usage_error("compact", "f.json", "--window", value)
    assert "argument --window: must be" in err
    err = usage_error("demo", "--window", value)
    assert "argument --window: must be" in err
    err = usage_error("sessions", "history", "r1", "--last", value)
    assert "argument --last: must be" in err


def test_a_closed_pipe_ends_quietly(compacted: Path) -> None:
    """`contextfold records --json | head -1`: no BrokenPipeError traceback."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "contextfold",
            "records",
            "r1",
            "--json",
            "--workspace",
            str(compacted),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": SRC},
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first line is written
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert err == ""
    shell = subprocess.run(
        f"{sys.executable} -m contextfold records r1 --json --workspace {compacted} | head -1",
        shell=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC},
        timeout=120,
    )
    assert json.loads(shell.stdout)["session_id"] == "r1"
    assert "Traceback" not in shell.stderr and "BrokenPipe" not in shell.stderr


def _parsers(
    parser: argparse.ArgumentParser, path: str
) -> list[tuple[str, argparse.ArgumentParser]]:
    out = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                out.extend(_parsers(child, f"{path} {name}"))
    return out


def test_every_option_has_help_text() -> None:
    parsers = [*_parsers(build_parser(), "contextfold"), ("contextfold bench", bench_parser())]
    names = {path for path, _ in parsers}
    assert {"contextfold sessions search", "contextfold mcp", "contextfold restore"} <= names
    missing = [
        f"{path}: {action.dest}"
        for path, parser in parsers
        if parser.add_help  # the `bench` stub forwards to the bench parser, checked itself
        for action in parser._actions
        if not isinstance(action, argparse._SubParsersAction | argparse._HelpAction)
        and not (action.help and action.help.strip())
    ]
    assert missing == []


def test_sessions_list_history_search(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    a = ContextManager(workspace=ws, session_id="alpha", agent_id="a")
    a.add_many(trace("django-15213")[:12])
    b = ContextManager(workspace=ws, session_id="beta", agent_id="b")
    b.add({"role": "user", "content": "deploy the zebra-quokka service"})
    code, out, _ = run("sessions", "list", "--workspace", str(ws))
    assert code == 0 and "- alpha (agent a" in out and "- beta (agent b" in out
    code, out, _ = run("sessions", "list", "--workspace", str(ws), "--agent-id", "b")
    assert code == 0 and "- beta (agent b" in out and "alpha" not in out
    code, out, _ = run("sessions", "search", "zebra quokka", "--workspace", str(ws))
    assert code == 0 and "session beta seq 0" in out
    code, out, _ = run(
        "sessions", "search", "zebra quokka", "--workspace", str(ws), "--agent-id", "a"
    )
    assert code == 1 and out.startswith("No matches")  # 1: ran, found nothing
    code, out, _ = run("sessions", "history", "alpha", "--last", "2", "--workspace", str(ws))
    assert code == 0 and out.startswith("Session alpha (agent a): messages 10-11 of 12")
    code, _, err = run("sessions", "history", "alpha", "--workspace", str(ws), "--agent-id", "b")
    assert code == 2 and "belongs to agent 'a', not 'b'" in err  # 2: bad input, as everywhere
    code, _, err = run("sessions", "history", "gamma", "--workspace", str(ws))
    assert code == 2 and "no session 'gamma'" in err


def test_compact_exits_non_zero_when_the_view_is_over_the_window(tmp_path: Path) -> None:
    src = tmp_path / "t.json"
    src.write_text(json.dumps(trace("django-15213")))
    code, out, err = run("compact", str(src), "--window", "100", "--workspace", str(tmp_path / "w"))
    assert code != 0
    assert "100-token window" in err  # "the view is N tokens, over the ..." or "no view fits"
    # the view is still printed, so it can be looked at
    if out:
        assert isinstance(json.loads(out), list)


def test_demo_exits_non_zero_when_a_view_was_over_the_window(tmp_path: Path) -> None:
    # prepare() never returns a view over the window: a task too large for it is shortened
    # (head and tail, full text kept), and only when nothing can fit does it raise, which the
    # demo reports with exit status 1
    code, out, err = run("demo", "--window", "300", "--workspace", str(tmp_path / "d"))
    assert code == 1
    assert "300-token window" in err and "no view fits" in err
    peak = re.search(r"peak view:\s+(\d+) tokens", out)
    if code == 1 and peak:  # views were produced and measured: the peak is the largest
        assert f"largest {peak.group(1)} tokens" in err


def test_demo_says_what_was_offloaded_and_that_it_reads_back(tmp_path: Path) -> None:
    code, out, _ = run("demo", "--window", "4000", "--workspace", str(tmp_path / "d"))
    assert code == 0, out
    line = re.search(r"offloaded files:\s+(\d+) \((.+)\)", out)
    assert line, out
    total = int(line.group(1))
    kinds = re.findall(
        r"(\d+) (tool outputs?|long assistant messages?|tool-call argument lists?)", line.group(2)
    )
    assert sum(int(n) for n, _ in kinds) == total and total > 0
    back = re.search(r"read back:\s+(\d+) of (\d+) intact \(sha256\); (\d+) of (\d+) ", out)
    assert back and back.group(1) == back.group(2) == str(total)
    assert back.group(3) == back.group(4)  # every comparable one is byte-identical
    assert "byte-exact" not in out


def test_the_mcp_snippets_of_the_docs_parse() -> None:
    docs = Path(__file__).resolve().parents[2] / "docs" / "command-line.md"
    section = docs.read_text(encoding="utf-8").split("\n## MCP", 1)[1].split("\n## ", 1)[0]
    config = json.loads(section.split("```json\n", 1)[1].split("```", 1)[0])
    server = config["mcpServers"]["contextfold"]
    toml_args = re.search(r"^args = (\[.*\])$", section, flags=re.M)
    assert toml_args
    for command, args in (
        (server["command"], server["args"]),
        ("contextfold", json.loads(toml_args.group(1))),
    ):
        assert command == "contextfold"
        parsed = build_parser().parse_args(args)
        assert parsed.command == "mcp" and parsed.store and parsed.agent_id == "default"


def test_the_cli_and_the_mcp_module_import_without_the_mcp_sdk() -> None:
    code = (
        "import sys, contextfold.cli, contextfold.mcp.server, contextfold.mcp.workspace_tools; "
        "assert not [m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')], 'mcp'"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": SRC},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
