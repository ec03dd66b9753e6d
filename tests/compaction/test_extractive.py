from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from contextfold.compaction.summarizers.base import Summarizer, SummaryRequest
from contextfold.compaction.summarizers.extractive import ExtractiveSummarizer
from contextfold.core.anchors import ALL_ANCHOR_TYPES, AnchorType, parse_summary
from contextfold.core.messages import Message, ToolCall, assistant, system, tool, user
from contextfold.core.wire import messages_from_openai
from tests.conftest import load_trace, trace_files

PYTEST_FAIL = """<returncode>1</returncode>
<output>
============================= test session starts ==============================
collected 3 items

tests/test_parse.py ..F                                                  [100%]

=================================== FAILURES ===================================
___________________________________ test_big ___________________________________
Traceback (most recent call last):
  File "/repo/tests/test_parse.py", line 12, in test_big
    parse("x" * 10)
  File "/repo/parser.py", line 40, in parse
    raise ValueError("input too long: 10 > 8")
ValueError: input too long: 10 > 8
=========================== short test summary info ============================
FAILED tests/test_parse.py::test_big - ValueError: input too long: 10 > 8
========================= 1 failed, 2 passed in 0.12s ==========================
</output>"""


def bash(call_id: str, command: str, text: str | None = None) -> Message:
    return assistant(
        text, [ToolCall(id=call_id, name="bash", arguments=json.dumps({"command": command}))]
    )


def history() -> list[Message]:
    return [
        system("You are a coding agent."),
        user(
            "<pr_description>\nConsider the following PR description:\n"
            "The parser rejects long inputs. It should accept inputs up to 64 characters.\n"
            "Steps: call parse('x' * 10).\n</pr_description>\n<instructions>be careful</instructions>"
        ),
        bash("c1", "cat parser.py", "I'll start by looking at the parser."),
        tool("c1", "<returncode>0</returncode>\n<output>\nMAX = 8\n</output>"),
        bash(
            "c2",
            "cd /repo && python -m pytest tests/test_parse.py",
            "The issue is that MAX is hard-coded to 8 in parser.py.",
        ),
        tool("c2", PYTEST_FAIL),
        bash("c3", "sed -i 's/MAX = 8/MAX = 64/' parser.py", "I will change MAX to 64."),
        tool("c3", "<returncode>0</returncode>\n<output>\n</output>"),
        bash(
            "c4",
            "cat <<'EOF' > notes/plan.md\n# plan\nuse MAX = 64 > 8\nEOF",
        ),
        tool("c4", "<returncode>0</returncode>\n<output>\n</output>"),
        assistant(
            None,
            [
                ToolCall(
                    id="c5",
                    name="str_replace_editor",
                    arguments=json.dumps(
                        {"command": "str_replace", "path": "/repo/docs/limits.rst", "old_str": "8"}
                    ),
                )
            ],
        ),
        tool("c5", "The file /repo/docs/limits.rst has been edited."),
        user("Also update the changelog please."),
        assistant("Next, I need to re-run the tests to confirm the fix."),
    ]


def summarize(msgs: list[Message], **kw: object) -> str:
    return ExtractiveSummarizer().summarize(SummaryRequest(messages=msgs, **kw))  # type: ignore[arg-type]


def test_is_a_summarizer() -> None:
    assert isinstance(ExtractiveSummarizer(), Summarizer)


def test_hand_built_history() -> None:
    out = summarize(history())
    p = parse_summary(out)
    assert p.problems == ()
    a = {x.type: x for x in p.anchors}
    intent = a[AnchorType.USER_INTENT].content
    assert intent.startswith("The parser rejects long inputs.")
    assert "pr_description" not in intent and "be careful" not in intent
    assert "Later request: Also update the changelog please." in intent

    progress = a[AnchorType.EXECUTION_PROGRESS].items()
    assert "edited parser.py" in progress
    assert "edited notes/plan.md" in progress
    assert "edited /repo/docs/limits.rst" in progress or "edited docs/limits.rst" in progress
    assert any(i.startswith("viewed parser.py") for i in progress)
    assert any(
        i.startswith("ran `python -m pytest tests/test_parse.py` -> 1 failed, 2 passed")
        for i in progress
    )

    tried = a[AnchorType.TRIED_SOLUTION].items()
    assert tried == ["`python -m pytest tests/test_parse.py` -> ValueError: input too long: 10 > 8"]

    decisions = a[AnchorType.KEY_DECISION].items()
    assert "The issue is that MAX is hard-coded to 8 in parser.py." in decisions
    assert "I will change MAX to 64." in decisions
    assert not any("start by looking" in d for d in decisions)

    nxt = a[AnchorType.NEXT_STEP].items()
    assert nxt[0] == "Next, I need to re-run the tests to confirm the fix."
    assert any("still fails" in n and "ValueError" in n for n in nxt)

    assert "Files modified: parser.py, notes/plan.md, " in p.summary
    assert "1 failed" in p.summary


