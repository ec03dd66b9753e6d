"""Outputs asked for by the kind of program that made them: a directory listing, a package
install, a linter's or type checker's report (English and Chinese questions), and how recall
tells those outputs from the command that made them."""

from __future__ import annotations

from pathlib import Path

import pytest

from contextfold.core.messages import Message
from contextfold.evidence.model import EvidencePointer
from contextfold.evidence.search import EvidenceSearch
from contextfold.evidence.store import EvidenceStore
from contextfold.evidence.understand import asked_kind, kind_matches, subject_matches
from contextfold.evidence.understand_programs import command_kinds, listings
from tests.evidence.test_evidence_search import compact, pairs
from tests.support.store_helpers import session_store

OK = "<returncode>0</returncode>\n<output>\n{}</output>"
FAIL = "<returncode>1</returncode>\n<output>\n{}</output>"


@pytest.mark.parametrize(
    ("text", "kind", "subject"),
    [
        ("Show me the listing of the folder src", "list", "src"),
        ("Which entries did the directory /testbed have the second time?", "list", "/testbed"),
        ("what was in the directory pkg?", "list", "pkg"),
        ("Show me the listing of the folder you were in", "list", "."),
        ("the directory listing of the current folder", "list", "."),
        ("目录列表", "list", ""),
        ("第二次/testbed 文件夹下有哪些东西？", "list", "/testbed"),
        ("当前目录里列出了什么？", "list", "."),
        ("the install output", "install", ""),
        ("What did setting up the dependencies report?", "install", ""),
        ("How did fetching the packages go the first time?", "install", ""),
        ("安装的输出", "install", ""),
        ("装依赖的时候输出了什么？", "install", ""),
        ("what the linter complained about", "lint", ""),
        ("Which style problems were reported?", "lint", ""),
        ("what did mypy say?", "lint", ""),
        ("lint 报了什么", "lint", ""),
        ("静态检查发现了什么？", "lint", ""),
        # the kinds they are not
        ("What was in views.py when you looked at it?", "read", ""),
        ("Which files did the search for `*.py` find?", "search", "*.py"),
        ("show me the traceback from the type checker", "traceback", ""),
    ],
)
def test_asked_for_by_the_kind_of_program(text: str, kind: str, subject: str) -> None:
    got = asked_kind(text)
    assert got is not None and got.kind == kind and got.subject == subject and got.because


@pytest.mark.parametrize(
    ("command", "kinds"),
    [
        ("ls -la /testbed", {"list"}),
        ("cd /testbed && ls", {"list"}),
        ("tree -L 2 src", {"list"}),
        ("find /testbed -type f | head", {"list"}),
        ("find . -name '*.py'", set()),  # a search by name
        ("git ls-files", {"list"}),
        ("pip install -e .", {"install"}),
        ("cd /testbed && python -m pip install 'numpy<2' 2>&1 | tail -3", {"install"}),
        ("uv pip install requests", {"install"}),
        ("uv pip list", set()),
        ("sudo apt-get install -y git", {"install"}),
        ("npm ci", {"install"}),
        ("poetry install --no-root", {"install"}),
        ("python setup.py develop", {"install"}),
        ("ruff check src", {"lint"}),
        ("ruff format src", set()),
        ("python -m mypy src", {"lint"}),
        ("timeout 60 flake8 x.py", {"lint"}),
        ("npx --yes eslint .", {"lint"}),
        ("npx tsc --noEmit", {"lint"}),
        ("poetry run pylint pkg", {"lint"}),
        ("black --check .", {"lint"}),
        ("black x.py", set()),  # formats: nothing reported
        ("sqlfluff lint a.sql", {"lint"}),
        ("pip install -e . && ruff check .", {"install", "lint"}),
        ("python reproduce.py", set()),
        ("cat ls.txt | grep install", set()),
    ],
)
def test_command_kinds(command: str, kinds: set[str]) -> None:
    assert command_kinds(command) == kinds


