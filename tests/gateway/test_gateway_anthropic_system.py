"""Anthropic Messages as Claude Code sends it: mid-conversation ``{"role": "system"}``
messages kept and relayed in place, every field and beta header passed through, and the
gateway's own errors worded so that Claude Code's fallbacks still run."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.gateway.gateway_fakes import MID_SYSTEM_BETA, Reply
from tests.gateway.gateway_helpers import long_trace, running

KEY = "sk-ant-test-key-789"
HEADERS = {
    "x-api-key": KEY,
    "anthropic-version": "2023-06-01",
    "anthropic-beta": f"claude-code-20250219,{MID_SYSTEM_BETA},context-management-2025-06-27",
}
#: fields Claude Code sends beside the messages
FIELDS: dict[str, Any] = {
    "thinking": {"type": "adaptive"},
    "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    "output_config": {"effort": "medium"},
    "metadata": {"user_id": "user_abc_account_1_session_2"},
    "max_tokens": 32000,
}
# What Claude Code 2.1.332 looks for (read from its bundled code) to decide that a server
# refused its mid-conversation system messages and retry without them: any one suffices
_ROLE_SYSTEM = re.compile(r"role .{0,2}system", re.I)
_FALLBACK = [
    re.compile(r"Input should be [\\'\"`]{1,2}(?:user|assistant)\b.{0,2} or"),
    re.compile(r"use the top-level .{0,2}system.{0,2} parameter for the initial system prompt"),
    re.compile(r"text-only role .{0,2}system.{0,2} messages require", re.I),
]


def _fallback_runs(message: str) -> bool:
    if any(p.search(message) for p in _FALLBACK):
        return True
    return "not supported" in message and bool(_ROLE_SYSTEM.search(message))


_TOO_LONG = re.compile(r"^prompt is too long: \d+ tokens > \d+ maximum$")


def _body(messages: list[Any], *, stream: bool) -> dict[str, Any]:
    return {
        "model": "claude-fake",
        "system": [{"type": "text", "text": "You are Claude Code."}],
        "messages": messages,
        "stream": stream,
        **FIELDS,
    }


def _conversation() -> list[Any]:
    return [
        {"role": "user", "content": [{"type": "text", "text": "Fix the failing test."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Looking."}]},
        {
            "role": "system",
            "content": "The user switched to plan mode.",
            "clear_at": "next_user_message",
        },
        {"role": "system", "content": [], "output_config": {"effort": "high"}},
        {"role": "user", "content": "go on"},
    ]


def _post(url: str, body: dict[str, Any], headers: dict[str, str] = HEADERS) -> httpx.Response:
    return httpx.post(url + "/v1/messages?beta=true", json=body, headers=headers, timeout=60)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_mid_conversation_system_messages_are_relayed_in_place(
    tmp_path: Path, stream: bool
) -> None:
    messages = _conversation()
    with running(tmp_path) as (fake, gw):
        fake.mid_system_needs_beta = True
        fake.default = lambda call: Reply(text="done")
        resp = _post(gw.url, _body(messages, stream=stream))
        assert resp.status_code == 200, resp.text
        # the next turn resends them; the session continues
        messages = [*messages, {"role": "assistant", "content": [{"type": "text", "text": "done"}]}]
        messages.append({"role": "user", "content": "thanks"})
        again = _post(gw.url, _body(messages, stream=stream))
        metrics = httpx.get(gw.url + "/metrics").text
    assert again.status_code == 200, again.text
    assert "branches_total" not in metrics
    assert [r.error for r in fake.received] == [None, None]
    first = fake.received[0]
    assert first.path == "/v1/messages?beta=true"
    assert MID_SYSTEM_BETA in first.headers["anthropic-beta"]
    assert first.body["messages"] == _conversation()  # in place, byte for byte
    for key, value in FIELDS.items():
        assert first.body[key] == value
    assert fake.received[1].body["messages"] == messages


def test_without_the_beta_the_upstreams_own_refusal_reaches_the_client(tmp_path: Path) -> None:
    headers = {k: v for k, v in HEADERS.items() if k != "anthropic-beta"}
    with running(tmp_path) as (fake, gw):
        fake.mid_system_needs_beta = True
        resp = _post(gw.url, _body(_conversation(), stream=False), headers)
    assert resp.status_code == 400
    message = resp.json()["error"]["message"]
    assert message == "messages.2.role: Input should be 'user' or 'assistant'"
    assert _fallback_runs(message), "Claude Code's fallback recognizes it"


def test_a_bad_system_message_gets_a_400_the_fallback_recognizes(tmp_path: Path) -> None:
    messages = _conversation()
    messages[2] = {"role": "system", "content": ["not a block"]}
    with running(tmp_path) as (fake, gw):
        resp = _post(gw.url, _body(messages, stream=False))
    assert resp.status_code == 400
    body = resp.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    message = body["error"]["message"]
    assert message.startswith("messages.2: ")
    assert _fallback_runs(message)
    assert fake.received == []


def test_system_messages_survive_a_long_compacted_session(tmp_path: Path) -> None:
    trace = long_trace(100)
    outputs = {m["tool_call_id"]: str(m["content"]) for m in trace if m["role"] == "tool"}
    client = None
    with running(tmp_path, limit=14_000, context_window=10_000) as (fake, gw):
        client = anthropic.Anthropic(base_url=gw.url, api_key=KEY, max_retries=0, timeout=60)
        replies = [m for m in trace if m["role"] == "assistant"][:40]
        script = iter(replies)

        def answer(call: Any) -> Reply:
            m = next(script)
            calls = [
                (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"] or "{}"))
                for c in m.get("tool_calls") or []
            ]
            return Reply(text=str(m.get("content") or "step"), tool_calls=calls)

        fake.default = answer
        messages: list[Any] = [{"role": "user", "content": str(trace[1]["content"])}]
        for n in range(40):
            if n % 7 == 3:  # Claude Code's reminders, as system messages between turns
                messages.append({"role": "system", "content": f"reminder {n}: todo list changed"})
            msg = client.messages.create(
                model="claude-fake",
                max_tokens=1024,
                system="You are Claude Code.",
                messages=messages,
                extra_headers={"anthropic-beta": MID_SYSTEM_BETA},
            )
            content = [b.model_dump(exclude_none=True) for b in msg.content]
            messages.append({"role": "assistant", "content": content})
            uses = [b for b in content if b["type"] == "tool_use"]
            results = [
                {"type": "tool_result", "tool_use_id": u["id"], "content": outputs.get(u["id"], "")}
                for u in uses
            ]
            messages.append({"role": "user", "content": results or "next"})
        metrics = httpx.get(gw.url + "/metrics").text
    assert [r.error for r in fake.received if r.error] == []
    assert 'contextfold_gateway_compactions_total{tier="' in metrics
    assert "branches_total" not in metrics
    last = fake.received[-1].body["messages"]
    assert last[0]["role"] != "system"
    newest = [m for m in messages[:-2] if m["role"] == "system"][-1]
    assert newest in last, "the newest reminder is still where the client put it"


def test_a_view_that_cannot_fit_is_answered_as_each_providers_overflow(tmp_path: Path) -> None:
    # tool schemas alone over the window: no view can fit, whatever is compacted
    big = "word " * 6_000
    anthropic_tools = [{"name": "t", "description": big, "input_schema": {"type": "object"}}]
    openai_tool = {"name": "t", "description": big, "parameters": {"type": "object"}}
    with running(tmp_path, context_window=2_000) as (fake, gw):
        anth = _post(
            gw.url,
            {
                "model": "claude-fake",
                "max_tokens": 100,
                "messages": [{"role": "user", "content": "hi"}],
                "tools": anthropic_tools,
            },
        )
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="k", max_retries=0)
        with pytest.raises(openai.BadRequestError) as chat_err:
            client.chat.completions.create(
                model="gpt-fake",
                messages=[{"role": "user", "content": "hi"}],
                tools=[{"type": "function", "function": openai_tool}],
            )
        with pytest.raises(openai.BadRequestError) as resp_err:
            client.responses.create(
                model="gpt-fake", input="hi", tools=[{"type": "function", **openai_tool}]
            )
    assert anth.status_code == 400
    # exactly the words Claude Code matches to run its own compaction
    assert _TOO_LONG.match(anth.json()["error"]["message"]), anth.json()
    assert chat_err.value.code == "context_length_exceeded"
    assert "maximum context length is 2000 tokens" in str(chat_err.value)
    assert resp_err.value.code == "context_length_exceeded"  # Codex's ContextWindowExceeded
    assert fake.received == []


def test_count_tokens_with_system_messages_passes_through(tmp_path: Path) -> None:
    with running(tmp_path) as (_fake, gw):
        body = {"model": "claude-fake", "messages": _conversation()}
        resp = httpx.post(
            gw.url + "/v1/messages/count_tokens?beta=true", json=body, headers=HEADERS
        )
    assert resp.status_code == 200
    assert resp.json()["input_tokens"] > 0