def test_traceback_without_returncode_and_error_lines() -> None:
    msgs = [
        user("Make the script work."),
        bash("c1", "python reproduce.py"),
        tool(
            "c1",
            'Traceback (most recent call last):\n  File "reproduce.py", line 3, in <module>\n'
            "    import numpy\nModuleNotFoundError: No module named 'numpy'\n",
        ),
        bash("c2", "grep -rn missing_symbol src/"),
        tool("c2", "<returncode>1</returncode>\n<output>\n</output>"),  # no match: not a failure
        bash("c3", "git apply fix.patch"),
        tool("c3", "<returncode>1</returncode>\nerror: patch failed: src/a.py:12"),
    ]
    tried = parse_summary(summarize(msgs)).anchors[3].items()
    assert tried == [
        "`python reproduce.py` -> ModuleNotFoundError: No module named 'numpy'",
        "`git apply fix.patch` -> error: patch failed: src/a.py:12",
    ]


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("sed -i.bak -e 's/a/b/' src/x.py src/y.py", ["src/x.py", "src/y.py"]),
        ("cd /testbed && sed -i 's/a/b/' /testbed/pkg/mod.py", ["pkg/mod.py"]),
        ("echo 'x = 1' > conf.py && cat conf.py", ["conf.py"]),
        ("printf 'a\\nb' | tee -a out/log.cfg", ["out/log.cfg"]),
        ("cat > fix.py << 'EOF'\nopen('lib/core.py', 'w').write(s)\nEOF\npython fix.py", None),
        (
            "python - <<'EOF'\np = 'lib/core.py'\nwith open(p, 'w') as f:\n    f.write('x')\nEOF",
            ["lib/core.py"],
        ),
        ("python3 -c \"from pathlib import Path; Path('a/b.txt').write_text('x')\"", ["a/b.txt"]),
        (
            "cat <<'EOF' > p.diff\n--- a/src/m.py\n+++ b/src/m.py\n@@ -1 +1 @@\nEOF\npatch -p1 < p.diff",
            ["p.diff", "src/m.py"],
        ),
        ("mv new_impl.py pkg/impl.py", ["pkg/impl.py"]),
        ("cp pkg/impl.py pkg/impl.py.bak", []),
        ("grep -n foo src/x.py > matches.txt", []),
    ],
)
def test_files_written_by_shell_commands(command: str, expected: list[str] | None) -> None:
    msgs = [user("do it"), bash("c1", command), tool("c1", "<returncode>0</returncode>")]
    progress = parse_summary(summarize(msgs)).anchors[1].items()
    edited = [i for i in progress if i.startswith("edited ")]
    if expected is None:  # the script file and the file the script writes
        assert edited and "fix.py" in edited[0] and "lib/core.py" in edited[0]
    elif expected:
        assert edited, progress
        assert edited[0].startswith("edited " + ", ".join(expected))
    else:
        assert edited == []


def test_sweagent_style_edit_uses_open_file() -> None:
    msgs = [
        user("fix it"),
        bash("c1", "open src/pkg/fields.py 1474"),
        tool(
            "c1", "[File: /repo/src/pkg/fields.py (1997 lines total)]\n(Current directory: /repo)"
        ),
        bash("c2", "edit 1475:1475\n        return round(x)\nend_of_edit"),
        tool(
            "c2",
            "Your proposed edit has introduced new syntax error(s).\n- E999 IndentationError: unexpected indent",
        ),
        bash("c3", "edit 1475:1475\n    return round(x)\nend_of_edit"),
        tool("c3", "[File: /repo/src/pkg/fields.py (1997 lines total)]\nFile updated."),
    ]
    p = parse_summary(summarize(msgs))
    assert "edited src/pkg/fields.py" in p.anchors[1].items()
    assert p.anchors[3].items() == [
        "edit via `edit 1475:1475` rejected -> E999 IndentationError: unexpected indent"
    ]
    assert "Files modified: src/pkg/fields.py" in p.summary


