"""Clients that rewrite their own history through the gateway, as the real agent programs do:
aider (summarized old turns, its files block rebuilt after the conversation, the reminder in
a copy of the newest user message, ``/run`` output) and Claude Code (``<system-reminder>``
blocks that change in old messages, tool calls resent). The session continues: no branch,
every upstream request is the client's conversation, storage grows with what is new."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from contextfold import ContextManager
from contextfold.storage import SQLiteStore
from tests.gateway.gateway_agent_shapes import (
    FILES_PREFIX,
    AiderLike,
    aider_upstream,
    distinct_bytes,
)
from tests.gateway.gateway_fakes import Call, Reply
from tests.gateway.gateway_helpers import running

pytestmark = pytest.mark.timeout(300)


def _stored(ws: Path) -> dict[str, list[dict[str, Any]]]:
    """Every session's stored messages (retracted ones included), as OpenAI dicts."""
    store = SQLiteStore(ws)
    try:
        return {
            info.session_id: [
                e.data["message"] for e in store.read(info.session_id, kinds=["message"])
            ]
            for info in store.sessions()
        }
    finally:
        store.close()


def _chat(client: openai.OpenAI, messages: list[dict[str, Any]]) -> str:
    resp = client.chat.completions.create(model="gpt-fake", messages=messages)  # type: ignore[arg-type]
    return resp.choices[0].message.content or ""


def _aider_session(client: openai.OpenAI, aider: AiderLike, turns: range) -> list[Any]:
    """``turns`` turns of aider; returns what the client sent each turn (main requests)."""
    sent: list[Any] = []
    for t in turns:
        if t % 6 == 3:
            aider.run("pytest -q", f"FAILED tests/test_app.py::test_step_{t} - AssertionError: {t}")
            aider.ask("what failed in the output above?")
        else:
            aider.ask(f"add a function step_{t} to app.py")
        request = aider.request()
        sent.append(request)
        answer = _chat(client, request)
        aider.answered(answer)
        if t % 6 != 3:
            aider.files["app.py"] += f"def step_{t}():\n    return {t}\n"
        summary = aider.summary_request()
        if summary is not None:
            sent.append(summary)
            aider.summarized(_chat(client, summary))
    return sent


@pytest.mark.parametrize("limit", [1_000_000, 2_500], ids=["roomy", "compacting"])
def test_aider_rewrites_continue_one_session(tmp_path: Path, limit: int) -> None:
    aider = AiderLike(files={"app.py": "def main():\n    return 0\n"})
    with running(tmp_path, limit=limit) as (fake, gw):
        fake.default = aider_upstream
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-aider", max_retries=0)
        sent = _aider_session(client, aider, range(24))
        metrics = httpx.get(gw.url + "/metrics").text
        log = list(fake.received)
    received = [r for r in log if r.error is None]
    # the request that retried an overflow (the gateway learned the limit and compacted hard)
    retried = {id(log[i + 1]) for i, r in enumerate(log[:-1]) if r.error == "overflow"}
    answers = [
        {"role": "assistant", "content": aider_upstream(Call("openai", r.body)).text}
        for r in received
    ]
    assert "contextfold_gateway_branches_total" not in metrics
    assert "contextfold_gateway_client_rewrites_total" in metrics
    assert not [r for r in log if r.error not in (None, "overflow")]
    assert len(retried) == (1 if limit < 1_000_000 else 0)
    main = [r for r in received if "SEARCH/REPLACE" in r.body["messages"][0]["content"]]
    asked = [s for s in sent if "SEARCH/REPLACE" in s[0]["content"]]
    assert len(asked) == 24 and len(main) == 24
    for r, want in zip(main, asked, strict=True):
        upstream = r.body["messages"]
        if limit == 1_000_000:  # no compaction: exactly what the client sent
            assert upstream == want
        if id(r) in retried:
            # overflow recovery compacts hard and keeps only the pinned messages: the files
            # block and the /run output are not among them (a compaction policy matter)
            continue
        texts = [str(m.get("content")) for m in upstream]
        files = [t for t in texts if t.startswith(FILES_PREFIX)]
        assert files == [t for t in (str(m["content"]) for m in want) if t.startswith(FILES_PREFIX)]
        if "what failed in the output above?" in texts[-1]:
            assert any(t.startswith("I ran this command:") and "AssertionError" in t for t in texts)
    stored = _stored(tmp_path / "ws")
    assert not [sid for sid in stored if ".b" in sid]
    everything = [m for s in sent for m in s] + answers
    stored_bytes = sum(
        len(json.dumps([m.get("role"), m.get("content")]).encode())
        for ms in stored.values()
        for m in ms
    )
    assert stored_bytes < 2 * distinct_bytes(everything)
    # the main session's view is the client's conversation, the rest is kept and retracted
    (sid,) = [s for s, ms in stored.items() if "SEARCH/REPLACE" in str(ms[0]["content"])]
    cm = ContextManager(tmp_path / "ws", session_id=sid)
    try:
        assert len(cm.view.retracted) > 24
        retracted = [cm.history[i].text for i in sorted(cm.view.retracted)]
        assert any(t.startswith(FILES_PREFIX) for t in retracted)  # old files blocks kept
    finally:
        cm.close()


