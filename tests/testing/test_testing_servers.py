"""contextfold.testing's fake provider servers, driven with the official SDKs over real HTTP."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from contextfold.core.overflow import is_context_overflow
from contextfold.testing import FakeReply, fake_anthropic_server, fake_openai_server

CALL = FakeReply(text="running it", tool_calls=[("call_1", "bash", {"command": "ls"})])


def test_openai_chat_whole_and_streamed() -> None:
    with fake_openai_server(replies=[CALL, "done"]) as fake:
        assert fake.base_url.startswith("http://127.0.0.1:") and fake.base_url.endswith("/v1")
        client = openai.OpenAI(base_url=fake.base_url, api_key="t", max_retries=0)
        first = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "list files"}]
        )
        call = first.choices[0].message.tool_calls[0]
        assert call.id == "call_1" and json.loads(call.function.arguments) == {"command": "ls"}
        assert first.choices[0].finish_reason == "tool_calls"
        history = [
            {"role": "user", "content": "list files"},
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": "call_1", "content": "a.py"},
        ]
        stream = client.chat.completions.create(
            model="m", messages=history, stream=True, stream_options={"include_usage": True}
        )
        chunks = list(stream)
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "done"
        assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens > 0
        assert [r.error for r in fake.requests] == [None, None]
        assert fake.requests[1].body["messages"][2]["content"] == "a.py"


def test_openai_chat_refuses_as_openai_does() -> None:
    with fake_openai_server(context_window=50) as fake:
        client = openai.OpenAI(base_url=fake.base_url, api_key="t", max_retries=0)
        with pytest.raises(openai.BadRequestError) as over:
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x" * 400}]
            )
        assert over.value.code == "context_length_exceeded" and is_context_overflow(over.value)
        assert "maximum context length is 50 tokens" in str(over.value)
        with pytest.raises(openai.BadRequestError, match="must be a response to a preceeding"):
            client.chat.completions.create(
                model="m", messages=[{"role": "tool", "tool_call_id": "c", "content": "x"}]
            )
        assert [r.error for r in fake.requests][:1] == ["overflow"]


def test_openai_responses_whole_streamed_and_refused() -> None:
    with fake_openai_server(context_window=200, replies=[CALL, "all good"]) as fake:
        client = openai.OpenAI(base_url=fake.base_url, api_key="t", max_retries=0)
        first = client.responses.create(model="m", input="list files")
        call = next(o for o in first.output if o.type == "function_call")
        assert call.call_id == "call_1" and call.name == "bash"
        items = [
            {"role": "user", "content": "list files"},
            {"type": "function_call", "call_id": "call_1", "name": "bash", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "a.py"},
        ]
        events = list(client.responses.create(model="m", input=items, stream=True))
        assert events[-1].type == "response.completed"
        assert events[-1].response.output_text == "all good"
        with pytest.raises(openai.BadRequestError, match="No tool call found for function call"):
            client.responses.create(model="m", input=items[2:])
        with pytest.raises(openai.BadRequestError) as over:
            client.responses.create(model="m", input="x" * 2000)
        assert over.value.code == "context_length_exceeded" and is_context_overflow(over.value)


def test_anthropic_whole_streamed_and_refused() -> None:
    reply = FakeReply(text="on it", thinking="look first", tool_calls=[("toolu_1", "bash", {})])
    with fake_anthropic_server(context_window=300, replies=[reply, "done"]) as fake:
        client = anthropic.Anthropic(base_url=fake.base_url, api_key="t", max_retries=0)
        first = client.messages.create(
            model="m", max_tokens=100, messages=[{"role": "user", "content": "go"}]
        )
        assert [b.type for b in first.content] == ["thinking", "text", "tool_use"]
        turn = [b.model_dump() for b in first.content]
        history = [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": turn},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]},
        ]  # fmt: skip
        with client.messages.stream(model="m", max_tokens=100, messages=history) as stream:
            assert stream.get_final_message().content[0].text == "done"
        tampered = [dict(turn[0], thinking="something else"), *turn[1:]]
        with pytest.raises(anthropic.BadRequestError, match="Invalid `signature`"):
            client.messages.create(
                model="m", max_tokens=100, messages=[history[0], {"role": "assistant", "content": tampered}, history[2]]
            )  # fmt: skip
        with pytest.raises(anthropic.BadRequestError, match="without `tool_result` blocks"):
            client.messages.create(model="m", max_tokens=100, messages=history[:2])
        with pytest.raises(anthropic.BadRequestError) as over:
            client.messages.create(
                model="m", max_tokens=100, messages=[{"role": "user", "content": "x" * 4000}]
            )
        assert "prompt is too long" in str(over.value) and is_context_overflow(over.value)


def test_scripts_failures_and_a_context_manager_against_the_fake(tmp_path: object) -> None:
    from contextfold import ContextManager

    def script(request: object) -> str:
        return f"seen {len(request.body['messages'])} messages"  # type: ignore[attr-defined]

    with fake_openai_server(script=script) as fake:
        fake.fail(429, {"error": {"message": "slow down", "type": "rate_limit", "code": None}})
        client = openai.OpenAI(base_url=fake.base_url, api_key="t", max_retries=0)
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])
        cm = ContextManager(workspace=str(tmp_path), session_id="f", context_window=8_000)
        cm.add({"role": "user", "content": "hello"})
        reply = cm.call(lambda view: client.chat.completions.create(model="m", messages=view))
        assert reply.choices[0].message.content == "seen 1 messages"
        cm.close()


def test_without_the_gateway_extra_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from contextfold.errors import ConfigError

    monkeypatch.setitem(sys.modules, "starlette.applications", None)  # as if not installed
    server = fake_openai_server()
    with pytest.raises(
        ConfigError, match=r"needs the 'gateway' extra \(pip install '\.\[gateway\]'"
    ):
        server.__enter__()
