"""The recall measurement of ``contextfold bench`` and the file-tool style converter."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contextfold.bench.cli import main
from contextfold.bench.natural import NATURAL_KINDS
from contextfold.bench.paraphrase import PARAPHRASE_KINDS
from contextfold.bench.recall import EXACT_KINDS, measure, questions, summarize, trace_calls
from contextfold.bench.recall_report import recall_html, recall_rows, recall_targets
from contextfold.bench.toolstyles import convert_call, convert_trace
from tests.conftest import load_trace, trace_files

OK = "<returncode>0</returncode>\n<output>\n{}</output>"


def test_convert_reads_into_each_style() -> None:
    out = OK.format("a = 1\nb = 2\n")
    name, args, text = convert_call("cd /testbed && cat pkg/x.py", out, "claude")  # type: ignore[misc]
    assert (name, args) == ("Read", {"file_path": "/testbed/pkg/x.py"})
    assert text == "     1\ta = 1\n     2\tb = 2"
    name, args, text = convert_call("sed -n '10,11p' pkg/x.py", out, "sweagent")  # type: ignore[misc]
    assert name == "str_replace_editor"
    assert args == {"command": "view", "path": "/testbed/pkg/x.py", "view_range": [10, 11]}
    assert text.startswith("Here's the result of running `cat -n` on /testbed/pkg/x.py:\n")
    assert "    10\ta = 1" in text
    name, args, _ = convert_call("cd /repo/sub && head -n 5 ../x.py", out, "claude")  # type: ignore[misc]
    assert args == {"file_path": "/repo/x.py", "limit": 5}
    got = convert_call("nl -ba pkg/x.py | sed -n '3,4p'", OK.format("     3\tc\n"), "claude")
    assert got is not None and got[1] == {"file_path": "/testbed/pkg/x.py", "offset": 3, "limit": 2}


def test_convert_search_write_edit_and_keep_the_rest() -> None:
    got = convert_call('grep -n "def foo" pkg/x.py', OK.format("3:def foo():\n"), "claude")
    assert got is not None and got[0] == "Grep"
    assert got[1] == {
        "pattern": "def foo",
        "path": "/testbed/pkg/x.py",
        "output_mode": "content",
        "-n": True,
    }
    # SWE-agent greps in the shell
    assert convert_call('grep -n "def foo" pkg/x.py', OK.format("x\n"), "sweagent") is None
    heredoc = "cat > repro.py << 'EOF'\nprint(1)\nEOF"
    got = convert_call(heredoc, OK.format(""), "sweagent")
    assert got is not None
    assert got[1] == {"command": "create", "path": "/testbed/repro.py", "file_text": "print(1)\n"}
    got = convert_call("sed -i 's/old/new/' pkg/x.py", OK.format(""), "claude")
    assert got is not None and got[0] == "Edit"
    assert got[1] == {"file_path": "/testbed/pkg/x.py", "old_string": "old", "new_string": "new"}
    for kept in ("python reproduce.py", "cat a.py b.py", "cat a.py | grep x", "ls -la"):
        assert convert_call(kept, OK.format("x\n"), "claude") is None, kept
    # a failing read stays a shell call
    assert (
        convert_call("cat nope.py", "<returncode>1</returncode>\n<output>\n</output>", "claude")
        is None
    )
    with pytest.raises(ValueError, match="unknown tool style"):
        convert_call("cat a.py", OK.format(""), "vim")


def test_convert_trace_keeps_ids_order_and_pairing() -> None:
    data = load_trace(sorted(trace_files(), key=lambda p: p.stat().st_size)[3])
    for style in ("claude", "sweagent"):
        conv = convert_trace(data, style)
        assert len(conv) == len(data)
        assert [m.get("tool_call_id") for m in conv] == [m.get("tool_call_id") for m in data]
        ids = [c["id"] for m in conv for c in m.get("tool_calls") or []]
        assert ids == [c["id"] for m in data for c in m.get("tool_calls") or []]
        assert conv == convert_trace(data, style)  # deterministic


def _call(i: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": i, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def test_questions_name_runs_by_ordinal() -> None:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "fix it"}]
    outputs = {}
    for n in range(3):
        cid = f"call{n}"
        msgs.append(
            {"role": "assistant", "tool_calls": [_call(cid, "bash", {"command": "python r.py"})]}
        )
        text = "<returncode>1</returncode>\nTraceback (most recent call last):\nKeyError: 'x'\n"
        msgs.append({"role": "tool", "tool_call_id": cid, "content": text})
        outputs[cid] = text
    msgs.append(
        {"role": "assistant", "tool_calls": [_call("rd", "Read", {"file_path": "/testbed/a.py"})]}
    )
    msgs.append({"role": "tool", "tool_call_id": "rd", "content": "     1\tx = 1"})
    outputs["rd"] = "     1\tx = 1"
    calls = trace_calls(msgs)
    assert [c.style for c in calls] == ["shell", "shell", "shell", "file"]
    asked = questions(calls, outputs, ["call0", "call1", "call2", "rd"], ("shell", "file"))
    texts = {(q.tid, q.kind): q.text for q in asked}
    assert "first" in texts[("call0", "call")] or "第一次" in texts[("call0", "call")]
    assert "python r.py" in texts[("call2", "call")]
    assert "time" not in texts[("call2", "call")]  # the newest run needs no ordinal
    assert ("call0", "ordinal") in texts and ("call2", "ordinal") in texts
    assert ("call1", "error") in texts
    assert texts[("rd", "path")] in ("Show me a.py as you read it", "读到的 a.py 内容是什么")
    assert (
        texts[("rd", "call")].endswith("Read /testbed/a.py")
        or "Read /testbed/a.py" in texts[("rd", "call")]
    )


def test_measure_a_real_trace_and_report() -> None:
    path = sorted(trace_files(), key=lambda p: p.stat().st_size)[5]
    data = load_trace(path)
    shell = measure(data, window=4_000, styles=("shell",))
    assert shell["left"] > 0 and shell["questions"]
    file_run = measure(convert_trace(data, "claude"), window=4_000, styles=("file",))
    assert {q["style"] for q in file_run["questions"]} <= {"file"}
    runs = [
        {"trace": path.name, "set": "shell", **shell},
        {"trace": path.name, "set": "claude", **file_run},
    ]
    summary = summarize(runs)
    got = summary["by_style"]["shell"]
    exact = [q for q in shell["questions"] if q["kind"] in EXACT_KINDS]
    assert got["questions"] == len(exact)  # the natural questions are reported apart
    paraphrased = {f"para/{k}" for k in PARAPHRASE_KINDS}
    kinds = {q["kind"] for q in shell["questions"]} - set(EXACT_KINDS)
    assert kinds <= set(NATURAL_KINDS) | paraphrased and kinds & paraphrased
    assert set(summary["paraphrase"]) <= set(PARAPHRASE_KINDS) | {"all", "zh"}
    ranks = [q["rank"] for q in exact]
    assert got["top1"] == round(sum(1 for r in ranks if r == 1) / len(ranks), 4)
    assert got["top5"] >= got["top1"] and summary["restore_p50_ms"] is not None
    summary.update({"window": 4_000, "preset": "progressive"})
    targets = recall_targets(summary)
    assert any("restore p50" in t["text"] for t in targets)
    headers, rows = recall_rows(summary)
    assert headers[0].startswith("tool style") and rows[0][0] == "shell"
    page = recall_html(summary)
    assert "recall of outputs that left the view" in page and "<table>" in page


def test_cli_reports_recall(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    small = str(sorted(trace_files(), key=lambda p: p.stat().st_size)[2])
    out = tmp_path / "out"
    code = main(
        [
            "--window",
            "4000",
            "--strategies",
            "raw,progressive",
            "--traces",
            small,
            "--no-progress",
            "--plain",
            "--targets",  # on a user's traces only when asked for
            "--out",
            str(out),
        ]
    )
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    assert results["recall"]["by_style"]["shell"]["questions"] > 0
    assert any(t["strategy"].startswith("recall") for t in results["targets"])
    assert "recall of outputs that left the view" in (out / "report.html").read_text()
    assert "top-1" in capsys.readouterr().out
    assert (
        main(
            [
                "--strategies",
                "raw",
                "--traces",
                small,
                "--no-progress",
                "--plain",
                "--no-html",
                "--out",
                str(tmp_path / "raw"),
            ]
        )
        == 0
    )
    assert "recall" not in json.loads((tmp_path / "raw" / "results.json").read_text())
