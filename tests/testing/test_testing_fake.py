"""contextfold.testing: ScriptedLLM, ScriptedSummarizer, overflow_error, OverflowingModel."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from contextfold.compaction.summarizers.base import Summarizer, SummaryRequest
from contextfold.core.messages import user
from contextfold.core.overflow import is_context_overflow, overflow_kind
from contextfold.core.tokens import get_counter
from contextfold.errors import ConfigError
from contextfold.providers.llm import AsyncChatModel, ChatModel, ChatResult
from contextfold.testing import (
    OVERFLOW_PROVIDERS,
    OverflowingModel,
    ScriptedLLM,
    ScriptedSummarizer,
    message_tokens,
    overflow_error,
)

HELLO = [{"role": "user", "content": "hello"}]


# --------------------------------------------------------------------------- ScriptedLLM


def test_steps_in_order_and_calls_recorded() -> None:
    seen: list[list[dict[str, Any]]] = []

    def echo(messages: list[dict[str, Any]]) -> str:
        seen.append(messages)
        messages[0]["content"] = "mutated by the step"  # must not leak into llm.calls
        return "echo"

    llm = ScriptedLLM(["one", ValueError("two"), echo, ChatResult(text="four", model="x")])
    assert isinstance(llm, ChatModel) and isinstance(llm, AsyncChatModel)
    first = llm.complete(HELLO, max_tokens=5)
    assert first.text == "one" and first.model == "scripted" and first.stop_reason == "stop"
    assert first.input_tokens == message_tokens(HELLO) and first.output_tokens is not None
    with pytest.raises(ValueError, match="two"):
        llm.complete([{"role": "user", "content": "again"}])
    assert llm.complete(HELLO).text == "echo"
    assert llm.complete(HELLO) == ChatResult(text="four", model="x")
    assert llm.calls[0] == HELLO and llm.calls[1][0]["content"] == "again"
    assert llm.calls[2] == HELLO  # the step's mutation did not leak
    assert llm.max_tokens == [5, None, None, None]
    assert llm.prompts == ["hello", "again", "hello", "hello"]
    assert llm.remaining == 0
    llm.assert_done()


def test_recorded_messages_are_copies() -> None:
    messages = [{"role": "user", "content": "original"}]
    llm = ScriptedLLM(["ok"])
    llm.complete(messages)
    messages[0]["content"] = "changed later"
    assert llm.calls[0][0]["content"] == "original"


def test_exception_class_steps_are_instantiated() -> None:
    llm = ScriptedLLM([TimeoutError])
    with pytest.raises(TimeoutError):
        llm.complete(HELLO)


def test_running_out_raises_with_the_call_number() -> None:
    llm = ScriptedLLM(["only"])
    llm.complete(HELLO)
    with pytest.raises(AssertionError, match="no scripted step left for call 2"):
        llm.complete(HELLO)
    assert len(llm.calls) == 2


def test_default_reply_after_the_script() -> None:
    llm = ScriptedLLM(["first"], default="fallback")
    assert [llm.complete(HELLO).text for _ in range(3)] == ["first", "fallback", "fallback"]


def test_leftover_steps_fail_the_with_block() -> None:
    with (
        pytest.raises(AssertionError, match=r"1 scripted step\(s\) left unused"),
        ScriptedLLM(["a", "b"]) as llm,
    ):
        llm.complete(HELLO)


def test_with_block_does_not_mask_the_real_exception() -> None:
    with pytest.raises(KeyError), ScriptedLLM(["unused"]):
        raise KeyError("real problem")


def test_non_strict_allows_leftovers_and_bad_messages() -> None:
    with ScriptedLLM(["a", "b"], strict=False) as llm:
        assert llm.complete([{"role": "robot", "content": 42}]).text == "a"
    with pytest.raises(AssertionError, match="left unused"):
        llm.assert_done()


@pytest.mark.parametrize(
    ("messages", "match"),
    [
        ([], "empty"),
        ("hello", "must be a list"),
        ([{"content": "x"}], "unknown role"),
        ([{"role": "user", "content": 42}], "content must be"),
        (["not a dict"], "not a dict"),
    ],
)
def test_strict_checks_messages(messages: Any, match: str) -> None:
    with pytest.raises(AssertionError, match=match):
        ScriptedLLM(["x"]).complete(messages)


def test_add_steps_and_async_and_threads() -> None:
    llm = ScriptedLLM()
    llm.add(*[f"r{i}" for i in range(40)])
    assert asyncio.run(llm.acomplete(HELLO)).text == "r0"
    replies: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(13):
            text = llm.complete(HELLO).text
            with lock:
                replies.append(text)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(replies) == sorted(f"r{i}" for i in range(1, 40))
    llm.assert_done()


def test_bad_step_output_is_reported() -> None:
    llm = ScriptedLLM([lambda m: 42])  # type: ignore[list-item,return-value]
    with pytest.raises(AssertionError, match="str or ChatResult"):
        llm.complete(HELLO)


# --------------------------------------------------------------------------- ScriptedSummarizer


def test_scripted_summarizer() -> None:
    request = SummaryRequest(messages=(user("hi"),))
    with ScriptedSummarizer(["s1", RuntimeError("down"), lambda r: f"n={len(r.messages)}"]) as s:
        assert isinstance(s, Summarizer)
        assert s.summarize(request) == "s1"
        with pytest.raises(RuntimeError, match="down"):
            s.summarize(request)
        assert s.summarize(request) == "n=1"
    assert s.requests == [request] * 3
    with pytest.raises(AssertionError, match="no scripted step left for call 4"):
        s.summarize(request)
    assert ScriptedSummarizer(default="d").summarize(request) == "d"
    with pytest.raises(AssertionError, match="left unused"), ScriptedSummarizer(["x"]):
        pass


# --------------------------------------------------------------------------- overflow errors


@pytest.mark.parametrize("provider", OVERFLOW_PROVIDERS)
def test_overflow_error_custom_message(provider: str) -> None:
    exc = overflow_error(provider, message="prompt is too long: 9 tokens > 8 maximum")
    assert "prompt is too long: 9 tokens > 8 maximum" in str(exc)
    assert is_context_overflow(exc)


def test_overflow_error_unknown_provider() -> None:
    with pytest.raises(ConfigError, match="unknown provider 'gemini'"):
        overflow_error("gemini")


# --------------------------------------------------------------------------- OverflowingModel


def test_overflowing_model_limit() -> None:
    model = OverflowingModel(limit=50, provider="anthropic", reply="done")
    small = [{"role": "user", "content": "short"}]
    big = [{"role": "user", "content": "word " * 400}]
    assert model(small) == {"role": "assistant", "content": "done"}
    with pytest.raises(Exception) as info:
        model(big)
    assert overflow_kind(info.value) == "anthropic"
    assert f"{model.token_counts[1]} tokens > 50 maximum" in str(info.value)
    assert model.token_counts[0] <= 50 < model.token_counts[1]
    assert model.overflows == 1 and len(model.calls) == 2
    assert model.complete(small).text == "done"


@pytest.mark.parametrize("provider", OVERFLOW_PROVIDERS)
def test_overflowing_model_always(provider: str) -> None:
    model = OverflowingModel(always=True, provider=provider)
    with pytest.raises(Exception) as info:
        model.complete([{"role": "user", "content": "x"}])
    assert overflow_kind(info.value) == provider


def test_overflowing_model_counts_like_the_library_and_validates() -> None:
    msgs: list[dict[str, Any]] = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"cmd": "ls -la"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a b c"},
    ]
    assert message_tokens(msgs) > sum(
        get_counter().count_text(str(m["content"] or "")) for m in msgs
    )
    model = OverflowingModel(limit=10_000, reply=lambda m: f"{len(m)} messages")
    assert model(msgs)["content"] == "3 messages"
    with pytest.raises(ConfigError):
        OverflowingModel()
    with pytest.raises(ConfigError):
        OverflowingModel(limit=0)
    with pytest.raises(ConfigError):
        OverflowingModel(limit=5, provider="nope")
