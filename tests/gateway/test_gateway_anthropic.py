"""The gateway end to end with the real ``anthropic`` SDK: long sessions with thinking blocks
(signatures checked by the fake upstream), moving cache_control markers, recall inside the
gateway as one coherent stream, count_tokens passed through."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from tests.gateway.gateway_fakes import Call, FakeUpstream, Reply, signature_for, trace_replies
from tests.gateway.gateway_helpers import long_trace, running
from tests.support.store_helpers import session_ids

TOOLS = [
    {
        "name": "bash",
        "description": "Run a shell command.",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
    }
]
KEY = "sk-ant-test-key-456"


def _client(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=KEY, max_retries=0, timeout=60)


def _ask(
    client: anthropic.Anthropic, system: str, messages: list[Any], *, stream: bool, script: str
) -> list[dict[str, Any]]:
    kwargs: dict[str, Any] = {
        "model": "claude-fake",
        "max_tokens": 1024,
        "system": system,
        "messages": messages,
        "tools": TOOLS,
        "extra_headers": {"x-fake-script": script},
    }
    if not stream:
        msg = client.messages.create(**kwargs)
    else:
        starts: list[int] = []
        kinds: list[str] = []
        with client.messages.stream(**kwargs) as s:
            for event in s:
                kinds.append(event.type)
                if event.type == "content_block_start":
                    starts.append(event.index)
            msg = s.get_final_message()
        # one coherent stream: one message, its blocks numbered 0, 1, 2 ...
        assert kinds.count("message_start") == 1 and kinds.count("message_stop") == 1
        assert starts == list(range(len(msg.content)))
    return [b.model_dump(exclude_none=True) for b in msg.content]


def _strip_cache(messages: list[Any]) -> list[Any]:
    """Copies of the messages without cache_control (the sent ones stay as they were)."""
    out = []
    for m in messages:
        if isinstance(m.get("content"), list):
            m = {
                **m,
                "content": [
                    {k: v for k, v in b.items() if k != "cache_control"} for b in m["content"]
                ],
            }
        out.append(m)
    return out


def replay(
    fake: FakeUpstream,
    client: anthropic.Anthropic,
    trace: list[dict[str, Any]],
    *,
    stream: bool,
    script: str,
    turns: int | None = None,
) -> tuple[str, list[Any], list[Any]]:
    """Drive the client through the trace; returns the system prompt, the messages of the
    last request and the whole conversation (with the last answer and its tool results)."""
    replies = trace_replies(trace, thinking=True)
    fake.scripts[script] = lambda call: replies.popleft()
    system = trace[0]["content"]
    messages: list[Any] = [{"role": "user", "content": trace[1]["content"]}]
    i, done = 2, 0
    sent: list[Any] = []
    outputs = {m["tool_call_id"]: m["content"] for m in trace if m["role"] == "tool"}
    while i < len(trace) and (turns is None or done < turns):
        m = trace[i]
        if m["role"] == "user":
            messages.append({"role": "user", "content": m["content"]})
            i += 1
            continue
        if m["role"] != "assistant":
            i += 1
            continue
        content = _ask(client, system, messages, stream=stream, script=script)
        sent = list(messages)
        assert content[0]["type"] == "thinking"
        messages.append({"role": "assistant", "content": content})
        uses = [b for b in content if b["type"] == "tool_use"]
        if uses:
            messages = _strip_cache(
                messages
            )  # as Claude Code does: the cache marker moves to the newest turn
            blocks = [
                {"type": "tool_result", "tool_use_id": u["id"], "content": str(outputs[u["id"]])}
                for u in uses
            ]
            blocks[-1]["cache_control"] = {"type": "ephemeral"}
            messages.append({"role": "user", "content": blocks})
        i += 1
        while i < len(trace) and trace[i]["role"] == "tool":
            i += 1
        done += 1
    return system, sent, messages


def _check_upstream(fake: FakeUpstream, limit: int) -> None:
    bad = [r.error for r in fake.received if r.error is not None]
    assert not bad, f"the upstream rejected requests: {bad[:3]}"
    for r in fake.received:
        assert r.tokens <= limit
        # the client's credential reaches the upstream (this SDK sends it as a bearer token)
        assert KEY in (r.headers.get("x-api-key"), r.headers.get("authorization", "")[7:])
        assert r.body["tools"][:1] == TOOLS


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_hundred_turn_session_thinking_signatures_and_cache_markers(
    tmp_path: Path, stream: bool
) -> None:
    trace = long_trace(100)
    limit = 14_000
    with running(tmp_path, limit=limit, context_window=11_000) as (fake, gw):
        system, messages, _ = replay(fake, _client(gw.url), trace, stream=stream, script="trace")
        metrics = httpx.get(gw.url + "/metrics").text
    assert len(fake.received) >= 100
    _check_upstream(fake, limit)  # the fake rejects any thinking block whose signature changed
    assert 'contextfold_gateway_compactions_total{tier="' in metrics
    last = fake.received[-1].body
    assert last["system"] == system
    # the newest turns travel as the client sent them: thinking signatures, cache markers
    sent = last["messages"]
    assert sent[-1] == messages[-1]
    assert sent[-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    thinking = [
        b
        for m in sent
        if m["role"] == "assistant"
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "thinking"
    ]
    assert thinking
    assert all(b["signature"] == signature_for(b["thinking"]) for b in thinking)
    assert (
        sum(
            1
            for m in sent
            for b in (m["content"] if isinstance(m["content"], list) else [])
            if "cache_control" in b
        )
        == 1
    )


def _recall_script(call: Call) -> Reply:
    results = dict(call.last_tool_results())
    if "toolu_recall" in results:
        return Reply(text="Found it: " + results["toolu_recall"][:60], thinking="now I know")
    if "RECALL" in str(call.messages[-1].get("content")):
        assert "recall" in call.tool_names()
        return Reply(
            text="Looking.",
            thinking="I should recall",
            tool_calls=[("toolu_recall", "recall", {"query": "golden section"})],
        )
    return Reply(text="fine", thinking="nothing")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_recall_inside_the_gateway_is_one_response(tmp_path: Path, stream: bool) -> None:
    trace = long_trace(100)
    with running(tmp_path, limit=14_000, context_window=9_000) as (fake, gw):
        client = _client(gw.url)
        system, _, messages = replay(fake, client, trace, stream=False, script="trace", turns=40)
        messages.append(
            {
                "role": "user",
                "content": [{"type": "text", "text": "What did the search print? RECALL"}],
            }
        )
        fake.scripts["recall"] = _recall_script
        before = len(fake.received)
        content = _ask(client, system, messages, stream=stream, script="recall")
        types = [b["type"] for b in content]
        assert types == ["thinking", "text", "thinking", "text"]
        assert content[3]["text"].startswith("Found it: ")
        assert len(fake.received) - before == 2
        # the client resends what it saw (two thinking blocks); the signatures still verify
        messages.append({"role": "assistant", "content": content})
        messages.append({"role": "user", "content": "thanks"})
        _ask(client, system, messages, stream=stream, script="recall")
        metrics = httpx.get(gw.url + "/metrics").text
    _check_upstream(fake, 14_000)
    assert "contextfold_gateway_gateway_tool_calls_total 1" in metrics
    assert "branches_total" not in metrics


def test_count_tokens_and_models_pass_through(tmp_path: Path) -> None:
    with running(tmp_path) as (fake, gw):
        client = _client(gw.url)
        client.messages.create(
            model="claude-fake",
            max_tokens=5,
            messages=[{"role": "user", "content": "hi"}],
            extra_query={"beta": "true"},  # as Claude Code sends it
        )
        counted = client.messages.count_tokens(
            model="claude-fake", messages=[{"role": "user", "content": "hello there"}]
        )
        models = httpx.get(gw.url + "/v1/models", headers={"authorization": "Bearer k"}).json()
    assert counted.input_tokens > 0
    assert models["data"][0]["id"] == "fake-model"
    assert [r.path for r in fake.received] == ["/v1/messages?beta=true"]
    # count_tokens and models store nothing: only the one message exchange is in the store
    assert len(session_ids(tmp_path / "ws")) == 1


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_overflow_is_recovered_once_and_the_limit_learned(tmp_path: Path, stream: bool) -> None:
    trace = long_trace(100)
    limit = 6_000
    with running(tmp_path, limit=limit, context_window=60_000) as (fake, gw):
        replay(fake, _client(gw.url), trace, stream=stream, script="trace", turns=50)
        metrics = httpx.get(gw.url + "/metrics").text
    overflows = [i for i, r in enumerate(fake.received) if r.error == "overflow"]
    assert len(overflows) == 1, [r.error for r in fake.received if r.error]
    assert 'contextfold_gateway_overflow_retries_total{outcome="ok"}' in metrics
    later = fake.received[overflows[0] + 1 :]
    assert later and all(r.error is None and r.tokens <= limit for r in later)


def test_mixed_gateway_and_client_tool_calls_in_a_stream(tmp_path: Path) -> None:
    trace = long_trace(100)
    with running(tmp_path, limit=14_000, context_window=9_000) as (fake, gw):
        client = _client(gw.url)
        system, _, messages = replay(fake, client, trace, stream=False, script="trace", turns=40)
        fake.scripts["mixed"] = lambda call: Reply(
            text="Two things.",
            thinking="both",
            tool_calls=[
                ("toolu_r", "recall", {"query": "error"}),
                ("toolu_b", "bash", {"command": "ls"}),
            ],
        )
        messages.append({"role": "user", "content": "check RECALL"})
        content = _ask(client, system, messages, stream=True, script="mixed")
    assert [b["type"] for b in content] == ["thinking", "text", "tool_use"]
    assert content[2]["id"] == "toolu_b" and content[2]["input"] == {"command": "ls"}


def test_recall_as_the_first_block_still_gives_one_stream(tmp_path: Path) -> None:
    trace = long_trace(100)
    with running(tmp_path, limit=14_000, context_window=9_000) as (fake, gw):
        client = _client(gw.url)
        system, _, messages = replay(fake, client, trace, stream=False, script="trace", turns=40)

        def script(call: Call) -> Reply:
            if dict(call.last_tool_results()).get("toolu_first"):
                return Reply(text="Recalled.")
            return Reply(tool_calls=[("toolu_first", "recall", {"query": "error"})])

        fake.scripts["first"] = script
        messages.append({"role": "user", "content": "RECALL now"})
        content = _ask(client, system, messages, stream=True, script="first")
    assert content == [{"type": "text", "text": "Recalled."}]
