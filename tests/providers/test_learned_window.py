"""Learning from the provider: an overflow error that states the real window lowers the
session's window (persisted, with a warning) so the next calls fit; the summarizer's chunks shrink
the same way; a retry is never the request that failed; LLM fact extraction is opt-in."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import anthropic
import pytest

from contextfold import ContextManager
from contextfold.compaction.summarizers import LLMSummarizer, SummaryRequest
from contextfold.core.messages import Message, check_view
from contextfold.core.wire import from_openai
from contextfold.errors import ContextOverflowError
from contextfold.providers.limits import WindowLearnedWarning, stated_limit
from contextfold.recovery.memory import ExtractiveFactExtractor, LLMFactExtractor
from contextfold.testing import OverflowingModel, ScriptedLLM, overflow_error
from tests.support.http_fakes import (
    FakeLLMServer,
    anthropic_message,
    anthropic_prompt_too_long,
    fake_llm_server_fixture,  # noqa: F401
)

SYSTEM = {"role": "system", "content": "You are a coding agent."}
TASK = {"role": "user", "content": "Please fix the bug in src/app.py."}


def turn(i: int, words: int = 200) -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": f"Step {i}.",
            "tool_calls": [
                {
                    "id": f"c{i}",
                    "type": "function",
                    "function": {"name": "bash", "arguments": json.dumps({"command": f"cat {i}"})},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": f"c{i}",
            "content": " ".join(f"w{i}x{j}" for j in range(words)),
        },
    ]


# --------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("message", "limit", "prompt", "completion"),
    [
        (
            "This model's maximum context length is 16384 tokens. However, your messages "
            "resulted in 17000 tokens. Please reduce the length of the messages.",
            16384,
            17000,
            None,
        ),
        ("prompt is too long: 210000 tokens > 200000 maximum", 200000, 210000, None),
        (
            "input length and `max_tokens` exceed context limit: 197626 + 8192 > 200000, "
            "decrease input length or `max_tokens` and try again",
            200000,
            197626,
            8192,
        ),
        (
            "This model's maximum context length is 4096 tokens. However, you requested 5000 "
            "tokens (4000 in the messages, 1000 in the completion).",
            4096,
            4000,
            1000,
        ),
        (
            "'max_tokens' or 'max_completion_tokens' is too large: 1000. This model's maximum "
            "context length is 4096 tokens and your request has 3500 input tokens (1000 > 4096 "
            "- 3500).",
            4096,
            3500,
            1000,
        ),
        (
            "The prompt (total length 40000) is too long to fit into the model (context length "
            "32768).",
            32768,
            40000,
            None,
        ),
        (
            "Input prompt (9000 tokens) is longer than the model's context length (8192)",
            8192,
            9000,
            None,
        ),
        (
            "The input token count (1200000) exceeds the maximum number of tokens allowed "
            "(1048576).",
            1048576,
            1200000,
            None,
        ),
    ],
)
def test_stated_limits_of_every_form(
    message: str, limit: int, prompt: int | None, completion: int | None
) -> None:
    stated = stated_limit(RuntimeError(message))
    assert stated is not None
    assert (stated.limit, stated.prompt_tokens, stated.completion_tokens) == (
        limit,
        prompt,
        completion,
    )


def test_stated_limits_through_the_real_sdk_exceptions() -> None:
    assert stated_limit(overflow_error("openai")).limit == 128_000  # type: ignore[union-attr]
    assert stated_limit(overflow_error("anthropic")).limit == 200_000  # type: ignore[union-attr]
    llamacpp = stated_limit(overflow_error("llamacpp"))  # n_ctx in the error body
    assert llamacpp is not None and (llamacpp.limit, llamacpp.prompt_tokens) == (32768, 40000)
    litellm = stated_limit(overflow_error("litellm"))  # LiteLLM wraps the provider's words
    assert litellm is not None and litellm.limit == 128_000 and litellm.kind == "litellm"
    vllm = stated_limit(overflow_error("vllm"))
    assert vllm is not None and vllm.prompt_window(0) == 32768 - 1000
    assert vllm.prompt_window(1000) == 32768
    assert stated_limit(overflow_error("ollama")) is None  # says no number
    # not an overflow: a rate limit mentioning tokens states no window
    assert stated_limit(RuntimeError("Rate limit: Limit 30000 tokens per min")) is None


# --------------------------------------------------------------------------- the session


@pytest.mark.parametrize("provider", ["openai", "anthropic", "vllm", "litellm"])
def test_the_window_is_learned_once_and_the_next_calls_fit(tmp_path: Path, provider: str) -> None:
    model = OverflowingModel(limit=6_000, provider=provider, reply="ok")
    cm = ContextManager(tmp_path, "w", 128_000)  # the user guessed the window wrong
    cm.add_many([SYSTEM, TASK])
    with pytest.warns(WindowLearnedWarning, match="lowered from 128000 to 6000") as caught:
        for i in range(40):
            cm.add_many(turn(i))
            cm.add({"role": "user", "content": f"next {i}"})
            assert cm.call(model) == {"role": "assistant", "content": "ok"}
            cm.add({"role": "assistant", "content": "ok"})
    # the warning names the caller's line, not a frame inside contextfold
    assert {w.filename for w in caught if w.category is WindowLearnedWarning} == {__file__}
    assert model.overflows == 1  # learned once: every later call fits
    assert cm.window == 6_000 and cm.configured_window == 128_000
    assert cm.learned_window is not None and "6000" in cm.learned_window.source
    assert max(model.token_counts[model.token_counts.index(max(model.token_counts)) + 1 :]) <= 6_000
    for sent in model.calls:
        check_view([from_openai(d, i) for i, d in enumerate(sent)])
    recovery = next(r for r in cm.records() if "overflow" in r.reason)
    said = [recovery.reason, *recovery.notes]
    assert any("context window lowered from 128000 to 6000" in n for n in said)
    # persisted with the compactor state: a reopened manager keeps it
    again = ContextManager(tmp_path, "w", 128_000)
    assert again.window == 6_000 and again.learned_window == cm.learned_window
    again.reset_window()
    assert again.window == 128_000
    assert ContextManager(tmp_path, "w", 128_000).window == 128_000


def test_the_retry_is_never_the_request_that_failed(tmp_path: Path) -> None:
    cm = ContextManager(tmp_path, "r", 128_000)
    cm.add_many([SYSTEM, TASK])
    for i in range(30):
        cm.add_many(turn(i))
    cm.add({"role": "user", "content": "and now?"})
    model = OverflowingModel(limit=4_000, provider="anthropic")
    with pytest.warns(WindowLearnedWarning):
        cm.call(model)
    failed, retry = model.calls
    assert json.dumps(failed) != json.dumps(retry)
    assert model.token_counts[1] <= 4_000 < model.token_counts[0]


def test_nothing_left_to_compact_raises_instead_of_resending(tmp_path: Path) -> None:
    cm = ContextManager(tmp_path, "n", 128_000)
    cm.add_many([SYSTEM, TASK])
    calls: list[str] = []

    def fn(view: list[dict[str, Any]]) -> None:
        calls.append(json.dumps(view))
        raise overflow_error("openai", "This model's maximum context length is 10 tokens.")

    with (
        pytest.warns(WindowLearnedWarning),
        pytest.raises(ContextOverflowError, match="nothing is left to compact"),
    ):
        cm.call(fn)
    assert len(calls) == 1  # the identical request was not sent again


def test_an_overflow_without_numbers_bounds_the_window_by_what_was_sent(tmp_path: Path) -> None:
    cm = ContextManager(tmp_path, "o", 128_000)
    cm.add_many([SYSTEM, TASK])
    for i in range(20):
        cm.add_many(turn(i))
    cm.add({"role": "user", "content": "go on"})
    sent = cm.view_tokens
    model = OverflowingModel(limit=3_000, provider="ollama")  # "the input length exceeds ..."
    with pytest.warns(WindowLearnedWarning, match="inferred"):
        cm.call(model)
    assert cm.window < sent < 128_000
    assert cm.learned_window is not None and cm.learned_window.source.startswith("inferred")


def test_the_anthropic_sdk_overflow_lowers_the_window(
    fake_llm_server: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm_server.enqueue(400, anthropic_prompt_too_long(used=210_000, limit=5_000))
    fake_llm_server.enqueue(200, anthropic_message("done"))
    client = anthropic.Anthropic(base_url=fake_llm_server.anthropic_base_url, api_key="t")
    cm = ContextManager(tmp_path, "a", 200_000)
    cm.add_many([SYSTEM, TASK])
    for i in range(20):
        cm.add_many(turn(i))
    cm.add({"role": "user", "content": "status?"})
    with pytest.warns(WindowLearnedWarning, match="prompt is too long"):
        reply = cm.call(
            lambda view: client.messages.create(model="claude-test", max_tokens=100, **view),
            format="anthropic",
        )
    assert reply.content[0].text == "done"  # type: ignore[union-attr]
    first, second = (r.json for r in fake_llm_server.requests)
    assert first != second and len(json.dumps(second)) < len(json.dumps(first))
    assert cm.window == 5_000
    assert cm.calibration.scale > 1.0  # the provider counted far more than was estimated


# --------------------------------------------------------------------------- the summarizer


def _request(n: int = 60) -> SummaryRequest:
    msgs: list[Message] = []
    for i in range(n):
        msgs.append(from_openai({"role": "user", "content": f"question {i} " + "word " * 120}))
        msgs.append(from_openai({"role": "assistant", "content": f"answer {i} " + "text " * 120}))
    return SummaryRequest(messages=msgs)


def test_summarizer_learns_its_models_window() -> None:
    model = OverflowingModel(limit=3_000, provider="openai", reply="### Summary\nok")
    summarizer = LLMSummarizer(model, context_window=32_000, max_summary_tokens=500)
    with pytest.warns(WindowLearnedWarning, match="context_window lowered from 32000 to 3000"):
        assert summarizer.summarize(_request())
    assert summarizer.context_window == 3_000 and model.overflows == 1
    assert all(t <= 3_000 for t in model.token_counts[1:])  # chunks shrank to fit
    before = model.overflows
    summarizer.summarize(_request(20))  # the lowered window stays: no new overflow
    assert model.overflows == before


def test_async_summarizer_learns_the_same_way() -> None:
    model = OverflowingModel(limit=3_000, provider="vllm", reply="### Summary\nok")
    summarizer = LLMSummarizer(model, context_window=32_000, max_summary_tokens=500)
    with pytest.warns(WindowLearnedWarning):
        assert asyncio.run(summarizer.asummarize(_request()))
    assert summarizer.context_window == 3_000 and model.overflows == 1


# --------------------------------------------------------------------------- fact extraction


def test_llm_fact_extraction_is_opt_in(tmp_path: Path) -> None:
    llm = ScriptedLLM(default="### Summary\nworked on the bug", strict=False)
    cm = ContextManager(tmp_path, "f", 4_000, summarizer=LLMSummarizer(llm, context_window=8_000))
    assert isinstance(cm.recovery.fact_extractor, ExtractiveFactExtractor)
    cm.add_many([SYSTEM, {"role": "user", "content": "You must never touch the database."}])
    for i in range(12):
        cm.add_many(turn(i, 120))
        cm.prepare()
    assert cm.last_record is not None and cm.last_record.changed
    # only summaries were asked for: no fact-extraction prompt went to the model
    assert llm.calls and not any("Extract durable facts" in json.dumps(c) for c in llm.calls)
    # the memory flush itself still ran (extractive facts)
    assert "never touch the database" in cm.recovery.memory.get()
    opted = ContextManager(
        tmp_path, "g", 4_000, summarizer=LLMSummarizer(llm), fact_extractor="llm"
    )
    assert isinstance(opted.recovery.fact_extractor, LLMFactExtractor)
