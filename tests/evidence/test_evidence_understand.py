"""Question understanding (what kind of output, about what) and the ranking that uses it."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import pytest

from contextfold.core.messages import Message
from contextfold.core.tools import ToolBox
from contextfold.evidence.intents import Intent, detect_intent
from contextfold.evidence.model import EvidencePointer
from contextfold.evidence.search import EvidenceSearch
from contextfold.evidence.store import EvidenceStore
from contextfold.evidence.tools import recall_tool
from contextfold.evidence.understand import asked_kind, kind_matches, subject_matches
from tests.evidence.test_evidence_search import compact, pairs
from tests.support.store_helpers import session_store

OK = "<returncode>0</returncode>\n<output>\n{}</output>"
FAIL = "<returncode>1</returncode>\n<output>\n{}</output>"
TB = "Traceback (most recent call last):\n  File \"reproduce.py\", line 3\nKeyError: '{}'\n"


@pytest.mark.parametrize(
    ("text", "kind", "subject"),
    [
        ("What was in views.py when you looked at it?", "read", ""),
        ("show me pkg/x.py as you read it", "read", ""),
        ("你看 views.py 的时候里面是什么？", "read", ""),
        ("What did running reproduce.py print the second time?", "run", ""),
        ("第二次运行 reproduce.py 输出了什么？", "run", ""),
        ("Show me the traceback from reproduce.py", "traceback", "reproduce.py"),
        ("把 reproduce.py 第一次的 traceback 给我看看", "traceback", "reproduce.py"),
        ("the stack trace of the run that failed", "traceback", ""),
        (
            "What were the test results of tests/test_a.py::test_b?",
            "tests",
            "tests/test_a.py::test_b",
        ),
        ("跑 tests/test_a.py 的测试结果是什么？", "tests", "tests/test_a.py"),
        ("What did the grep for `def foo` show?", "search", "def foo"),
        ("第二次搜索 def from_json 的结果是什么？", "search", "def from_json"),
        ("Which files did the search for `*.py` find?", "search", "*.py"),
        ("Show me the git diff", "diff", ""),
        ("what did the sub-agent report?", "report", ""),
        ("子代理的结论是什么？", "report", ""),
        ("give me the output of `ls -la`", None, ""),
    ],
)
def test_asked_kind(text: str, kind: str | None, subject: str) -> None:
    got = asked_kind(text)
    assert (got.kind if got else None) == kind
    if got is not None:
        assert got.subject == subject and got.because  # the words that said so


def test_kind_and_subject_of_a_call() -> None:
    run = EvidencePointer(id="a", command="python reproduce.py", action="run", shell=True)
    tests = EvidencePointer(id="b", command="python -m pytest tests/t.py::x", action="run")
    grep = EvidencePointer(
        id="c", command="grep -n 'def foo' a.py", action="search", patterns=("def foo",)
    )
    assert kind_matches("run", run, False) and not kind_matches("run", tests, False)
    assert kind_matches("tests", tests, False) and not kind_matches("tests", run, False)
    assert kind_matches("traceback", run, True) and not kind_matches("traceback", run, False)
    assert kind_matches("search", grep, False) and not kind_matches("read", grep, False)
    assert subject_matches("search", "def foo", grep)
    assert not subject_matches("search", "def fo", grep)
    worker = EvidencePointer(id="d", role="assistant", source_scope="sub_agent")
    assert kind_matches("report", worker, False) and not kind_matches("report", run, False)
    assert subject_matches("tests", "tests/t.py::x", tests)
    assert not subject_matches("tests", "tests/t.py", tests)  # another, narrower target


def _session(
    tmp_path: Path, visible: Collection[str] = (), msgs: list[Message] | None = None
) -> EvidenceSearch:
    store = EvidenceStore(session_store(tmp_path))
    compact(store, msgs if msgs is not None else _messages())
    return EvidenceSearch(store, visible=(lambda: visible) if visible else None)


def _messages() -> list[Message]:
    return pairs(
        [
            ("cat > reproduce.py << 'EOF'\nimport x\nEOF", OK.format("")),
            ("python reproduce.py", FAIL.format(TB.format("one"))),
            ("cat reproduce.py", OK.format("import x\n")),
            ("grep -n -A 20 'def load' pkg/x.py", OK.format("3:def load(): first\n")),
            ("python reproduce.py", FAIL.format(TB.format("two"))),
            ("grep -rn 'def load' pkg", OK.format("pkg/x.py:3:def load(): second\n")),
            ("sed -i 's/a/b/' pkg/x.py", OK.format("")),
            ("python reproduce.py", OK.format("all good\n")),
            ("python -m pytest tests/test_x.py", OK.format("3 passed in 0.1s\n")),
            ("git diff", OK.format("diff --git a/pkg/x.py b/pkg/x.py\n-a\n+b\n")),
        ]
    )


def test_natural_questions_find_the_output_asked_for(tmp_path: Path) -> None:
    search = _session(tmp_path)

    def top(q: str) -> str:
        return search.search(q)[0].pointer.tool_use_id or ""

    # a program's output, not the file written or read under the same name
    assert top("What did running reproduce.py print?") == "c7"
    assert top("What did running reproduce.py print the first time?") == "c1"
    assert top("第二次运行 reproduce.py 输出了什么？") == "c4"
    # tracebacks count among the runs that printed one
    assert top("Show me the traceback from reproduce.py") == "c4"
    assert top("Show me the first traceback from reproduce.py") == "c1"
    assert top("What was in reproduce.py when you looked at it?") == "c2"
    # a search by its pattern, ordinals among the searches for that very pattern
    assert top("What did the grep for `def load` show?") == "c5"
    assert top("What did the first grep for `def load` show?") == "c3"
    assert top("What were the test results?") == "c8"
    assert top("show me the git diff") == "c9"


def test_recall_says_why_it_picked_each_hit(tmp_path: Path) -> None:
    search = _session(tmp_path)
    hit = search.search("What did running reproduce.py print the first time?")[0]
    assert "a program's output" in hit.why and "'running'" in hit.why
    assert "the file named" in hit.why and "number 1 of 3" in hit.why
    hit = search.search("What did the grep for `def load` show?")[0]
    assert "a search result" in hit.why and "about 'def load'" in hit.why
    hit = search.search("show me the full output of `git diff`")[0]
    assert hit.why.startswith("the command named")


def test_recall_tool_prints_why(tmp_path: Path) -> None:
    search = _session(tmp_path)
    box = ToolBox([recall_tool(search, search.store)])
    text, is_error = box.run("recall", {"query": "Show me the first traceback from reproduce.py"})
    assert not is_error
    first = text.split("\n[2]")[0]
    assert "(why: a traceback (asked: 'traceback'); about 'reproduce.py'" in first
    assert "KeyError: 'one'" in first  # the first failing run, not the newest


def test_injection_takes_what_left_the_view(tmp_path: Path) -> None:
    question = "What was the error of the first failing run?"
    assert _session(tmp_path / "a").search(question)[0].pointer.tool_use_id == "c1"
    # the first failing run still in view: injection (removed_only) never takes it
    msgs = _messages()
    shown = [m.uuid for m in msgs if m.tool_call_id == "c1"]
    search = _session(tmp_path / "b", visible=shown, msgs=msgs)
    got = [h.pointer.tool_use_id for h in search.search(question, removed_only=True)]
    assert got and "c1" not in got


@pytest.mark.parametrize(
    ("question", "want"),
    [
        ("what did reproduce.py print before the fix?", "c4"),
        ("修复之前运行 reproduce.py 的输出是什么？", "c4"),
        ("the output of running reproduce.py the last time it failed", "c4"),
        ("show me the error from the first failing run of reproduce.py", "c1"),
        ("what was the output of reproduce.py", "c7"),
        ("最后一次 traceback", "c4"),
    ],
)
def test_which_one(tmp_path: Path, question: str, want: str) -> None:
    assert _session(tmp_path).search(question)[0].pointer.tool_use_id == want


@pytest.mark.parametrize(
    ("text", "asks"),
    [
        ("What was in views.py when you looked at it?", True),
        ("What did running reproduce.py print?", True),
        ("What did the grep for `def foo` show?", True),
        ("What were the test results of tests/test_x.py?", True),
        ("你看 views.py 的时候里面是什么？", True),
        ("运行 reproduce.py 输出了什么？", True),
        ("搜索 foo 找到了什么？", True),
        # asking for something new, not for an output from before
        ("Show me the git diff", False),
        ("run the tests and tell me what they print", False),
        ("what does running x.py print?", False),
        ("运行 reproduce.py", False),
    ],
)
def test_natural_questions_ask_for_evidence(text: str, asks: bool) -> None:
    assert (detect_intent(text) is Intent.EXPLICIT_DETAIL) is asks
