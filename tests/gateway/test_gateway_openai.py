"""The gateway end to end with the real ``openai`` SDK: long sessions with compaction, recall
answered inside the gateway, the client's tools untouched, streaming and not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from contextfold import ContextManager
from tests.gateway.gateway_fakes import (
    Call,
    FakeUpstream,
    Reply,
    openai_tool_results,
    trace_replies,
)
from tests.gateway.gateway_helpers import long_trace, running
from tests.support.store_helpers import session_ids

CLIENT_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]


def _client(url: str, key: str = "sk-test-key-123") -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=60)


def _ask(
    client: openai.OpenAI, messages: list[Any], *, stream: bool, script: str
) -> dict[str, Any]:
    """One call; returns the assistant message as the client would append it."""
    headers = {"x-fake-script": script}
    if not stream:
        resp = client.chat.completions.create(
            model="gpt-fake", messages=messages, tools=CLIENT_TOOLS, extra_headers=headers
        )
        return resp.choices[0].message.model_dump(exclude_none=True)
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish = None
    chunk_ids = set()
    for chunk in client.chat.completions.create(
        model="gpt-fake",
        messages=messages,
        tools=CLIENT_TOOLS,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers=headers,
    ):
        chunk_ids.add(chunk.id)
        for choice in chunk.choices:
            d = choice.delta
            finish = choice.finish_reason or finish
            if d.content:
                text.append(d.content)
            for tc in d.tool_calls or []:
                slot = calls.setdefault(
                    tc.index,
                    {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                )
                if tc.id:
                    slot["id"] = tc.id
                if tc.function and tc.function.name:
                    slot["function"]["name"] += tc.function.name
                if tc.function and tc.function.arguments:
                    slot["function"]["arguments"] += tc.function.arguments
    assert finish is not None, "the stream ended without a finish_reason"
    assert len(chunk_ids) == 1, "one coherent stream: every chunk carries the same id"
    msg: dict[str, Any] = {"role": "assistant", "content": "".join(text)}
    if calls:
        msg["tool_calls"] = [calls[i] for i in sorted(calls)]
    return msg


def replay(
    fake: FakeUpstream,
    client: openai.OpenAI,
    trace: list[dict[str, Any]],
    *,
    stream: bool,
    script: str,
    turns: int | None = None,
) -> tuple[list[Any], int]:
    """Drive the client through the trace; returns the whole conversation (with the last
    answer and its tool results) and how many of its messages the gateway has seen."""
    replies = trace_replies(trace)
    fake.scripts[script] = lambda call: replies.popleft()
    messages: list[Any] = list(trace[:2])
    i = 2
    done = sent = 0
    while i < len(trace) and (turns is None or done < turns):
        m = trace[i]
        if m["role"] != "assistant":
            messages.append(m)
            i += 1
            continue
        got = _ask(client, messages, stream=stream, script=script)
        sent = len(messages) + 1
        expected = [c["id"] for c in m.get("tool_calls") or []]
        assert [c["id"] for c in got.get("tool_calls") or []] == expected
        messages.append(got)
        results, i = openai_tool_results(trace, i + 1)
        messages.extend(results)
        done += 1
    assert sent, "nothing was sent"
    return messages, sent


def _check_upstream(fake: FakeUpstream, limit: int) -> None:
    bad = [r.error for r in fake.received if r.error is not None]
    assert not bad, f"the upstream rejected requests: {bad[:3]}"
    for r in fake.received:
        assert r.tokens <= limit
        assert r.headers.get("authorization") == "Bearer sk-test-key-123"
        assert r.body["tools"][: len(CLIENT_TOOLS)] == CLIENT_TOOLS


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_hundred_turn_session_with_compaction(tmp_path: Path, stream: bool) -> None:
    trace = long_trace(100)
    limit = 12_000
    with running(tmp_path, limit=limit, context_window=10_000) as (fake, gw):
        client = _client(gw.url)
        messages, seen = replay(fake, client, trace, stream=stream, script="trace")
        messages = messages[:seen]
        metrics = httpx.get(gw.url + "/metrics").text
    turns = sum(1 for m in trace if m["role"] == "assistant")
    assert len(fake.received) == turns >= 100
    _check_upstream(fake, limit)
    assert 'contextfold_gateway_compactions_total{tier="' in metrics
    # the store holds exactly the client's conversation, each message once
    sessions = session_ids(tmp_path / "ws")
    assert len(sessions) == 1
    cm = ContextManager(tmp_path / "ws", session_id=sessions[0], context_window=10_000)
    assert len(cm.history) == len(messages)
    assert [m.role for m in cm.history] == [m["role"] for m in messages]
    assert cm.records(), "compaction records are stored"
    # the last upstream request ends with the client's own newest messages, unchanged
    last = fake.received[-1].body["messages"]
    assert last[-1] == json.loads(json.dumps(messages[-2]))
    assert last[0] == messages[0]


def _recall_script(query: str, mixed: bool = False) -> Any:
    def script(call: Call) -> Reply:
        results = dict(call.last_tool_results())
        if "call_recall_1" in results:
            return Reply(text="Found it: " + results["call_recall_1"][:60])
        last = call.messages[-1]
        if last.get("role") == "user" and "RECALL" in str(last.get("content")):
            assert "recall" in call.tool_names()
            calls = [("call_recall_1", "recall", {"query": query})]
            if mixed:
                calls.append(("call_bash_9", "bash", {"command": "ls"}))
            return Reply(text="Let me look that up. ", tool_calls=calls)
        return Reply(text="nothing to do")

    return script


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_recall_answered_inside_the_gateway(tmp_path: Path, stream: bool) -> None:
    trace = long_trace(100)
    with running(tmp_path, limit=12_000, context_window=8_000) as (fake, gw):
        client = _client(gw.url)
        messages, _ = replay(fake, client, trace, stream=False, script="trace", turns=40)
        fake.scripts["recall"] = _recall_script("golden section search")
        messages.append({"role": "user", "content": "What did the first command print? RECALL"})
        before = len(fake.received)
        got = _ask(client, messages, stream=stream, script="recall")
        # one ordinary answer: the recall round trip happened between gateway and upstream
        assert "tool_calls" not in got
        assert got["content"].startswith("Let me look that up. Found it: ")
        sent = fake.received[before:]
        assert len(sent) == 2
        answer = [m for m in sent[1].body["messages"] if m.get("tool_call_id") == "call_recall_1"]
        assert (
            len(answer) == 1
            and answer[0]["content"]
            and not answer[0]["content"].startswith("Error")
        )
        # the next turn: the client resends what it saw; the session continues (no branch)
        messages.append(got)
        messages.append({"role": "user", "content": "thanks"})
        _ask(client, messages, stream=stream, script="recall")
        metrics = httpx.get(gw.url + "/metrics").text
    assert "contextfold_gateway_gateway_tool_calls_total 1" in metrics
    assert "branches_total" not in metrics
    _check_upstream(fake, 12_000)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_recall_mixed_with_client_tools_returns_only_the_clients_calls(
    tmp_path: Path, stream: bool
) -> None:
    trace = long_trace(100)
    with running(tmp_path, limit=12_000, context_window=8_000) as (fake, gw):
        client = _client(gw.url)
        messages, _ = replay(fake, client, trace, stream=False, script="trace", turns=40)
        fake.scripts["recall"] = _recall_script("golden", mixed=True)
        messages.append({"role": "user", "content": "Check again. RECALL"})
        got = _ask(client, messages, stream=stream, script="recall")
    assert [c["function"]["name"] for c in got["tool_calls"]] == ["bash"]
    assert got["tool_calls"][0]["id"] == "call_bash_9"
    assert json.loads(got["tool_calls"][0]["function"]["arguments"]) == {"command": "ls"}


def test_no_gateway_tools_before_anything_left_the_view(tmp_path: Path) -> None:
    with running(tmp_path) as (fake, gw):
        client = _client(gw.url)
        _ask(
            client,
            [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}],
            stream=False,
            script="x",
        )
    assert fake.received[0].body["tools"] == CLIENT_TOOLS


def test_upstream_overflow_compacts_hard_learns_the_limit_and_retries(tmp_path: Path) -> None:
    trace = long_trace(100)
    limit = 6_000
    with running(tmp_path, limit=limit, context_window=60_000) as (fake, gw):
        client = _client(gw.url)
        replay(fake, client, trace, stream=False, script="trace", turns=60)
        metrics = httpx.get(gw.url + "/metrics").text
    overflows = [r for r in fake.received if r.error == "overflow"]
    assert overflows, "the gateway's window was larger than the upstream's: one overflow at least"
    assert 'contextfold_gateway_overflow_retries_total{outcome="ok"}' in metrics
    # once learned, the limit holds: every later request fits
    last_overflow = fake.received.index(overflows[-1])
    assert len(overflows) == 1
    assert all(r.error is None and r.tokens <= limit for r in fake.received[last_overflow + 1 :])


def test_the_upstream_model_writes_the_summaries(tmp_path: Path) -> None:
    trace = long_trace(100)
    replies = trace_replies(trace)

    def script(call: Call) -> Reply:
        first = call.messages[0]
        if "summaries" in str(first.get("content")) and not call.body.get("tools"):
            return Reply(text="### Task\nfix the bug\n## Summary\nThe agent read the sources.")
        return replies.popleft()

    with running(tmp_path, limit=12_000, context_window=8_000, summarizer="upstream") as (fake, gw):
        fake.scripts["s"] = script
        client = _client(gw.url)
        messages: list[Any] = list(trace[:2])
        i = 2
        while len([r for r in fake.received if not r.body.get("tools")]) == 0 and i < len(trace):
            m = trace[i]
            if m["role"] != "assistant":
                messages.append(m)
                i += 1
                continue
            messages.append(_ask(client, messages, stream=False, script="s"))
            results, i = openai_tool_results(trace, i + 1)
            messages.extend(results)
    summary_calls = [r for r in fake.received if not r.body.get("tools")]
    assert summary_calls, "a compaction asked the upstream model for a summary"
    call = summary_calls[0]
    assert call.headers["authorization"] == "Bearer sk-test-key-123"
    assert call.body["model"] == "gpt-fake"
    sessions = session_ids(tmp_path / "ws")
    cm = ContextManager(tmp_path / "ws", session_id=sessions[0], context_window=8_000)
    assert any("The agent read the sources." in r.summary_text for r in cm.records())


def test_evidence_is_injected_when_the_user_asks_for_it(tmp_path: Path) -> None:
    trace = long_trace(100)
    with running(tmp_path, limit=12_000, context_window=8_000) as (fake, gw):
        client = _client(gw.url)
        messages, _ = replay(fake, client, trace, stream=False, script="trace", turns=40)
        fake.scripts["plain"] = lambda call: Reply(text="Here it is.")
        question = "What was the exact error output of the first test run earlier?"
        messages.append({"role": "user", "content": question})
        _ask(client, messages, stream=True, script="plain")
    sent = fake.received[-1].body["messages"]
    assert sent[-1] == {"role": "user", "content": question}  # the client's own message, last
    injected = sent[-2]
    assert injected["role"] == "user"
    assert "Historical evidence restored from before a context" in injected["content"]
    assert fake.received[-1].error is None


def test_read_offloaded_is_answered_inside_the_gateway(tmp_path: Path) -> None:
    trace = long_trace(100)
    originals = {m["tool_call_id"]: str(m["content"]) for m in trace if m["role"] == "tool"}
    asked: dict[str, str] = {}

    def script(call: Call) -> Reply:
        results = dict(call.last_tool_results())
        if "call_read_1" in results:
            asked["answer"] = results["call_read_1"]
            return Reply(text="Read it.")
        assert "read_offloaded" in call.tool_names()
        return Reply(tool_calls=[("call_read_1", "read_offloaded", {"id": asked["id"]})])

    with running(tmp_path, limit=12_000, context_window=8_000) as (fake, gw):
        client = _client(gw.url)
        messages, _ = replay(fake, client, trace, stream=False, script="trace", turns=40)
        (session,) = session_ids(tmp_path / "ws")
        offloaded = ContextManager(tmp_path / "ws", session_id=session).offloaded()
        assert offloaded, "compaction offloaded some tool results"
        asked["id"] = next(iter(offloaded))
        fake.scripts["read"] = script
        messages.append({"role": "user", "content": "look at that big output again"})
        got = _ask(client, messages, stream=True, script="read")
    assert got == {"role": "assistant", "content": "Read it."}
    original = originals[asked["id"]]
    first_line = next(line for line in original.splitlines() if line.strip())
    assert first_line in asked["answer"]  # the exact text came back from the offload store


def test_system_and_developer_messages_anywhere_are_relayed_in_place(tmp_path: Path) -> None:
    messages: list[Any] = [
        {"role": "developer", "content": "Follow the repository's style."},
        {"role": "user", "content": "Fix the bug."},
        {"role": "assistant", "content": "On it."},
        {"role": "system", "content": "Reminder: the tests live in tests/."},
        {"role": "developer", "content": [{"type": "text", "text": "Plan mode is off."}]},
        {"role": "user", "content": "go on"},
    ]
    with running(tmp_path) as (fake, gw):
        client = _client(gw.url)
        got = _ask(client, messages, stream=True, script="x")
        messages += [
            got,
            {"role": "system", "content": "late note"},
            {"role": "user", "content": "ok"},
        ]
        _ask(client, messages, stream=False, script="x")
        metrics = httpx.get(gw.url + "/metrics").text
    assert [r.error for r in fake.received] == [None, None]
    assert fake.received[0].body["messages"] == messages[:6]
    assert fake.received[1].body["messages"][6:] == messages[6:]
    assert "branches_total" not in metrics
