"""Reading recall questions and ordering candidates (issue 11, part 3): pure functions."""

from __future__ import annotations

import pytest

from contextfold.evidence.fields import call_fields
from contextfold.evidence.model import EvidencePointer
from contextfold.evidence.rank import (
    CallLog,
    Candidate,
    Ordinal,
    parse_ordinal,
    parse_query,
    query_lines,
    query_paths,
    rerank,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("show me the output of the first run of `python r.py`", Ordinal(index=0)),
        ("what did pytest print the second time?", Ordinal(index=1)),
        ("the third attempt", Ordinal(index=2)),
        ("the 12th run of make", Ordinal(index=11)),
        ("the last run", Ordinal(index=-1)),
        ("the latest output of `ls`", Ordinal(index=-1)),
        ("the previous run of the tests", Ordinal(index=-1)),
        ("the run before last", Ordinal(index=-2)),
        ("the second-to-last run", Ordinal(index=-2)),
        ("the output before the fix", Ordinal(fix="before")),
        ("what did it print before fixing it", Ordinal(fix="before")),
        ("after the fix", Ordinal(fix="after")),
        ("第一次运行的输出", Ordinal(index=0)),
        ("第二次的报错", Ordinal(index=1)),
        ("第12次", Ordinal(index=11)),
        ("最后一次的输出", Ordinal(index=-1)),
        ("上一次运行", Ordinal(index=-1)),
        ("倒数第二次", Ordinal(index=-2)),
        ("修复之前的报错", Ordinal(fix="before")),
        ("修复后的输出", Ordinal(fix="after")),
    ],
)
def test_ordinals_english_and_chinese(text: str, expected: Ordinal) -> None:
    assert parse_ordinal(text) == expected


@pytest.mark.parametrize(
    "text",
    ["show me the full output of `pytest`", "the first line of the file", "the last 20 lines", ""],
)
def test_no_ordinal(text: str) -> None:
    assert parse_ordinal(text) is None


def test_query_reading() -> None:
    q = parse_query(
        "Show me the KeyError from Read /testbed/pkg/x.py lines 10-40 (tests/test_a.py::T::t_b)",
        tools=("Read", "bash"),
    )
    assert q.paths == ("testbed/pkg/x.py", "tests/test_a.py")
    assert q.lines == (10, 40) and q.exceptions == ("KeyError",) and q.tools == ("Read",)
    assert q.wants_error and q.ordinal is None
    assert query_paths("see https://x.io/a.py and version 3.5") == ()
    assert query_paths("./pkg/x.py:120") == ("pkg/x.py",)
    assert query_lines("Read x offset=10 limit=5") == (10, 14)
    assert query_lines("str_replace_editor view x view_range=[3, 9]") == (3, 9)
    assert query_lines("第3到9行") == (3, 9)
    # lowercase "read" is a word, not the Read tool
    assert parse_query("show me x.py as you read it", tools=("Read",)).tools == ()


def _cand(i: str, seq: int, *, command: int = 0, failed: bool = False, path: int = 0) -> Candidate:
    p = EvidencePointer(id=i, tool_use_id=i, command="python r.py", shell=True)
    return Candidate(pointer=p, seq=seq, command=command, failed=failed, path=path)


def test_newest_run_first_and_ordinals_over_runs() -> None:
    runs = [_cand(f"c{n}", n, command=2) for n in range(5)]
    q = parse_query("show me the output of `python r.py`")
    assert [c.pointer.id for c in rerank(runs, q)][:2] == ["c4", "c3"]
    for text, want in (
        ("the first run of `python r.py`", "c0"),
        ("the second run of `python r.py`", "c1"),
        ("the run before last of `python r.py`", "c3"),
        ("`python r.py` 第一次的输出", "c0"),
        ("`python r.py` 倒数第二次", "c3"),
        ("`python r.py` 最后一次", "c4"),
    ):
        assert rerank(runs, parse_query(text))[0].pointer.id == want, text


def test_failing_run_first_when_an_error_is_asked() -> None:
    runs = [_cand("c0", 0, command=2, failed=True), _cand("c1", 1, command=2)]
    q = parse_query("show me the full error output of `python r.py`")
    assert rerank(runs, q)[0].pointer.id == "c0"


def test_ordinals_count_runs_still_in_view() -> None:
    """The first run never left the view: "the second run" is still the second one."""
    log = CallLog()
    for n in range(4):
        log.add(f"c{n}", call_fields("bash", {"command": "python r.py"}))
    cands = [
        Candidate(
            pointer=EvidencePointer(
                id=f"c{n}", tool_use_id=f"c{n}", command="python r.py", shell=True
            ),
            seq=n,
            command=2,
        )
        for n in (1, 2)
    ]
    got = rerank(cands, parse_query("the second run of `python r.py`"), calls=log)
    assert got[0].pointer.id == "c1"
    got = rerank(cands, parse_query("the third run of `python r.py`"), calls=log)
    assert got[0].pointer.id == "c2"


def test_before_the_fix() -> None:
    log = CallLog()
    order = ["python r.py", "python r.py", "sed -i 's/a/b/' pkg/x.py", "python r.py"]
    for n, cmd in enumerate(order):
        log.add(f"c{n}", call_fields("bash", {"command": cmd}))
    cands = [
        Candidate(
            pointer=EvidencePointer(
                id=f"c{n}", tool_use_id=f"c{n}", command="python r.py", shell=True
            ),
            seq=n,
            command=2,
        )
        for n in (0, 1, 3)
    ]
    for text in ("the output of `python r.py` before the fix", "`python r.py` 修复之前的输出"):
        assert rerank(cands, parse_query(text), calls=log)[0].pointer.id == "c1", text
    got = rerank(cands, parse_query("`python r.py` after the fix"), calls=log)
    assert got[0].pointer.id == "c3"


def test_first_failing_command_without_a_named_command() -> None:
    cands = [
        _cand("c0", 0),
        _cand("c1", 1, failed=True),
        _cand("c2", 2, failed=True),
        _cand("c3", 3),
    ]
    q = parse_query("What was the full error output of the first failing command?")
    assert rerank(cands, q)[0].pointer.id == "c1"
    q = parse_query("最后一次失败的命令的完整报错是什么？")
    assert rerank(cands, q)[0].pointer.id == "c2"
