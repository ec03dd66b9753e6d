"""Natural recall questions of the bench: asked by what an output is, not by its command."""

from __future__ import annotations

import json
from typing import Any

from contextfold.bench.natural import natural_questions, subject_of
from contextfold.bench.recall import summarize, trace_calls
from contextfold.bench.recall_report import recall_rows, recall_targets

OK = "<returncode>{}</returncode>\n<output>\n{}</output>"
TB = "Traceback (most recent call last):\n  File \"r.py\", line 1\nKeyError: 'x'\n"


def _msgs(commands: list[tuple[str, str]]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "fix it"}]
    outputs: dict[str, str] = {}
    for n, (cmd, out) in enumerate(commands):
        cid = f"c{n}"
        call = {
            "id": cid,
            "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": cmd})},
        }
        msgs.append({"role": "assistant", "tool_calls": [call]})
        msgs.append({"role": "tool", "tool_call_id": cid, "content": out})
        outputs[cid] = out
    return msgs, outputs


def test_subjects_from_the_call() -> None:
    msgs, _ = _msgs(
        [
            ("cd /testbed && cat django/views.py", OK.format(0, "x = 1\n")),
            ("python reproduce.py", OK.format(1, TB)),
            ("python -m pytest tests/test_x.py::test_a -q", OK.format(0, "1 passed\n")),
            ("grep -rn -A 3 'def foo' src/", OK.format(0, "src/a.py:3:def foo\n")),
            ("find . -name '*.cfg'", OK.format(0, "./setup.cfg\n")),
            ("git diff", OK.format(0, "diff --git a/x b/x\n")),
            ("python -c 'print(1)'", OK.format(0, "1\n")),
            ("ls -la", OK.format(0, "total 0\n")),
        ]
    )
    got = [subject_of(c) for c in trace_calls(msgs)]
    assert [(s.kind, s.name) if s else None for s in got] == [
        ("read", "django/views.py"),
        ("run", "reproduce.py"),
        ("tests", "tests/test_x.py::test_a"),
        ("search", "def foo"),
        ("search", "*.cfg"),
        ("diff", ""),
        None,
        None,
    ]


def test_each_question_names_one_output() -> None:
    msgs, outputs = _msgs(
        [
            ("python reproduce.py", OK.format(1, TB)),
            ("cat pkg/views.py", OK.format(0, "a\n")),
            ("python reproduce.py", OK.format(1, TB)),
            ("cat pkg/views.py", OK.format(0, "b\n")),
            ("python reproduce.py", OK.format(0, "ok\n")),
        ]
    )
    calls = trace_calls(msgs)
    asked = natural_questions(calls, outputs, list(outputs), ("shell",))
    texts = {(q.tid, q.kind): q.text for q in asked}
    run0, run2 = texts[("c0", "run")], texts[("c4", "run")]
    assert "reproduce.py" in run0 and ("first" in run0 or "第一次" in run0)
    assert "time" not in run2 and "次" not in run2  # the newest needs no ordinal
    # tracebacks are counted among the runs that printed one: c2 is the newest of them
    assert "reproduce.py" in texts[("c2", "traceback")]
    assert "first" not in texts[("c2", "traceback")]
    assert ("c4", "traceback") not in texts
    read0 = texts[("c1", "read")]
    assert "views.py" in read0 and ("first" in read0 or "第一次" in read0)
    # a question for every output that fits, none for the others
    assert {k for _, k in texts} == {"run", "traceback", "read"}


def test_summary_reports_natural_kinds_next_to_exact_ones() -> None:
    qs = [
        {"style": "shell", "kind": "call", "rank": 1, "ms": 1.0},
        {"style": "shell", "kind": "run", "rank": 2, "ms": 1.0},
        {"style": "shell", "kind": "run", "rank": 1, "ms": 1.0},
    ]
    summary = summarize([{"trace": "t", "set": "shell", "left": 3, "questions": qs}])
    assert summary["by_style"]["shell"]["questions"] == 1  # exact-command questions only
    assert summary["natural"]["run"] == {"questions": 2, "top1": 0.5, "top5": 1.0}
    names = [r[0] for r in recall_rows(summary)[1]]
    assert "natural/run" in names and "natural/all" in names
    missed = [t for t in recall_targets(summary) if not t["met"]]
    assert any("natural questions (run): top1" in t["text"] for t in missed)
