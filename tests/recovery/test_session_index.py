"""The SQLite FTS5 session index and the session_* agent tools."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contextfold.core.messages import Message, ToolCall, assistant, tool, user
from contextfold.core.tools import ToolBox
from contextfold.core.wire import messages_from_openai
from contextfold.recovery.sessions.index import SessionIndex
from contextfold.recovery.sessions.log import SessionLog
from contextfold.recovery.sessions.tools import session_tools
from contextfold.storage import SQLiteStore, Store
from contextfold.storage.session import SessionStore
from tests.conftest import load_trace, trace_files


def _fill(ws: Store, sid: str, agent: str, msgs: list[Message]) -> SessionLog:
    session = SessionStore(ws, sid, agent)
    log = SessionLog(session)
    with session.unit():
        log.append(msgs, ws.session(sid).messages if ws.session(sid) else 0)  # type: ignore[union-attr]
    return log


def _world(ws: Store) -> None:
    _fill(
        ws,
        "alpha",
        "agent-a",
        [
            user("The nginx reverse proxy returns 502 on /api"),
            assistant(
                "Checking the upstream.",
                [
                    ToolCall(
                        id="c1", name="bash", arguments='{"command": "cat /etc/nginx/nginx.conf"}'
                    )
                ],
            ),
            tool("c1", "upstream backend { server 127.0.0.1:8080; }"),
            assistant("The root cause is the upstream port: backend listens on 9090, not 8080."),
        ],
    )
    _fill(
        ws,
        "beta",
        "agent-a",
        [
            user("Write a haiku about autumn leaves"),
            assistant("Crimson leaves drifting / the nginx logs are quiet / autumn evening"),
        ],
    )
    _fill(
        ws,
        "gamma",
        "agent-b",
        [
            user("请把数据库连接池的大小改成 32，不要修改测试文件。"),
            assistant("好的，结论：连接池大小已经改成 32。secret-b nginx"),
        ],
    )


def test_ranked_search_with_snippets_current_at_once(workspace: Path) -> None:
    ws = SQLiteStore(workspace)
    _world(ws)
    index = SessionIndex(ws)
    hits = index.search("nginx", agent_id="agent-a")
    assert {h.session_id for h in hits} == {"alpha", "beta"}
    assert all(h.agent_id == "agent-a" for h in hits)
    assert all("[nginx]" in h.snippet for h in hits)
    top = index.search("upstream port", agent_id="agent-a")
    assert top[0].session_id == "alpha" and top[0].seq == 3 and top[0].role == "assistant"
    assert top[0].score >= top[-1].score
    # tool call arguments are indexed (as text, not JSON)
    args_hit = index.search("nginx.conf", agent_id="agent-a")
    assert args_hit and args_hit[0].seq == 1

    # messages are indexed with the append itself: nothing to sync, nothing duplicated
    _fill(ws, "beta", "agent-a", [user("Now one about kubernetes winter")])
    hits = index.search("kubernetes", agent_id="agent-a")
    assert [(h.session_id, h.seq) for h in hits] == [("beta", 2)]
    assert index.list_sessions("agent-a")[0].message_count == 3
    other = SQLiteStore(workspace)  # another process's view of the same workspace
    assert len(SessionIndex(other).search("kubernetes", agent_id="agent-a")) == 1
    assert len(index.search("nginx", agent_id=None)) == 4
    assert index.search("nginx", agent_id="agent-a", session_id="beta")[0].session_id == "beta"
    other.close()
    ws.close()


def test_deleted_sessions_leave_the_index(workspace: Path) -> None:
    ws = SQLiteStore(workspace)
    _world(ws)
    _fill(ws, "alpha", "agent-a", [user("platypus")])
    ws.delete_session("beta")
    index = SessionIndex(SQLiteStore(workspace))
    assert [m.session_id for m in index.list_sessions("agent-a")] == ["alpha"]
    assert len(index.search("platypus", agent_id="agent-a")) == 1
    assert len(index.search("upstream", agent_id="agent-a")) == 3  # not indexed twice
    ws.delete_session("alpha")
    assert index.list_sessions("agent-a") == []
    assert index.search("nginx", agent_id="agent-a") == []
    ws.close()


@pytest.mark.parametrize(
    "query",
    [
        '"foo',
        "AND OR (",
        "NOT",
        "*",
        "nginx*",
        "body:nginx",
        "NEAR(a b)",
        ")(",
        "'",
        '""',
        "-",
        "^x",
        "a AND",
        "{col}: x",
        "\x00",
    ],
)
def test_fts_hostile_queries_never_raise(workspace: Path, query: str) -> None:
    ws = SQLiteStore(workspace)
    _world(ws)
    index = SessionIndex(ws)
    hits = index.search(query, agent_id="agent-a")
    assert isinstance(hits, list)
    assert index.search("nginx AND", agent_id="agent-a")  # operators are plain words
    ws.close()


def test_chinese_search(workspace: Path) -> None:
    ws = SQLiteStore(workspace)
    _world(ws)
    index = SessionIndex(ws)
    hits = index.search("连接池", agent_id="agent-b")
    assert [h.seq for h in hits] == [1, 0] or [h.seq for h in hits] == [0, 1]
    assert "[连接池]" in hits[0].snippet
    assert index.search("测试文件", agent_id="agent-b")[0].seq == 0
    assert index.search("池连", agent_id="agent-b") == []  # a phrase, not loose characters
    assert index.search("连接池", agent_id="agent-a") == []
    ws.close()


def test_like_fallback_without_fts5(workspace: Path) -> None:
    ws = SQLiteStore(workspace, fts5=False)
    _world(ws)
    index = SessionIndex(ws)
    hits = index.search("upstream port", agent_id="agent-a")
    assert hits[0].session_id == "alpha" and "[port]" in hits[0].snippet
    assert index.search("连接池", agent_id="agent-b")
    assert isinstance(index.search('"foo AND OR (', agent_id="agent-a"), list)
    ws.close()


def test_real_traces_indexed(workspace: Path) -> None:
    ws = SQLiteStore(workspace)
    for i, path in enumerate(trace_files()[:4]):
        _fill(ws, f"t{i}", "agent-a", messages_from_openai(load_trace(path)))
    index = SessionIndex(ws)
    assert len(index.list_sessions("agent-a")) == 4
    hits = index.search("def", agent_id="agent-a", limit=5)
    assert len(hits) == 5
    ws.close()


# --------------------------------------------------------------------------- tools


class _Index(SessionIndex):
    def close(self) -> None:
        self.store.close()


def _boxes(ws: Store, **kw: object) -> tuple[_Index, ToolBox, ToolBox]:
    assert isinstance(ws, SQLiteStore)
    index = _Index(SQLiteStore(ws.root))
    a = ToolBox(session_tools(index, agent_id="agent-a", **kw))  # type: ignore[arg-type]
    b = ToolBox(session_tools(index, agent_id="agent-b"))
    return index, a, b


def test_tools_agent_scoping(workspace: Path) -> None:
    ws = SQLiteStore(workspace)
    _world(ws)
    index, a, b = _boxes(ws)
    text, err = a.run("session_list", {})
    assert not err and "alpha" in text and "beta" in text and "gamma" not in text
    text, err = b.run("session_list", {"agentId": "agent-a"})
    assert err and "access denied" in text
    text, err = b.run("session_history", {"sessionId": "alpha"})
    assert err and "access denied" in text and "nginx" not in text
    text, err = b.run("session_history", {"sessionId": "alpha", "agentId": "agent-b"})
    assert err and "nginx" not in text
    text, err = b.run("session_search", {"query": "nginx"})
    assert not err and "gamma" in text and "alpha" not in text
    text, err = b.run("session_search", {"query": "nginx", "agentId": "agent-a"})
    assert err and "access denied" in text
    text, err = b.run("session_search", {"query": "nginx", "sessionId": "alpha"})
    assert err and "alpha" in text and "upstream" not in text
    text, err = b.run("session_search", {"query": "nginx", "agentId": "*"})
    assert err

    index.close()
    index, a, b = _boxes(ws, allow_agents=["agent-b"])
    text, err = a.run("session_list", {"agentId": "agent-b"})
    assert not err and "gamma" in text
    text, err = a.run("session_history", {"sessionId": "gamma"})
    assert not err and "连接池" in text
    text, err = a.run("session_search", {"query": "连接池", "agentId": "agent-b"})
    assert not err and "gamma" in text
    index.close()
    index, a, _ = _boxes(ws, allow_agents=["*"])
    text, err = a.run("session_search", {"query": "nginx", "agentId": "*"})
    assert not err and "gamma" in text and "alpha" in text
    index.close()


@pytest.mark.parametrize(
    "sid", ["../../etc/passwd", "..", "/etc/passwd", "alpha/../gamma", "", "a\\b", "x" * 500]
)
def test_tools_hostile_session_ids(workspace: Path, sid: str) -> None:
    ws = SQLiteStore(workspace)
    _world(ws)
    index, a, _ = _boxes(ws)
    text, err = a.run("session_history", {"sessionId": sid})
    assert err and text.startswith("Error:")
    if sid:
        text, err = a.run("session_search", {"query": "x", "sessionId": sid})
        assert err
    index.close()


def test_session_history_paging_and_trimming(workspace: Path) -> None:
    ws = SQLiteStore(workspace)
    msgs: list[Message] = [user("start")]
    for i in range(1, 50):
        call = ToolCall(id=f"c{i}", name="bash", arguments=json.dumps({"command": f"step {i}"}))
        msgs.append(assistant(f"step {i}", [call]))
        msgs.append(tool(f"c{i}", f"output {i} " + "y" * (5000 if i == 49 else 10)))
    _fill(ws, "long", "agent-a", msgs)
    index = _Index(ws)
    box = ToolBox(session_tools(index, agent_id="agent-a", max_result_chars=500))
    total = len(msgs)

    text, err = box.run("session_history", {"sessionId": "long"})
    assert not err
    assert f"messages {total - 20}-{total - 1} of {total}" in text
    assert f"[{total - 1}] tool (call c49):" in text
    assert "more characters" in text and '"offset": 0, "lastN": 1, "maxChars"' in text
    assert '"offset": 20' in text

    text, _ = box.run("session_history", {"sessionId": "long", "offset": 20, "lastN": 5})
    assert f"messages {total - 25}-{total - 21} of {total}" in text
    assert f"[{total - 21}]" in text and f"[{total - 20}]" not in text

    text, _ = box.run("session_history", {"sessionId": "long", "offset": total - 2, "lastN": 10})
    assert "[0] user:\nstart" in text and "earlier message" not in text

    text, _ = box.run("session_history", {"sessionId": "long", "offset": 1000})
    assert "past the start" in text

    text, _ = box.run("session_history", {"sessionId": "long", "lastN": 1, "maxChars": 10000})
    assert "y" * 5000 in text and "more characters" not in text

    text, err = box.run("session_history", {"sessionId": "long", "lastN": 0})
    assert err
    text, err = box.run("session_history", {"sessionId": "nope"})
    assert err and "no session" in text
    text, err = box.run("session_history", {})
    assert err and "sessionId" in text
    index.close()


def test_tool_schemas(workspace: Path) -> None:
    ws = SQLiteStore(workspace)
    index = _Index(ws)
    box = ToolBox(session_tools(index, agent_id="a"))
    names = [s["function"]["name"] for s in box.schemas("openai")]
    assert names == ["session_list", "session_history", "session_search"]
    anth = box.schemas("anthropic")
    assert anth[1]["input_schema"]["required"] == ["sessionId"]
    reply = box.handle(
        {"id": "t1", "function": {"name": "session_search", "arguments": '{"query": 3}'}}
    )
    assert reply["tool_call_id"] == "t1" and reply["content"].startswith("Error:")
    index.close()
