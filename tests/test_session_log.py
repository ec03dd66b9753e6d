"""The raw session log: append-only JSONL, meta.json, torn writes, corruption."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contextfold.errors import StorageError, UnsafeIdError
from contextfold.messages import Message, ToolCall, assistant, tool, user
from contextfold.paths import Workspace
from contextfold.sessions.log import SessionLog, list_session_ids
from contextfold.wire import messages_from_openai, to_openai
from tests.conftest import load_trace, trace_files


def _same(a: list[Message], b: list[Message]) -> bool:
    """Equal as stored: wire dict, uuid and metadata (wire adds type=function to tool calls)."""
    key = [(to_openai(m), m.uuid, dict(m.metadata)) for m in a]
    return key == [(to_openai(m), m.uuid, dict(m.metadata)) for m in b]


def _history() -> list[Message]:
    return [
        Message(role="system", content="You are helpful."),
        user("Please fix the failing build", metadata={"origin": "cli"}),
        assistant(
            "Looking.",
            [ToolCall(id="c1", name="bash", arguments='{"command": "make test"}')],
            metadata={"note": 1},
        ),
        tool("c1", "FAILED tests/test_x.py::test_y", metadata={"is_error": True}),
        assistant("The build passes now."),
    ]


def test_round_trip_keeps_uuid_ts_metadata(workspace: Path) -> None:
    ws = Workspace.at(workspace)
    log = SessionLog(ws, "s1", agent_id="agent-a")
    msgs = _history()
    entries = log.append(msgs[:2], ts="2025-01-01T00:00:00.000Z")
    log.append(msgs[2:])
    assert [e.seq for e in entries] == [0, 1]

    again = SessionLog(ws, "s1")
    read = again.read()
    assert _same(read, msgs)  # uuid, metadata, tool calls, everything
    got = list(again.iter_entries())
    assert [e.seq for e in got] == [0, 1, 2, 3, 4]
    assert [e.uuid for e in got] == [m.uuid for m in msgs]
    assert got[0].ts == "2025-01-01T00:00:00.000Z"
    assert got[4].ts.endswith("Z") and got[4].ts != got[0].ts
    assert again.problems == []

    lines = ws.log_path("s1").read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[2])
    assert set(first) == {"seq", "uuid", "ts", "message", "metadata"}
    assert first["message"]["tool_calls"][0]["function"]["name"] == "bash"
    assert first["metadata"] == {"note": 1}


def test_meta_json(workspace: Path) -> None:
    ws = Workspace.at(workspace)
    log = SessionLog(ws, "s1", agent_id="agent-a")
    log.append([Message(role="system", content="sys")], ts="2025-01-01T00:00:00Z")
    long = "  Make   the parser\nhandle " + "x" * 300
    log.append([user(long), assistant("ok")], ts="2025-01-02T00:00:00Z")
    meta = json.loads(ws.meta_path("s1").read_text(encoding="utf-8"))
    assert meta["session_id"] == "s1"
    assert meta["agent_id"] == "agent-a"
    assert meta["created_at"] == "2025-01-01T00:00:00Z"
    assert meta["updated_at"] == "2025-01-02T00:00:00Z"
    assert meta["message_count"] == 3
    assert meta["title"].startswith("Make the parser handle xxx")
    assert len(meta["title"]) == 120
    # the owner never changes, whatever a later opener says
    other = SessionLog(ws, "s1", agent_id="agent-b")
    assert other.agent_id == "agent-a"
    assert other.meta().message_count == 3
    # meta.json lost: rebuilt from the log
    ws.meta_path("s1").unlink()
    rebuilt = SessionLog(ws, "s1").meta()
    assert rebuilt.message_count == 3 and rebuilt.title == meta["title"]


def test_torn_last_line_is_skipped_and_cut_before_next_append(workspace: Path) -> None:
    ws = Workspace.at(workspace)
    log = SessionLog(ws, "s1")
    msgs = _history()
    log.append(msgs[:3])
    with ws.log_path("s1").open("ab") as fh:
        fh.write(b'{"seq": 3, "uuid": "x", "message": {"role": "to')  # crash mid-write
    reader = SessionLog(ws, "s1")
    assert _same(reader.read(), msgs[:3])
    assert reader.problems and "line 4" in reader.problems[0]

    writer = SessionLog(ws, "s1")
    writer.append(msgs[3:])
    fresh = SessionLog(ws, "s1")
    assert _same(fresh.read(), msgs)
    assert [e.seq for e in fresh.iter_entries()] == [0, 1, 2, 3, 4]
    assert fresh.problems == []
    assert any("torn" in p for p in writer.problems)


def test_corrupt_middle_line_raises_with_line_number(workspace: Path) -> None:
    ws = Workspace.at(workspace)
    log = SessionLog(ws, "s1")
    log.append(_history())
    path = ws.log_path("s1")
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[1] = "{not json"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(StorageError, match="line 2"):
        SessionLog(ws, "s1").read()


def test_hostile_session_ids_rejected(workspace: Path) -> None:
    ws = Workspace.at(workspace)
    for bad in ("../../etc/passwd", "..", "a/b", "", ".hidden", "x\x00y"):
        with pytest.raises(UnsafeIdError):
            SessionLog(ws, bad)
    assert not (workspace.parent / "etc").exists()


def test_list_and_delete(workspace: Path) -> None:
    ws = Workspace.at(workspace)
    assert list_session_ids(ws) == []
    for sid in ("b", "a", "c"):
        SessionLog(ws, sid).append([user(f"hello {sid}")])
    (ws.sessions_dir / "not a session").mkdir()
    assert list_session_ids(ws) == ["a", "b", "c"]
    log = SessionLog(ws, "b")
    assert log.exists()
    log.delete()
    assert not log.exists() and not ws.session_dir("b").exists()
    assert list_session_ids(ws) == ["a", "c"]


def test_real_trace_round_trip(workspace: Path) -> None:
    ws = Workspace.at(workspace)
    path = trace_files()[0]
    msgs = messages_from_openai(load_trace(path))
    log = SessionLog(ws, "trace", fsync=True)
    for i in range(0, len(msgs), 7):
        log.append(msgs[i : i + 7])
    assert SessionLog(ws, "trace").read() == msgs
    assert SessionLog(ws, "trace").meta().message_count == len(msgs)