def test_incremental_merge_and_sections_style() -> None:
    msgs = history()
    first = summarize(msgs[:6])
    p1 = parse_summary(first)
    second = summarize(msgs[6:], previous_summary=first, previous_anchors=p1.anchors)
    p2 = parse_summary(second)
    a = {x.type: x for x in p2.anchors}
    assert a[AnchorType.USER_INTENT].content.startswith("The parser rejects long inputs.")
    assert "Later request: Also update the changelog please." in a[AnchorType.USER_INTENT].content
    progress = a[AnchorType.EXECUTION_PROGRESS].items()
    assert any(i.startswith("viewed parser.py") for i in progress)  # from the first round
    assert "edited parser.py" in progress  # from the second
    assert (
        "The issue is that MAX is hard-coded to 8 in parser.py."
        in a[AnchorType.KEY_DECISION].items()
    )
    assert "ValueError" in a[AnchorType.TRIED_SOLUTION].content
    assert "Earlier: " in p2.summary

    sec = summarize(msgs, style="sections")
    for header in ("## SESSION INTENT", "## SUMMARY", "## ARTIFACTS", "## NEXT STEPS"):
        assert header in sec
    ps = parse_summary(sec)
    assert ps.problems == ()
    assert "parser.py (modified)" in ps.artifacts
    assert ps.anchors[0].content.startswith("The parser rejects long inputs.")
    assert ps.anchors[4].items()[0].startswith("Next, I need to re-run")


def test_empty_and_odd_inputs() -> None:
    for msgs in ([], [system("x")], [assistant("hello")], [user("")]):
        p = parse_summary(summarize(msgs))
        assert len(p.anchors) == 5
    odd = [
        Message(role="user", content=({"type": "image_url", "image_url": {"url": "x"}},)),
        assistant(None, [ToolCall(id="c1", name="bash", arguments='"just a string"')]),
        tool("c1", "ok"),
        assistant(
            None, [ToolCall(id="c2", name="bash", arguments='{"command": "echo \'unclosed"}')]
        ),
        tool("c2", "ok"),
    ]
    assert len(parse_summary(summarize(odd)).anchors) == 5


def test_bounded_output() -> None:
    msgs = history() * 1
    long_user = user("word " * 5000)
    big = [long_user] + [
        m
        for i in range(40)
        for m in (bash(f"c{i}", f"python run_{i}.py"), tool(f"c{i}", "Error: boom " * 50))
    ]
    for tokens in (60, 200, 2000):
        out = summarize(msgs + big, max_summary_tokens=tokens)
        assert len(out) <= tokens * 3
        assert len(parse_summary(out).anchors) == 5


TRACES = trace_files()


def _diff_files(raw: list[dict[str, object]]) -> tuple[int, set[str]]:
    """Index of the first tool output showing a git diff, and the files in it."""
    for i, m in enumerate(raw):
        content = m.get("content")
        if m.get("role") == "tool" and isinstance(content, str) and "diff --git a/" in content:
            return i, set(re.findall(r"^diff --git a/(\S+) b/", content, re.M))
    return len(raw), set()


@pytest.mark.slow
def test_all_traces() -> None:
    assert len(TRACES) == 45
    summarizer = ExtractiveSummarizer()
    for path in TRACES:
        raw = load_trace(path)
        msgs = messages_from_openai(raw)
        request = SummaryRequest(messages=msgs)
        out = summarizer.summarize(request)
        assert summarizer.summarize(SummaryRequest(messages=list(msgs))) == out, path.name
        assert len(out) <= request.max_summary_tokens * 3, path.name
        parsed = parse_summary(out)
        assert [a.type for a in parsed.anchors] == list(ALL_ANCHOR_TYPES)
        assert parsed.problems == (), (path.name, parsed.problems)
        assert not parsed.anchors[0].is_empty, path.name
        assert not parsed.anchors[1].is_empty, path.name
        # Before the agent ever displayed a diff, the summary must already name a changed file.
        cut, changed = _diff_files(raw)
        if changed:
            head = summarizer.summarize(SummaryRequest(messages=msgs[:cut]))
            assert any(f in head for f in changed), (path.name, changed)
            assert "Files modified: " in head, path.name
        sections = summarizer.summarize(SummaryRequest(messages=msgs, style="sections"))
        assert len(sections) <= request.max_summary_tokens * 3
        assert parse_summary(sections).problems == (), path.name


def test_trace_summary_is_stable_on_disk(tmp_path: Path) -> None:
    path = TRACES[-1]
    msgs = messages_from_openai(load_trace(path))
    out = summarize(msgs)
    target = tmp_path / "summary.md"
    target.write_text(out, encoding="utf-8")
    assert target.read_text(encoding="utf-8") == summarize(list(msgs))
