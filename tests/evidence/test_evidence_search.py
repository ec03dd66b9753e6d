"""EvidenceSearch: BM25 sanity, the seed's preferences, command queries, trace replay."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from contextfold.core.messages import Message, ToolCall
from contextfold.core.wire import messages_from_openai
from contextfold.evidence.classify import exit_code
from contextfold.evidence.search import EvidenceSearch, tokenize
from contextfold.evidence.store import EvidenceStore
from tests.conftest import load_trace, trace_files
from tests.evidence.evidence_helpers import index_block
from tests.support.store_helpers import session_store


def call(call_id: str, command: str) -> Message:
    args = json.dumps({"command": command})
    return Message(
        role="assistant", tool_calls=(ToolCall(id=call_id, name="bash", arguments=args),)
    )


def result(call_id: str, text: str) -> Message:
    return Message(role="tool", tool_call_id=call_id, content=text)


def compact(store: EvidenceStore, messages: list[Message]) -> None:
    index_block(store, messages)


def pairs(items: list[tuple[str, str]], start: int = 0) -> list[Message]:
    out: list[Message] = []
    for i, (cmd, text) in enumerate(items, start):
        out += [call(f"c{i}", cmd), result(f"c{i}", text)]
    return out


def test_tokenize() -> None:
    toks = tokenize("FAILED tests/test_parser.py::test_parse_empty getUserName 报错信息")
    for t in (
        "failed",
        "tests/test_parser.py::test_parse_empty",
        "test_parser",
        "parser",
        "parse",
        "empty",
        "getusername",
        "user",
        "name",
        "报错",
        "错信",
        "信息",
    ):
        assert t in toks, t


def test_bm25_prefers_the_rare_matching_term(tmp_path: Path) -> None:
    store = EvidenceStore(session_store(tmp_path))
    compact(
        store,
        pairs(
            [
                ("cat a.txt", "apple banana cherry"),
                ("cat b.txt", "banana banana cherry"),
                ("cat c.txt", "cherry durian"),
            ]
        ),
    )
    search = EvidenceSearch(store)
    assert search.search("durian")[0].pointer.command == "cat c.txt"
    assert search.search("apple")[0].pointer.command == "cat a.txt"
    assert search.search("banana")[0].pointer.command == "cat b.txt"  # tf counts
    assert search.search("zzz-nothing") == []
    assert search.search("banana", k=0) == []


def test_command_query_returns_that_commands_output_first(tmp_path: Path) -> None:
    store = EvidenceStore(session_store(tmp_path))
    tb = (
        "<returncode>1</returncode>\n<output>\nTraceback (most recent call last):\n"
        "  File \"/r/x.py\", line 3, in <module>\nKeyError: 'a'\n</output>"
    )
    compact(
        store,
        pairs(
            [
                ("cd /r && python x.py", tb),
                (
                    "cd /r && pytest -x tests/test_x.py",
                    "<returncode>1</returncode>\n<output>\nFAILED tests/test_x.py::test_a - KeyError\n"
                    "1 failed in 0.1s\n</output>",
                ),
                (
                    "grep -rn 'python x.py' docs/",
                    "docs/run.md:3: run python x.py to see the error output",
                ),
                ("cd /r && python x.py", "<returncode>0</returncode>\n<output>\nok\n</output>"),
            ]
        ),
    )
    search = EvidenceSearch(store)
    hit = search.search("show me the full error output of `python x.py`")[0]
    # the failing run, although a later run of the same command succeeded
    assert hit.pointer.command == "cd /r && python x.py" and "KeyError" in hit.text_preview
    hit = search.search("show me the full error output of `cd /r && pytest -x tests/test_x.py`")[0]
    assert hit.pointer.command == "cd /r && pytest -x tests/test_x.py"
    # a fragment of a longer command still finds it
    assert search.search("output of `pytest -x`")[0].pointer.command.endswith("test_x.py")  # type: ignore[union-attr]


def test_latest_failing_run_wins_among_repeats(tmp_path: Path) -> None:
    store = EvidenceStore(session_store(tmp_path))
    compact(
        store,
        pairs(
            [
                ("make", "<returncode>2</returncode>\nerror: first failure"),
                ("make", "<returncode>2</returncode>\nerror: second failure"),
            ]
        ),
    )
    search = EvidenceSearch(store)
    assert "second" in search.search("full error output of `make`")[0].text_preview
    # a specific word picks the older one
    assert (
        "first"
        in search.search("the error output of `make` with the first failure")[0].text_preview
    )


def test_preferences_subagent_and_errors(tmp_path: Path) -> None:
    store = EvidenceStore(session_store(tmp_path))
    compact(store, [Message(role="user", content="the timeout in the uploader worries me")])
    store.add_subagent_output("run-1", "uploader finished; timeout handled")
    search = EvidenceSearch(store)
    hits = search.search("uploader timeout")
    assert hits[0].pointer.source_scope == "sub_agent"
    compact(
        store,
        pairs(
            [
                ("cat notes.txt", "notes about the parser"),
                (
                    "python parser.py",
                    'Traceback (most recent call last):\n  File "parser.py", line 1\n'
                    "SyntaxError: bad parser input",
                ),
            ],
            start=10,
        ),
    )
    assert search.search("parser error")[0].pointer.command == "python parser.py"


def test_chinese_query(tmp_path: Path) -> None:
    store = EvidenceStore(session_store(tmp_path))
    store.add_subagent_output("w", "子任务完成：数据库连接超时，重试三次后失败")
    store.add_subagent_output("w2", "文档已更新，没有问题")
    search = EvidenceSearch(store)
    assert search.search("数据库连接超时的日志")[0].pointer.agent_run_id == "w"


def test_incremental_sync_and_duplicates(tmp_path: Path) -> None:
    store = EvidenceStore(session_store(tmp_path))
    search = EvidenceSearch(store)
    compact(store, pairs([("ls", "alpha")]))
    assert len(search.pointers()) == 1
    msgs = pairs([("echo", "beta")], start=5)
    compact(store, msgs)
    compact(store, msgs)  # indexed twice: same ids, not duplicated in the index
    assert search.search("beta")[0].pointer.command == "echo"
    assert len(search) == 2
    other = EvidenceSearch(EvidenceStore(session_store(tmp_path)))  # a restart sees the same
    assert [p.id for p in other.pointers()] == [p.id for p in search.pointers()]


@pytest.mark.slow
def test_trace_replay_restorable_and_command_queries_rank_first(tmp_path: Path) -> None:
    """Issue 4 acceptance, approximated with compactions of ~20 messages keeping the last few
    in view: every tool output indexed is restorable byte-exact, and for each trace's last three
    distinct failing commands, "show me the full error output of `cmd`" finds its latest
    failing run first."""
    files = trace_files()
    total = top = restored = outputs = 0
    for n, path in enumerate(files):
        msgs = messages_from_openai(load_trace(path))
        store = EvidenceStore(session_store(tmp_path / f"s{n}"))
        cut = len(msgs) - 6
        while cut > 0 and msgs[cut].role == "tool":
            cut -= 1
        i = 1
        while i < cut:
            j = min(cut, i + 20)
            while j < cut and msgs[j].role == "tool":
                j += 1
            compact(store, list(msgs[i:j]))
            i = j
        by_uuid = {m.uuid: m.text for m in msgs}
        failing: dict[str, str] = {}
        for p in store.pointers():
            if p.role != "tool":
                continue
            outputs += 1
            got = store.restore(p)
            assert got.sha256_ok is True and got.text == by_uuid[p.message_uuid or ""]
            restored += 1
            code = exit_code(got.text)
            if p.command and ((code or 0) != 0 or re.search(r"^Traceback", got.text, re.M)):
                failing.pop(p.command, None)
                failing[p.command] = p.id
        search = EvidenceSearch(store)
        for cmd, pid in list(failing.items())[-3:]:
            total += 1
            hits = search.search(f"show me the full error output of `{cmd}`", k=1)
            top += bool(hits) and hits[0].pointer.id == pid
    assert restored == outputs > 1000
    assert total > 90
    assert top / total >= 0.9, (top, total)
