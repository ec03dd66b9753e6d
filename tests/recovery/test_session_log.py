"""The raw session log: append-only JSONL, meta.json, torn writes, corruption."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from contextfold import ContextManager
from contextfold.core.messages import Message, ToolCall, assistant, tool, user
from contextfold.core.wire import messages_from_openai, to_openai
from contextfold.errors import StorageError, UnsafeIdError
from contextfold.recovery.sessions.log import SessionLog
from contextfold.storage import SQLiteStore, Store
from contextfold.storage.session import SessionStore
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


def _log(store: Store, sid: str, agent: str = "default") -> SessionLog:
    return SessionLog(SessionStore(store, sid, agent))


def _append(log: SessionLog, msgs: list[Message]) -> None:
    with log.session.unit():
        log.append(
            msgs,
            log.session.store.session(log.session_id).messages  # type: ignore[union-attr]
            if log.session.store.session(log.session_id)
            else 0,
        )


def test_round_trip_keeps_uuid_and_metadata(workspace: Path) -> None:
    store = SQLiteStore(workspace)
    log = _log(store, "s1", "agent-a")
    msgs = _history()
    _append(log, msgs[:2])
    _append(log, msgs[2:])

    again = _log(SQLiteStore(workspace), "s1")
    read = again.read()
    assert _same(read, msgs)  # uuid, metadata, tool calls, everything
    got = list(again.iter_entries())
    assert [e.seq for e in got] == [0, 1, 2, 3, 4]
    assert [e.uuid for e in got] == [m.uuid for m in msgs]
    assert all(e.ts.endswith("Z") for e in got)
    stored = next(iter(store.read("s1", start=2, stop=3))).data
    # an assistant message with tool calls also stores what each call was about (for recall)
    assert set(stored) == {"pos", "uuid", "message", "metadata", "tokens", "calls"}
    assert stored["message"]["tool_calls"][0]["function"]["name"] == "bash"
    assert len(stored["calls"]) == len(stored["message"]["tool_calls"])
    assert stored["metadata"] == {"note": 1}


def test_session_info_owner_and_title(workspace: Path) -> None:
    store = SQLiteStore(workspace)
    log = _log(store, "s1", "agent-a")
    _append(log, [Message(role="system", content="sys")])
    long = "  Make   the parser\nhandle " + "x" * 300
    _append(log, [user(long), assistant("ok")])
    info = store.session("s1")
    assert info is not None
    assert info.agent_id == "agent-a" and info.messages == 3
    assert info.created_at <= info.updated_at
    assert info.title.startswith("Make the parser handle xxx") and len(info.title) == 120
    # the owner never changes, whatever a later opener says
    other = _log(SQLiteStore(workspace), "s1", "agent-b")
    assert other.agent_id == "agent-a"
    _append(other, [user("more")])
    again = store.session("s1")
    assert again is not None and again.agent_id == "agent-a" and again.messages == 4


def test_damaged_event_raises_naming_it(workspace: Path) -> None:
    store = SQLiteStore(workspace)
    log = _log(store, "s1")
    _append(log, _history())
    con = sqlite3.connect(workspace / "store.sqlite")
    con.execute("UPDATE events SET data='{not json' WHERE session_id='s1' AND seq=1")
    con.commit()
    con.close()
    with pytest.raises(StorageError, match="s1"):
        _log(SQLiteStore(workspace), "s1").read()
    con = sqlite3.connect(workspace / "store.sqlite")
    con.execute("""UPDATE events SET data='{"pos": 1}' WHERE session_id='s1' AND seq=1""")
    con.commit()
    con.close()
    with pytest.raises(StorageError, match="event 1"):
        ContextManager(workspace=workspace, session_id="s1")


def test_hostile_session_ids_rejected(workspace: Path) -> None:
    for bad in ("../../etc/passwd", "..", "a/b", "", ".hidden", "x\x00y"):
        with pytest.raises(UnsafeIdError):
            ContextManager(workspace=workspace, session_id=bad)
    assert not (workspace.parent / "etc").exists()


def test_list_and_delete(workspace: Path) -> None:
    store = SQLiteStore(workspace)
    assert store.sessions() == []
    for sid in ("b", "a", "c"):
        _append(_log(store, sid), [user(f"hello {sid}")])
    assert sorted(i.session_id for i in store.sessions()) == ["a", "b", "c"]
    store.delete_session("b")
    assert store.session("b") is None
    assert sorted(i.session_id for i in store.sessions()) == ["a", "c"]


def test_real_trace_round_trip(workspace: Path) -> None:
    path = trace_files()[0]
    msgs = messages_from_openai(load_trace(path))
    store = SQLiteStore(workspace)
    log = _log(store, "trace")
    for i in range(0, len(msgs), 7):
        _append(log, msgs[i : i + 7])
    assert _log(SQLiteStore(workspace), "trace").read() == msgs
    info = store.session("trace")
    assert info is not None and info.messages == len(msgs)