def test_what_a_listing_lists() -> None:
    assert listings("cd /testbed && ls -la") == [((), "/testbed")]
    assert listings("find src tests -type f") == [(("src", "tests"), "")]

    def lists(subject: str, command: str) -> bool:
        p = EvidencePointer(id="x", command=command, action="run", shell=True)
        return kind_matches("list", p, False) and subject_matches("list", subject, p)

    assert lists("src", "ls -la src/") and lists("src", "ls ./src")
    assert lists("/testbed", "cd /testbed && ls") and not lists("src", "cd /testbed && ls")
    assert lists(".", "ls -la") and lists(".", "ls .") and not lists(".", "ls src")
    assert not lists(".", "mkdir -p /tmp/t && cd /tmp/t && tree")  # another folder
    assert lists("pkg", "ls /testbed/pkg") and not lists("/testbed", "cd /testbed && ls src")
    tool = EvidencePointer(id="t", tool_name="LS", command="LS src", action="search")
    assert kind_matches("list", tool, False)
    install = EvidencePointer(id="i", command="pip install -e .", action="run", shell=True)
    assert kind_matches("install", install, False) and not kind_matches("lint", install, False)
    assert not kind_matches("run", EvidencePointer(id="y", command="ls", action="read"), False)


def _messages() -> list[Message]:
    return pairs(
        [
            ("ls -la", OK.format("total 8\nsetup.py\npkg\nREADME.md\n")),
            ("pip install -e .", OK.format("Successfully installed mypkg-0.1\n")),
            ("python reproduce.py", OK.format("value is 3\n")),
            ("ls pkg", OK.format("__init__.py\ncore.py\n")),
            ("ruff check pkg", FAIL.format("pkg/core.py:3:1: F401 `os` imported but unused\n")),
            ("python reproduce.py", OK.format("value is 4\n")),
            ("cd /testbed && ls", OK.format("setup.py\npkg\ntests\n")),
            ("python -m mypy pkg", FAIL.format("pkg/core.py:9: error: Missing return\n")),
            ("pip install pytest", OK.format("Successfully installed pytest-8.0\n")),
            ("python reproduce.py", OK.format("value is 5\n")),
        ]
    )


def _session(tmp_path: Path) -> EvidenceSearch:
    store = EvidenceStore(session_store(tmp_path))
    compact(store, _messages())
    return EvidenceSearch(store)


@pytest.mark.parametrize(
    ("question", "want"),
    [
        ("Show me the listing of the folder pkg", "c3"),
        ("Which entries did the directory /testbed have?", "c6"),
        ("Show me the listing of the folder you were in", "c0"),  # not the cd to another
        ("the first directory listing", "c0"),
        ("pkg 目录里列出了什么？", "c3"),
        ("第一次目录列表", "c0"),
        ("the install output", "c8"),
        ("How did fetching the packages go the first time?", "c1"),
        ("第一次安装的输出", "c1"),
        ("what the linter complained about", "c7"),
        ("What did the linter complain about the first time?", "c4"),
        ("lint 报了什么", "c7"),
        ("第一次静态检查发现了什么？", "c4"),
    ],
)
def test_recall_by_the_kind_of_program(tmp_path: Path, question: str, want: str) -> None:
    hits = _session(tmp_path).search(question)
    assert hits and hits[0].pointer.tool_use_id == want


def test_recall_says_which_kind_it_took(tmp_path: Path) -> None:
    search = _session(tmp_path)
    hit = search.search("Show me the listing of the folder pkg")[0]
    assert "a directory listing (asked: 'listing')" in hit.why and "about 'pkg'" in hit.why
    hit = search.search("How did fetching the packages go the first time?")[0]
    assert "a package install's output (asked: 'fetching the packages')" in hit.why
    assert "number 1 of 2" in hit.why
    hit = search.search("lint 报了什么")[0]
    assert "a linter's or type checker's report (asked: 'lint')" in hit.why