def test_aider_session_resumes_after_a_gateway_restart(tmp_path: Path) -> None:
    aider = AiderLike(files={"app.py": "def main():\n    return 0\n"})
    for n, turns in enumerate((range(8), range(8, 12))):
        with running(tmp_path) as (fake, gw):
            fake.default = aider_upstream
            client = openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-aider", max_retries=0)
            sent = _aider_session(client, aider, turns)
            metrics = httpx.get(gw.url + "/metrics").text
            main = [
                r.body["messages"]
                for r in fake.accepted()
                if "SEARCH/REPLACE" in r.body["messages"][0]["content"]
            ]
        assert "contextfold_gateway_branches_total" not in metrics, n
        assert main == [s for s in sent if "SEARCH/REPLACE" in s[0]["content"]]
    assert not [sid for sid in _stored(tmp_path / "ws") if ".b" in sid]


REMINDER = "<system-reminder>\nThe user opened {name} in the IDE.\n</system-reminder>"


def _tool_reply(call: Call) -> Reply:
    """A coding agent's model: a bash call after each user request, then a text answer."""
    last = call.messages[-1]
    blocks = last.get("content") if isinstance(last.get("content"), list) else []
    if any(isinstance(b, dict) and b.get("type") == "tool_result" for b in blocks):
        return Reply(text="The command ran; moving on.")
    n = len(call.messages)
    return Reply(tool_calls=[(f"toolu_{n:04d}", "Bash", {"command": f"pytest -k case_{n}"})])


