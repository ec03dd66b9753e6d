"""What a tool call was about, for every tool style (issue 11, part 2): pure functions."""

from __future__ import annotations

import json

import pytest

from contextfold.evidence.classify import classify
from contextfold.evidence.fields import (
    call_fields,
    call_key,
    command_head,
    evidence_fields,
    is_own_tool,
    normalize_path,
    path_suffixes,
)
from contextfold.evidence.model import SCHEMA_VERSION, EvidencePointer
from contextfold.evidence.rank import path_strength


@pytest.mark.parametrize(
    ("name", "args", "paths", "action", "lines"),
    [
        ("Read", {"file_path": "/testbed/pkg/x.py"}, ("/testbed/pkg/x.py",), "read", None),
        (
            "Read",
            {"file_path": "/r/a.ts", "offset": 10, "limit": 31},
            ("/r/a.ts",),
            "read",
            (10, 40),
        ),
        (
            "Write",
            {"file_path": "/r/new.py", "content": "x = 1\n" * 50},
            ("/r/new.py",),
            "write",
            None,
        ),
        (
            "Edit",
            {"file_path": "src/app.ts", "old_string": "a", "new_string": "b"},
            ("src/app.ts",),
            "edit",
            None,
        ),
        (
            "MultiEdit",
            {"file_path": "src/app.ts", "edits": [{"old_string": "a"}]},
            ("src/app.ts",),
            "edit",
            None,
        ),
        ("Grep", {"pattern": "def foo", "path": "pkg"}, ("pkg",), "search", None),
        ("Glob", {"pattern": "**/*.py"}, (), "search", None),
        (
            "str_replace_editor",
            {"command": "view", "path": "/testbed/x.py", "view_range": [1, 50]},
            ("/testbed/x.py",),
            "read",
            (1, 50),
        ),
        (
            "str_replace_editor",
            {"command": "create", "path": "/testbed/r.py", "file_text": "print(1)"},
            ("/testbed/r.py",),
            "write",
            None,
        ),
        (
            "str_replace_editor",
            {"command": "str_replace", "path": "/testbed/x.py", "old_str": "a", "new_str": "b"},
            ("/testbed/x.py",),
            "edit",
            None,
        ),
        (
            "apply_patch",
            {
                "input": "*** Begin Patch\n*** Update File: src/a.py\n@@\n-x\n+y\n*** Add File: src/b.py\n+z\n*** End Patch"
            },
            ("src/a.py", "src/b.py"),
            "edit",
            None,
        ),
        (
            "bash",
            {"command": "cd /testbed && sed -n '10,40p' pkg/x.py"},
            ("pkg/x.py",),
            "read",
            (10, 40),
        ),
        ("bash", {"command": "nl -ba pkg/x.py | sed -n '5,9p'"}, ("pkg/x.py",), "read", (5, 9)),
        ("bash", {"command": "cat pkg/x.py"}, ("pkg/x.py",), "read", None),
        ("bash", {"command": "grep -n 'def foo' pkg/x.py"}, ("pkg/x.py",), "search", None),
        (
            "bash",
            {"command": "python -m pytest tests/test_x.py::TestY::test_z -x"},
            ("tests/test_x.py",),
            "run",
            None,
        ),
        ("bash", {"command": "sed -i 's/a/b/' pkg/x.py"}, ("pkg/x.py",), "edit", None),
        (
            "bash",
            {
                "command": "git diff --stat\ngit apply <<'EOF'\n--- a/pkg/y.py\n+++ b/pkg/y.py\n@@ -1 +1 @@\n-a\n+b\nEOF"
            },
            ("pkg/y.py",),
            "edit",
            None,
        ),
    ],
)
def test_call_fields_per_tool_style(
    name: str,
    args: dict[str, object],
    paths: tuple[str, ...],
    action: str,
    lines: tuple[int, int] | None,
) -> None:
    got = call_fields(name, json.dumps(args))
    assert got.tool == name
    for p in paths:
        assert p in got.paths, (p, got.paths)
    assert got.action == action
    assert got.lines == lines
    assert got.command  # never an empty command
    assert got.shell == (name == "bash")


def test_patterns_urls_and_short_commands() -> None:
    grep = call_fields(
        "Grep", {"pattern": "class ValidationError", "path": "/t/exc.py", "-n": True}
    )
    assert grep.patterns == ("class ValidationError",)
    shell = call_fields("bash", {"command": 'grep -rn "KeyError" src | head -5'})
    assert "KeyError" in shell.patterns
    find = call_fields("bash", {"command": 'find . -name "*.cfg"'})
    assert "*.cfg" in find.patterns
    curl = call_fields("bash", {"command": "curl -s https://example.com/api/v1.json | jq ."})
    assert curl.urls == ("https://example.com/api/v1.json",)
    assert not any("://" in p for p in curl.paths)
    fetch = call_fields("WebFetch", {"url": "https://docs.rs/x", "prompt": "summarize"})
    assert fetch.urls == ("https://docs.rs/x",)
    test = call_fields("bash", {"command": "pytest tests/test_x.py::TestY::test_z"})
    assert "tests/test_x.py::TestY::test_z" in test.patterns
    # a file tool's command is short and names the path, not a JSON dump of the file
    write = call_fields("Write", {"file_path": "/r/big.py", "content": "x" * 10_000})
    assert write.command == "Write /r/big.py" and len(write.command) < 100
    # list-valued commands and other command keys
    assert call_fields("exec", '{"cmd": ["git", "status"]}').command == "git status"


