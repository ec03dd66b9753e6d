"""Recall across tool styles, recency, ordinals and own-tool exclusion (issue 11, parts 2-3),
through the real EvidenceStore / EvidenceSearch and the ContextManager."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from contextfold import ContextManager
from contextfold.core.messages import Message, ToolCall
from contextfold.evidence.search import EvidenceSearch
from contextfold.evidence.store import EvidenceStore
from tests.evidence.evidence_helpers import index_block
from tests.support.store_helpers import session_store

KEY_TB = (
    "Traceback (most recent call last):\n"
    '  File "/testbed/pkg/config.py", line 12, in load\n'
    "    return data['missing']\n"
    "KeyError: 'missing'\n"
)
SOURCE = "\n".join(
    f"{n:6}\t{line}"
    for n, line in enumerate(
        ["import os", "", "def parse_config(path):", "    return open(path).read()", ""], 1
    )
)


def turn(call_id: str, name: str, args: dict[str, Any], output: str) -> list[Message]:
    call = ToolCall(id=call_id, name=name, arguments=json.dumps(args))
    return [
        Message(role="assistant", tool_calls=(call,)),
        Message(role="tool", tool_call_id=call_id, content=output),
    ]


def index(store: EvidenceStore, messages: list[Message]) -> None:
    index_block(store, messages, tier="soft", strategy="progressive")


def file_tool_session(tmp_path: Path) -> tuple[EvidenceStore, EvidenceSearch]:
    store = EvidenceStore(session_store(tmp_path))
    msgs: list[Message] = []
    msgs += turn("r1", "Read", {"file_path": "/testbed/pkg/config.py"}, SOURCE)
    msgs += turn(
        "g1",
        "Grep",
        {"pattern": "def parse_config", "path": "/testbed/pkg", "output_mode": "content"},
        "/testbed/pkg/config.py:3:def parse_config(path):",
    )
    msgs += turn(
        "v1",
        "str_replace_editor",
        {"command": "view", "path": "/testbed/src/app.ts", "view_range": [1, 3]},
        "Here's the result of running `cat -n` on /testbed/src/app.ts:\n"
        "     1\texport const app = 1;\n     2\t\n     3\texport default app;",
    )
    msgs += turn(
        "e1",
        "Edit",
        {"file_path": "/testbed/pkg/config.py", "old_string": "read()", "new_string": "read"},
        "The file /testbed/pkg/config.py has been updated.",
    )
    msgs += turn(
        "b1",
        "bash",
        {"command": "python -m pytest tests/test_cfg.py -x"},
        (
            "<returncode>1</returncode>\n"
            + KEY_TB
            + "FAILED tests/test_cfg.py::TestLoad::test_missing"
        ),
    )
    msgs += turn(
        "p1",
        "apply_patch",
        {"input": "*** Begin Patch\n*** Update File: lib/util.go\n@@\n-a\n+b\n*** End Patch"},
        "Done. Updated lib/util.go",
    )
    index(store, msgs)
    return store, EvidenceSearch(store)


def top(search: EvidenceSearch, query: str) -> str | None:
    hits = search.search(query, k=5)
    return hits[0].pointer.tool_use_id if hits else None


def test_every_tool_style_is_indexed_with_a_command(tmp_path: Path) -> None:
    store, _ = file_tool_session(tmp_path)
    tools = [p for p in store.pointers() if p.role == "tool"]
    assert len(tools) == 6
    assert all(p.command and p.tool_name for p in tools)
    by_id = {p.tool_use_id: p for p in tools}
    assert by_id["r1"].paths == ("/testbed/pkg/config.py",) and by_id["r1"].action == "read"
    assert by_id["g1"].patterns == ("def parse_config",)
    assert by_id["v1"].lines == "1-3" and by_id["p1"].paths == ("lib/util.go",)


def test_a_path_in_any_form_finds_what_was_read(tmp_path: Path) -> None:
    _, search = file_tool_session(tmp_path)
    for form in ("./pkg/config.py", "pkg/config.py", "/testbed/pkg/config.py"):
        assert top(search, f"show me {form} as you read it") == "r1", form
    assert top(search, "show me src/app.ts") == "v1"
    assert top(search, "Read /testbed/pkg/config.py") == "r1"
    assert top(search, "what did Edit /testbed/pkg/config.py say?") == "e1"
    assert top(search, "the apply_patch of lib/util.go") == "p1"
    assert top(search, "把 src/app.ts 的内容给我") == "v1"


def test_function_test_id_and_error_type_find_the_output(tmp_path: Path) -> None:
    _, search = file_tool_session(tmp_path)
    assert top(search, "where is parse_config defined?") in ("g1", "r1")
    assert top(search, "Grep def parse_config in /testbed/pkg") == "g1"
    assert top(search, "the output of tests/test_cfg.py::TestLoad::test_missing") == "b1"
    assert top(search, "show me the KeyError") == "b1"
    assert top(search, "KeyError 的完整报错") == "b1"


def test_newest_run_first_and_ordinals(tmp_path: Path) -> None:
    store = EvidenceStore(session_store(tmp_path))
    msgs: list[Message] = []
    for n in range(4):
        out = f"<returncode>{1 if n < 3 else 0}</returncode>\nrun {n}: " + (
            "AssertionError: wrong total" if n < 3 else "all good"
        )
        msgs += turn(f"c{n}", "bash", {"command": "cd /testbed && python reproduce.py"}, out)
        if n == 2:
            msgs += turn("fix", "bash", {"command": "sed -i 's/a/b/' pkg/total.py"}, "")
    index(store, msgs)
    search = EvidenceSearch(store)
    assert top(search, "show me the full output of `python reproduce.py`") == "c3"
    assert top(search, "what did python reproduce.py print?") == "c3"
    assert top(search, "the first run of `python reproduce.py`") == "c0"
    assert top(search, "what did python reproduce.py print the second time?") == "c1"
    assert top(search, "the run before last of `python reproduce.py`") == "c2"
    assert top(search, "the output of `python reproduce.py` before the fix") == "c2"
    assert top(search, "`python reproduce.py` 第一次的输出") == "c0"
    assert top(search, "`python reproduce.py` 第二次的输出") == "c1"
    assert top(search, "`python reproduce.py` 上一次的输出") == "c3"
    assert top(search, "`python reproduce.py` 修复之前的输出") == "c2"
    assert top(search, "What was the full error output of the first failing command?") == "c0"
    assert top(search, "最后一次失败的命令的完整报错") == "c2"


def test_own_tool_results_are_never_evidence(tmp_path: Path) -> None:
    store = EvidenceStore(session_store(tmp_path))
    msgs = turn("c0", "bash", {"command": "pytest -x"}, "<returncode>1</returncode>\n" + KEY_TB)
    recall_out = "1 hit(s) for 'KeyError', best first:\n[1] ev-x · " + KEY_TB * 3
    msgs += turn("r0", "recall", {"query": "KeyError"}, recall_out)
    msgs += turn("s0", "session_search", {"query": "KeyError"}, "KeyError " * 50)
    msgs += turn("m0", "memory_get", {"key": "k"}, "KeyError notes")
    msgs += turn("o0", "read_offloaded", {"id": "c0"}, KEY_TB)
    index(store, msgs)
    ids = {p.tool_use_id for p in store.pointers()}
    assert "c0" in ids and not ids & {"r0", "s0", "m0", "o0"}
    search = EvidenceSearch(store)
    hits = search.search("show me the full KeyError traceback", k=5)
    assert [h.pointer.tool_use_id for h in hits if h.pointer.role == "tool"] == ["c0"]


def test_prose_pointers_are_messages(tmp_path: Path) -> None:
    store = EvidenceStore(session_store(tmp_path))
    prose = Message(
        role="assistant",
        content="The failure comes from the config loader; next I will read pkg/config.py.",
    )
    index(store, [prose])
    (p,) = store.pointers()
    assert p.role == "assistant" and p.content_types == ("message",)


def add_turn(cm: ContextManager, call_id: str, name: str, args: dict[str, Any], out: str) -> None:
    cm.add_many(
        [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(args)},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call_id, "content": out},
        ]
    )


def test_injection_for_the_first_failing_command_skips_recall_output(tmp_path: Path) -> None:
    cm = ContextManager(workspace=tmp_path, session_id="inj", context_window=8_000)
    cm.add({"role": "system", "content": "You are a coding agent."})
    cm.add({"role": "user", "content": "Fix the config loader."})
    add_turn(
        cm, "c0", "bash", {"command": "python load.py"}, "<returncode>1</returncode>\n" + KEY_TB
    )
    # the agent recalled evidence itself: a long recall output that repeats error text
    add_turn(
        cm,
        "r0",
        "recall",
        {"query": "error"},
        "3 hit(s) for 'error', best first:\n" + ("ValueError: other failure output\n" * 120),
    )
    for i in range(1, 40):
        body = "\n".join(f"def f{j}(): return {j}" for j in range(40))
        add_turn(cm, f"c{i}", "bash", {"command": f"cat src/module_{i}.py"}, body)
    cm.prepare()
    assert cm.compactor.state.compactions > 0
    assert not any(p.tool_name == "recall" for p in cm.recovery.store.pointers())
    question = "What was the full error output of the first failing command?"
    cm.add({"role": "user", "content": question})
    view = cm.prepare()
    block = next(d for d in view if "<system-reminder>" in str(d.get("content")))
    text = str(block["content"])
    assert "KeyError: 'missing'" in text
    assert "other failure output" not in text and "hit(s) for" not in text
    hits = cm.restore(question, k=5)
    assert hits[0].pointer.tool_use_id == "c0"
    assert all(h.pointer.tool_name != "recall" for h in hits)


def test_file_tool_paths_link_summary_items(tmp_path: Path) -> None:
    store = EvidenceStore(session_store(tmp_path))
    msgs = turn("r1", "Read", {"file_path": "/testbed/src/app.ts"}, "     1\texport const a = 1;")
    block = store.index_compaction(
        messages=msgs,
        offloaded={},
        summary_items_source=[("files", "Read src/app.ts to find the export")],
        token_before=0,
        token_after=0,
        boundary_uuid=None,
        natural_summary="",
        tier="soft",
        strategy="progressive",
    )
    (item,) = block.summary_items
    (p,) = [q for q in block.evidence if q.role == "tool"]
    assert p.id in item.evidence_ids and "file:/testbed/src/app.ts" in p.anchors


def test_an_error_type_finds_the_newest_output_showing_it(tmp_path: Path) -> None:
    store = EvidenceStore(session_store(tmp_path))
    err = "RuntimeError: parser stuck\n"
    msgs = turn(
        "c0", "bash", {"command": "sqlfluff lint a.sql"}, "<returncode>1</returncode>\n" + err
    )
    msgs += turn("c1", "bash", {"command": "python check.py"}, "<returncode>0</returncode>\n" + err)
    msgs += turn("c2", "bash", {"command": "ls"}, "<returncode>0</returncode>\na.sql\n")
    index(store, msgs)
    search = EvidenceSearch(store)
    assert top(search, "What was the full RuntimeError error?") == "c1"
    assert top(search, "What was the full RuntimeError error the first time?") == "c0"
    assert top(search, "第一次的 RuntimeError 完整报错") == "c0"