def test_claude_code_reminders_that_change_in_old_messages(tmp_path: Path) -> None:
    """Claude Code sends a ``<system-reminder>`` block with the newest user message and no
    longer sends it in the next requests: an old message changed, its tool calls resent."""
    with running(tmp_path) as (fake, gw):
        fake.default = _tool_reply
        client = anthropic.Anthropic(base_url=gw.url, api_key="sk-ant-cc", max_retries=0)
        history: list[dict[str, Any]] = []
        sent: list[list[dict[str, Any]]] = []
        for turn in range(6):
            plain = {"type": "text", "text": f"run the case {turn} tests"}
            reminder = {"type": "text", "text": REMINDER.format(name=f"case_{turn}.py")}
            asked = len(history)
            history.append({"role": "user", "content": [reminder, plain]})
            while True:
                sent.append([dict(m) for m in history])
                msg = client.messages.create(
                    model="claude-fake",
                    max_tokens=256,
                    system="You are Claude Code.",
                    messages=history,
                )
                blocks = [b.model_dump(exclude_none=True) for b in msg.content]
                history.append({"role": "assistant", "content": blocks})
                uses = [b for b in blocks if b["type"] == "tool_use"]
                if not uses:
                    break
                history.append(
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": u["id"],
                                "content": f"ok {u['id']}",
                            }
                            for u in uses
                        ],
                    }
                )
            if turn:  # the reminder of this turn's request is not sent again (the first
                # message keeps its own: it is what the conversation is known by)
                history[asked] = {"role": "user", "content": [plain]}
        metrics = httpx.get(gw.url + "/metrics").text
        upstream = [r.body["messages"] for r in fake.received if r.error is None]
    assert not [r for r in fake.received if r.error is not None]
    assert "contextfold_gateway_branches_total" not in metrics
    assert "contextfold_gateway_client_rewrites_total" in metrics
    assert len(upstream) == len(sent)
    for got, want in zip(upstream, sent, strict=True):
        assert [m["role"] for m in got] == [m["role"] for m in want]
    stored = _stored(tmp_path / "ws")
    assert len(stored) == 1
    (sid,) = stored
    cm = ContextManager(tmp_path / "ws", session_id=sid)
    try:
        # the last request is the view: the current conversation, reminders as last sent
        assert len(cm.view_messages) == len(sent[-1]) + 1 + 1  # system, the final answer
        kept = [cm.history[i] for i in sorted(cm.view.retracted)]
        # turns 1-4 (the last turn's change was never sent): kept, recoverable
        assert sum("<system-reminder>" in m.text for m in kept) == 4
    finally:
        cm.close()


def test_claude_code_clears_an_old_tool_result(tmp_path: Path) -> None:
    """Claude Code's context management replaces old tool results with a short notice: the
    stored result (and what follows it) is retracted, the call resent with the new result."""
    with running(tmp_path) as (fake, gw):
        fake.default = _tool_reply
        client = anthropic.Anthropic(base_url=gw.url, api_key="sk-ant-cc", max_retries=0)
        history: list[dict[str, Any]] = []
        sent: list[list[dict[str, Any]]] = []

        def turn(text: str) -> None:
            history.append({"role": "user", "content": [{"type": "text", "text": text}]})
            while True:
                sent.append([dict(m) for m in history])
                msg = client.messages.create(
                    model="claude-fake",
                    max_tokens=256,
                    system="You are Claude Code.",
                    messages=history,  # type: ignore[arg-type]
                )
                blocks = [b.model_dump(exclude_none=True) for b in msg.content]
                history.append({"role": "assistant", "content": blocks})
                uses = [b for b in blocks if b["type"] == "tool_use"]
                if not uses:
                    return
                history.append(
                    {
                        "role": "user",
                        "content": [
                            {"type": "tool_result", "tool_use_id": u["id"], "content": "x" * 4000}
                            for u in uses
                        ],
                    }
                )

        for n in range(3):
            turn(f"run the case {n} tests")
        old = history[2]["content"][0]
        history[2] = {
            "role": "user",
            "content": [{**old, "content": "[Old tool result content cleared]"}],
        }
        turn("and now case 3")
        turn("and case 4")
        metrics = httpx.get(gw.url + "/metrics").text
        upstream = [r.body["messages"] for r in fake.received]
    assert not [r for r in fake.received if r.error is not None]
    assert "contextfold_gateway_branches_total" not in metrics
    assert "contextfold_gateway_client_rewrites_total 1" in metrics
    assert upstream == sent  # the client's own objects, in its order
    (sid,) = _stored(tmp_path / "ws")
    cm = ContextManager(tmp_path / "ws", session_id=sid)
    try:
        kept = [cm.history[i] for i in sorted(cm.view.retracted)]
        assert any(m.role == "tool" and m.text == "x" * 4000 for m in kept)  # recoverable
        assert [m.role for m in cm.view_messages][:4] == ["system", "user", "assistant", "tool"]
    finally:
        cm.close()