def test_path_normalization_makes_forms_meet() -> None:
    assert normalize_path("./pkg/x.py") == "pkg/x.py"
    assert normalize_path("/testbed/pkg/x.py") == "testbed/pkg/x.py"
    assert normalize_path("'pkg//x.py'") == "pkg/x.py"
    assert path_suffixes("/testbed/pkg/x.py") == ("testbed/pkg/x.py", "pkg/x.py", "x.py")
    for query in ("./pkg/x.py", "pkg/x.py", "/testbed/pkg/x.py", "x.py"):
        q = normalize_path(query)
        for stored in ("./pkg/x.py", "pkg/x.py", "/testbed/pkg/x.py"):
            assert path_strength([q], [stored]) > 0, (query, stored)
    assert path_strength(["pkg/x.py"], ["/testbed/other/x.py"]) == 0
    assert path_strength(["pkg/x.py"], ["/testbed/pkg/x.py"]) > path_strength(
        ["x.py"], ["/testbed/pkg/x.py"]
    )


def test_own_tools_and_keys() -> None:
    for name in ("recall", "read_offloaded", "session_list", "session_history", "session_search"):
        assert is_own_tool(name)
    assert is_own_tool("memory_search") and is_own_tool("memory_get")
    assert not is_own_tool("bash") and not is_own_tool(None)
    assert (
        command_head("cd /testbed && cat > r.py << 'EOF'\nprint(1)\nEOF") == "cat > r.py << 'EOF'"
    )
    assert call_key("bash", "cd /x && python r.py", True) == call_key("bash", "python  r.py", True)
    assert call_key("Read", "Read /a.py", False) != call_key("Read", "Read /b.py", False)


def test_evidence_fields_for_a_search_backend() -> None:
    got = call_fields("Read", {"file_path": "/testbed/pkg/x.py", "offset": 5, "limit": 5})
    p = EvidencePointer(
        id="ev-1",
        command=got.command,
        tool_name=got.tool,
        paths=got.paths,
        action=got.action,
        lines="5-9",
        anchors=("exception:KeyError",),
        content_types=("file_content",),
    )
    fields = evidence_fields(p)
    assert fields["tool"] == "Read" and fields["action"] == "read" and fields["lines"] == "5-9"
    assert "pkg/x.py" in fields["paths"].split() and "x.py" in fields["paths"].split()
    assert "exception:KeyError" in fields["anchors"]
    assert "patterns" not in fields  # empty fields are left out


def test_pointer_schema_2_round_trip_and_version_1_upgrade() -> None:
    assert SCHEMA_VERSION == 2
    p = EvidencePointer(id="ev-1", command="Read /a.py", tool_name="Read", paths=("/a.py",))
    d = p.to_dict()
    assert d["schema_version"] == 2 and d["paths"] == ["/a.py"]
    assert EvidencePointer.from_dict(d) == p
    old = {
        "schema_version": 1,
        "id": "ev-2",
        "command": "cd /testbed && sed -n '1,20p' pkg/x.py",
        "toolName": "bash",
        "role": "tool",
    }
    up = EvidencePointer.from_dict(old)
    assert up.paths == ("pkg/x.py",) and up.action == "read" and up.lines == "1-20"
    assert up.shell
    old_file = {
        "schema_version": 1,
        "id": "ev-3",
        "command": 'read_file {"path": "src/app.ts"}',
        "toolName": "read_file",
        "role": "tool",
    }
    up = EvidencePointer.from_dict(old_file)
    assert up.paths == ("src/app.ts",) and up.action == "read" and not up.shell


def test_prose_is_never_command_output() -> None:
    prose = "I think the failure comes from the parser; let me look at the config loader next."
    assert "command_output" not in classify(prose, "assistant")
    assert classify(prose, "assistant") == ("message",)
    assert classify(prose, "user") == ("message",)
    assert classify(prose) == ("command_output",)  # a tool result with no other type


def test_describe_never_empty() -> None:
    from contextfold.evidence.fields import describe

    assert describe(EvidencePointer(id="a", command="pytest  -x", role="tool")) == "pytest -x"
    assert describe(EvidencePointer(id="b", role="assistant")) == "assistant message"
    assert describe(EvidencePointer(id="c", role="tool")) == "tool result (call not seen)"
    assert describe(EvidencePointer(id="d", role="text", agent_run_id="w1")) == "sub-agent w1 text"
