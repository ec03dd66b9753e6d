"""OpenAIChatModel / AnthropicChatModel through the real SDKs against a local HTTP server."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import anthropic
import openai
import pytest

from contextfold.core.overflow import is_context_overflow, overflow_kind
from contextfold.errors import ConfigError, InvalidMessageError
from contextfold.providers.llm import (
    LOCAL_API_KEY,
    AnthropicChatModel,
    AsyncChatModel,
    ChatModel,
    ChatResult,
    OpenAIChatModel,
)
from tests.support.http_fakes import (
    FakeLLMServer,
    anthropic_message,
    anthropic_prompt_too_long,
    fake_llm_server_fixture,  # noqa: F401
    openai_completion,
    openai_context_length_error,
)

FAST_RETRY = {"retry-after-ms": "1"}
CHAT = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Say hi"},
]


@pytest.fixture(autouse=True)
def _no_provider_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "OPENAI_CUSTOM_HEADERS",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_CUSTOM_HEADERS",
    ):
        monkeypatch.delenv(name, raising=False)


def _openai(server: FakeLLMServer, **kw: object) -> OpenAIChatModel:
    kw.setdefault("api_key", "sk-test")
    return OpenAIChatModel(model="gpt-test", base_url=server.openai_base_url, **kw)  # type: ignore[arg-type]


def _anthropic(server: FakeLLMServer, **kw: object) -> AnthropicChatModel:
    kw.setdefault("api_key", "sk-ant-test")
    return AnthropicChatModel(model="claude-test", base_url=server.anthropic_base_url, **kw)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- OpenAI


def test_openai_request_shape_and_usage(fake_llm_server: FakeLLMServer) -> None:
    fake_llm_server.enqueue(
        200, openai_completion("hi there", prompt_tokens=21, completion_tokens=3)
    )
    with _openai(fake_llm_server) as model:
        assert isinstance(model, ChatModel) and isinstance(model, AsyncChatModel)
        result = model.complete(CHAT, max_tokens=50)
    assert result == ChatResult(
        text="hi there", input_tokens=21, output_tokens=3, model="gpt-test", stop_reason="stop"
    )
    (req,) = fake_llm_server.requests
    assert req.path == "/v1/chat/completions"
    assert req.headers["authorization"] == "Bearer sk-test"
    assert req.json["model"] == "gpt-test"
    assert req.json["messages"] == CHAT
    assert req.json["max_tokens"] == 50
    assert req.json["temperature"] == 0.0


def test_openai_optional_parameters(fake_llm_server: FakeLLMServer) -> None:
    fake_llm_server.enqueue(200, openai_completion("a"))
    fake_llm_server.enqueue(200, openai_completion("b"))
    plain = _openai(fake_llm_server, temperature=None)
    plain.complete(CHAT)
    reasoning = _openai(
        fake_llm_server,
        max_tokens=64,
        max_tokens_param="max_completion_tokens",
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
    )
    reasoning.complete(CHAT)
    first, second = (r.json for r in fake_llm_server.requests)
    assert "max_tokens" not in first and "temperature" not in first
    assert second["max_completion_tokens"] == 64 and "max_tokens" not in second
    assert second["chat_template_kwargs"] == {"enable_thinking": False}


def test_openai_local_server_needs_no_key(fake_llm_server: FakeLLMServer) -> None:
    fake_llm_server.enqueue(200, openai_completion("ok"))
    model = OpenAIChatModel(model="qwen3:8b", base_url=fake_llm_server.openai_base_url)
    assert model.complete(CHAT).text == "ok"
    assert fake_llm_server.requests[0].headers["authorization"] == f"Bearer {LOCAL_API_KEY}"


def test_openai_key_from_env(
    fake_llm_server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    fake_llm_server.enqueue(200, openai_completion("ok"))
    OpenAIChatModel(model="gpt-test", base_url=fake_llm_server.openai_base_url).complete(CHAT)
    assert fake_llm_server.requests[0].headers["authorization"] == "Bearer sk-from-env"


def test_openai_without_key_or_base_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        OpenAIChatModel(model="gpt-4o")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"model": ""}, "model"),
        ({"model": "m", "timeout": 0}, "timeout"),
        ({"model": "m", "max_retries": -1}, "max_retries"),
        ({"model": "m", "max_tokens": 0}, "max_tokens"),
    ],
)
def test_openai_config_validation(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        OpenAIChatModel(base_url="http://127.0.0.1:1/v1", **kwargs)  # type: ignore[arg-type]


def test_openai_retries_a_500_then_succeeds(fake_llm_server: FakeLLMServer) -> None:
    fake_llm_server.enqueue(
        500, {"error": {"message": "boom", "type": "server_error"}}, headers=FAST_RETRY
    )
    fake_llm_server.enqueue(200, openai_completion("after retry"))
    model = _openai(fake_llm_server, max_retries=1)
    assert model.complete(CHAT).text == "after retry"
    assert len(fake_llm_server.requests) == 2


def test_openai_gives_up_after_max_retries(fake_llm_server: FakeLLMServer) -> None:
    for _ in range(2):
        fake_llm_server.enqueue(500, {"error": {"message": "boom"}}, headers=FAST_RETRY)
    model = _openai(fake_llm_server, max_retries=1)
    with pytest.raises(openai.InternalServerError):
        model.complete(CHAT)
    assert len(fake_llm_server.requests) == 2


def test_openai_timeout_is_honored(fake_llm_server: FakeLLMServer) -> None:
    fake_llm_server.enqueue(200, openai_completion("too late"), delay=0.5)
    model = _openai(fake_llm_server, timeout=0.1, max_retries=0)
    with pytest.raises(openai.APITimeoutError):
        model.complete(CHAT)


def test_openai_context_length_error_is_the_real_sdk_exception(
    fake_llm_server: FakeLLMServer,
) -> None:
    fake_llm_server.enqueue(400, openai_context_length_error())
    with pytest.raises(openai.BadRequestError) as info:
        _openai(fake_llm_server).complete(CHAT)
    assert info.value.code == "context_length_exceeded"
    assert is_context_overflow(info.value) and overflow_kind(info.value) == "openai"


def test_openai_missing_choices_and_content_give_empty_text(fake_llm_server: FakeLLMServer) -> None:
    body = openai_completion("x")
    body["choices"][0]["message"]["content"] = None
    fake_llm_server.enqueue(200, body)
    assert _openai(fake_llm_server).complete(CHAT).text == ""


def test_openai_rejects_bad_messages(fake_llm_server: FakeLLMServer) -> None:
    model = _openai(fake_llm_server)
    with pytest.raises(InvalidMessageError):
        model.complete([])
    with pytest.raises(InvalidMessageError, match="message 0"):
        model.complete([{"content": "no role"}])
    assert fake_llm_server.requests == []


def test_openai_async(fake_llm_server: FakeLLMServer) -> None:
    fake_llm_server.enqueue(
        200, openai_completion("async hi", prompt_tokens=4, completion_tokens=2)
    )
    model = _openai(fake_llm_server)

    async def run() -> ChatResult:
        try:
            return await model.acomplete(CHAT, max_tokens=9)
        finally:
            await model.aclose()

    result = asyncio.run(run())
    assert (result.text, result.input_tokens, result.output_tokens) == ("async hi", 4, 2)
    assert fake_llm_server.requests[0].json["max_tokens"] == 9


def test_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(
        ConfigError, match=r"pip install '\.\[openai\]' in the contextfold checkout"
    ):
        OpenAIChatModel(model="m", base_url="http://127.0.0.1:1/v1")
    monkeypatch.setitem(sys.modules, "anthropic", None)
    with pytest.raises(
        ConfigError, match=r"pip install '\.\[anthropic\]' in the contextfold checkout"
    ):
        AnthropicChatModel(model="m", api_key="k")


# --------------------------------------------------------------------------- Anthropic


def test_anthropic_request_shape_and_usage(fake_llm_server: FakeLLMServer) -> None:
    body = anthropic_message("hello", input_tokens=30, output_tokens=4)
    body["usage"]["cache_read_input_tokens"] = 100
    fake_llm_server.enqueue(200, body)
    with _anthropic(fake_llm_server) as model:
        result = model.complete(CHAT)
    assert result == ChatResult(
        text="hello", input_tokens=130, output_tokens=4, model="claude-test", stop_reason="end_turn"
    )
    (req,) = fake_llm_server.requests
    assert req.path == "/v1/messages"
    assert "sk-ant-test" in (
        req.headers.get("x-api-key", "") + req.headers.get("authorization", "")
    )
    assert "anthropic-version" in req.headers
    assert req.json["model"] == "claude-test"
    assert req.json["system"] == "You are terse."
    assert req.json["messages"] == [{"role": "user", "content": "Say hi"}]
    assert req.json["max_tokens"] == 2048
    # anthropic SDK 2.x (API version 2026-10-21) rejects sampling parameters: none is sent.
    assert "temperature" not in req.json


def test_anthropic_converts_tool_turns_and_honors_max_tokens(
    fake_llm_server: FakeLLMServer,
) -> None:
    fake_llm_server.enqueue(200, anthropic_message("done"))
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "list files"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "ls", "arguments": '{"path": "."}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "a.py"},
        {"role": "user", "content": "summarize"},
    ]
    _anthropic(fake_llm_server, temperature=0.2).complete(messages, max_tokens=77)
    sent = fake_llm_server.requests[0].json
    assert "system" not in sent
    assert sent["temperature"] == 0.2  # opt-in, for servers that still accept it
    assert sent["max_tokens"] == 77
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]
    assert sent["messages"][1]["content"][0] == {
        "type": "tool_use",
        "id": "call_1",
        "name": "ls",
        "input": {"path": "."},
    }
    assert sent["messages"][2]["content"][0]["type"] == "tool_result"


def test_anthropic_joins_text_blocks(fake_llm_server: FakeLLMServer) -> None:
    body = anthropic_message("part one, ")
    body["content"].append({"type": "text", "text": "part two"})
    fake_llm_server.enqueue(200, body)
    assert _anthropic(fake_llm_server).complete(CHAT).text == "part one, part two"


def test_anthropic_local_server_needs_no_key(fake_llm_server: FakeLLMServer) -> None:
    fake_llm_server.enqueue(200, anthropic_message("ok"))
    AnthropicChatModel(model="local", base_url=fake_llm_server.anthropic_base_url).complete(CHAT)
    headers = fake_llm_server.requests[0].headers
    assert LOCAL_API_KEY in headers.get("x-api-key", "") + headers.get("authorization", "")


def test_anthropic_retries_then_succeeds(fake_llm_server: FakeLLMServer) -> None:
    fake_llm_server.enqueue(
        529,
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        headers=FAST_RETRY,
    )
    fake_llm_server.enqueue(200, anthropic_message("second time"))
    assert _anthropic(fake_llm_server, max_retries=1).complete(CHAT).text == "second time"
    assert len(fake_llm_server.requests) == 2


def test_anthropic_timeout_is_honored(fake_llm_server: FakeLLMServer) -> None:
    fake_llm_server.enqueue(200, anthropic_message("too late"), delay=0.5)
    with pytest.raises(anthropic.APITimeoutError):
        _anthropic(fake_llm_server, timeout=0.1, max_retries=0).complete(CHAT)


def test_anthropic_prompt_too_long_is_the_real_sdk_exception(
    fake_llm_server: FakeLLMServer,
) -> None:
    fake_llm_server.enqueue(400, anthropic_prompt_too_long())
    with pytest.raises(anthropic.BadRequestError) as info:
        _anthropic(fake_llm_server).complete(CHAT)
    assert is_context_overflow(info.value) and overflow_kind(info.value) == "anthropic"


def test_anthropic_needs_a_user_message(fake_llm_server: FakeLLMServer) -> None:
    with pytest.raises(InvalidMessageError, match="user message"):
        _anthropic(fake_llm_server).complete([{"role": "system", "content": "only"}])


def test_anthropic_async(fake_llm_server: FakeLLMServer) -> None:
    fake_llm_server.enqueue(200, anthropic_message("async hello"))
    model = _anthropic(fake_llm_server)

    async def run() -> ChatResult:
        try:
            return await model.acomplete(CHAT)
        finally:
            await model.aclose()

    assert asyncio.run(run()).text == "async hello"
    assert fake_llm_server.requests[0].json["system"] == "You are terse."
