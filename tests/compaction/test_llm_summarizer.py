"""LLMSummarizer: prompts, replies, failures, chunking, and the SDK-backed convenience classes."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from contextfold.compaction.summarizers.base import Summarizer, SummaryRequest
from contextfold.compaction.summarizers.llm import (
    DEFAULT_SYSTEM_PROMPT,
    AnthropicSummarizer,
    LLMSummarizer,
    OpenAICompatibleSummarizer,
)
from contextfold.core.anchors import FIRST_TEMPLATE, Anchor, AnchorType
from contextfold.core.messages import Message, ToolCall, assistant, tool, user
from contextfold.core.wire import messages_from_openai
from contextfold.errors import ConfigError, SummarizerError
from contextfold.testing import ScriptedLLM, overflow_error
from tests.conftest import load_trace, trace_files
from tests.support.http_fakes import (
    FakeLLMServer,
    anthropic_message,
    fake_llm_server_fixture,  # noqa: F401
    openai_completion,
)

SUMMARY = "### User Intent\n- fix the parser\n## Summary\nThe parser was fixed."


def _history() -> list[Message]:
    return [
        user("Please fix the date parser in utils.py"),
        assistant(
            "Looking at the file.",
            [ToolCall(id="c1", name="read_file", arguments='{"path": "utils.py"}')],
        ),
        tool("c1", "def parse(s): return s"),
        assistant("Fixed: parse now handles ISO dates."),
    ]


def _prompt_tokens(summarizer: LLMSummarizer, call: list[dict[str, Any]]) -> int:
    return sum(summarizer.counter.count_text(m["content"]) + 8 for m in call)


def _numbered_summaries(n: int) -> list[Callable[[list[dict[str, Any]]], str]]:
    def make(i: int) -> Callable[[list[dict[str, Any]]], str]:
        return lambda messages: f"### User Intent\n- SUMMARY-{i}\n## Summary\nchunk {i} done"

    return [make(i) for i in range(1, n + 1)]


def test_single_call_prompt_and_reply() -> None:
    with ScriptedLLM([f"  {SUMMARY}\n\n"]) as llm:
        summarizer = LLMSummarizer(llm, max_summary_tokens=700)
        assert isinstance(summarizer, Summarizer)
        out = summarizer.summarize(SummaryRequest(messages=_history()))
    assert out == SUMMARY
    (call,) = llm.calls
    assert call[0] == {"role": "system", "content": DEFAULT_SYSTEM_PROMPT}
    prompt = call[1]["content"]
    assert call[1]["role"] == "user"
    assert prompt.startswith(FIRST_TEMPLATE.split("\n")[0])
    assert "Please fix the date parser" in prompt
    assert "read_file" in prompt and "def parse(s)" in prompt
    assert llm.max_tokens == [700]


def test_previous_summary_uses_the_incremental_prompt_and_custom_prompt() -> None:
    request = SummaryRequest(messages=_history(), previous_summary="OLD-SUMMARY-TEXT")
    with ScriptedLLM([SUMMARY, "custom reply"]) as llm:
        summarizer = LLMSummarizer(llm, system_prompt=None)
        summarizer.summarize(request)
        custom = SummaryRequest(messages=_history(), prompt="Summarize briefly:\n{messages}")
        assert summarizer.summarize(custom) == "custom reply"
    first, second = llm.calls
    assert len(first) == 1  # no system prompt
    assert "OLD-SUMMARY-TEXT" in first[0]["content"]
    assert second[0]["content"].startswith("Summarize briefly:\n[user]: Please fix")


@pytest.mark.parametrize("reply", ["", "   \n\t ", "<think>only reasoning</think>\n"])
def test_empty_reply_is_a_summarizer_error(reply: str) -> None:
    with ScriptedLLM([reply]) as llm, pytest.raises(SummarizerError, match="empty summary"):
        LLMSummarizer(llm).summarize(SummaryRequest(messages=_history()))


def test_reasoning_blocks_are_removed() -> None:
    with ScriptedLLM([f"<think>\nlet me think\n</think>\n{SUMMARY}"]) as llm:
        assert LLMSummarizer(llm).summarize(SummaryRequest(messages=_history())) == SUMMARY


def test_model_failure_is_wrapped_with_its_cause() -> None:
    boom = ConnectionError("server went away")
    with (
        ScriptedLLM([boom]) as llm,
        pytest.raises(SummarizerError, match="server went away") as info,
    ):
        LLMSummarizer(llm).summarize(SummaryRequest(messages=_history()))
    assert info.value.__cause__ is boom


def test_no_messages_is_an_error() -> None:
    with ScriptedLLM() as llm, pytest.raises(SummarizerError, match="no messages"):
        LLMSummarizer(llm).summarize(SummaryRequest(messages=()))
    assert llm.calls == []


def test_config_validation() -> None:
    llm = ScriptedLLM()
    with pytest.raises(ConfigError, match="leaves only"):
        LLMSummarizer(llm, context_window=2_000, max_summary_tokens=1_800)
    with pytest.raises(ConfigError, match="context_window"):
        LLMSummarizer(llm, context_window=0)
    with pytest.raises(ConfigError, match="complete"):
        LLMSummarizer(object())  # type: ignore[arg-type]


# --------------------------------------------------------------------------- chunking


def _big_history(total_tokens: int, counter: Any) -> list[Message]:
    """User/assistant/tool turns with a unique marker each, about ``total_tokens`` in all."""
    messages: list[Message] = []
    i = 0
    words = "the quick brown fox jumps over the lazy dog while the parser keeps failing "
    while sum(counter.count_text(m.text) for m in messages) < total_tokens:
        body = f"MSG-{i:04d} " + words * 12
        if i % 3 == 0:
            messages.append(user(body))
        elif i % 3 == 1:
            messages.append(
                assistant(body, [ToolCall(id=f"c{i}", name="bash", arguments='{"cmd": "pytest"}')])
            )
        else:
            messages.append(tool(f"c{i - 1}", body))
        i += 1
    return messages


def test_history_five_times_the_window_is_summarized_in_chunks_that_fit() -> None:
    window, reply = 4_000, 400
    llm = ScriptedLLM(_numbered_summaries(40), strict=False)
    summarizer = LLMSummarizer(llm, context_window=window, max_summary_tokens=reply)
    history = _big_history(5 * window, summarizer.counter)
    out = summarizer.summarize(SummaryRequest(messages=history))

    calls = llm.calls
    assert len(calls) >= 6
    assert out == f"### User Intent\n- SUMMARY-{len(calls)}\n## Summary\nchunk {len(calls)} done"
    for call in calls:
        assert _prompt_tokens(summarizer, call) <= window - reply
    prompts = llm.prompts
    # Chunk k>1 merges into the summary of chunk k-1 (the incremental template).
    assert "SUMMARY-" not in prompts[0]
    for k in range(1, len(prompts)):
        assert f"SUMMARY-{k}\n" in prompts[k]
        assert "<previous-compaction>" in prompts[k]
    # Every message appears whole, in exactly one prompt, in order.
    seen = [int(n) for p in prompts for n in re.findall(r"MSG-(\d{4})", p)]
    assert seen == list(range(len(history)))
    for msg in history:
        holders = [p for p in prompts if msg.text.strip() in p]
        assert len(holders) == 1


def test_a_single_huge_message_is_cut_to_fit_with_a_marker() -> None:
    window, reply = 3_000, 300
    with ScriptedLLM(_numbered_summaries(3)) as llm:
        summarizer = LLMSummarizer(llm, context_window=window, max_summary_tokens=reply)
        huge = "HEAD-OF-MESSAGE " + "lorem ipsum dolor sit amet " * 3_000 + " TAIL-OF-MESSAGE"
        args = '{"content": "' + "x" * 40_000 + '"}'
        history = [
            user("short question"),
            user(huge),
            assistant(None, [ToolCall(id="w1", name="write_file", arguments=args)]),
        ]
        summarizer.summarize(SummaryRequest(messages=history))
    for call in llm.calls:
        assert _prompt_tokens(summarizer, call) <= window - reply
    joined = "\n".join(llm.prompts)
    assert "HEAD-OF-MESSAGE" in joined and "TAIL-OF-MESSAGE" in joined
    assert joined.count("cut so this message fits the summarizer's context window") >= 2
    assert "short question" in llm.prompts[0]


def test_previous_summary_is_only_the_start_of_the_chain() -> None:
    llm = ScriptedLLM(_numbered_summaries(40), strict=False)
    summarizer = LLMSummarizer(llm, context_window=4_000, max_summary_tokens=400)
    anchors = (Anchor(type=AnchorType.USER_INTENT, content="- ANCHOR-FROM-BEFORE"),)
    request = SummaryRequest(
        messages=_big_history(12_000, summarizer.counter),
        previous_summary="EARLIER-COMPACTION",
        previous_anchors=anchors,
    )
    summarizer.summarize(request)
    prompts = llm.prompts
    assert len(prompts) >= 3
    assert "EARLIER-COMPACTION" in prompts[0]
    assert all("EARLIER-COMPACTION" not in p for p in prompts[1:])
    assert all("ANCHOR-FROM-BEFORE" not in p for p in prompts[1:])


def test_overflow_from_the_summarizer_model_shrinks_the_budget_and_retries() -> None:
    llm = ScriptedLLM([overflow_error("vllm"), *_numbered_summaries(40)], strict=False)
    summarizer = LLMSummarizer(llm, context_window=8_000, max_summary_tokens=500)
    history = _big_history(6_000, summarizer.counter)
    out = summarizer.summarize(SummaryRequest(messages=history))
    assert out.startswith("### User Intent")
    first, *rest = llm.calls
    assert len(rest) >= 2  # the rejected prompt was repacked into smaller chunks
    assert all(_prompt_tokens(summarizer, c) < _prompt_tokens(summarizer, first) for c in rest)


def test_persistent_overflow_gives_up_with_the_cause() -> None:
    llm = ScriptedLLM([overflow_error("anthropic")] * 3)
    summarizer = LLMSummarizer(llm, overflow_retries=2)
    with llm, pytest.raises(SummarizerError, match="context overflow") as info:
        summarizer.summarize(SummaryRequest(messages=_history()))
    assert type(info.value.__cause__).__name__ == "BadRequestError"


def test_a_real_trace_fits_a_small_summarizer_window() -> None:
    path = max(trace_files(), key=lambda p: p.stat().st_size)
    history = messages_from_openai(load_trace(path))
    llm = ScriptedLLM(_numbered_summaries(500), strict=False)
    summarizer = LLMSummarizer(llm, context_window=8_000, max_summary_tokens=1_000)
    summarizer.summarize(SummaryRequest(messages=history))
    assert len(llm.calls) >= 2
    for call in llm.calls:
        assert _prompt_tokens(summarizer, call) <= 8_000 - 1_000


# --------------------------------------------------------------------------- real SDKs


def test_openai_compatible_summarizer_against_a_local_server(
    fake_llm_server: FakeLLMServer,
) -> None:
    fake_llm_server.enqueue(200, openai_completion(SUMMARY))
    summarizer = OpenAICompatibleSummarizer(
        model="qwen3:8b", base_url=fake_llm_server.openai_base_url, context_window=16_000
    )
    assert summarizer.summarize(SummaryRequest(messages=_history())) == SUMMARY
    sent = fake_llm_server.requests[0].json
    assert sent["model"] == "qwen3:8b"
    assert sent["max_tokens"] == 2_000 and sent["temperature"] == 0.0
    assert [m["role"] for m in sent["messages"]] == ["system", "user"]
    assert "Please fix the date parser" in sent["messages"][1]["content"]


def test_openai_compatible_summarizer_empty_choice_is_an_error(
    fake_llm_server: FakeLLMServer,
) -> None:
    fake_llm_server.enqueue(200, openai_completion("", finish_reason="length"))
    summarizer = OpenAICompatibleSummarizer(model="m", base_url=fake_llm_server.openai_base_url)
    with pytest.raises(SummarizerError, match="'length'"):
        summarizer.summarize(SummaryRequest(messages=_history()))


def test_anthropic_summarizer_against_a_local_server(fake_llm_server: FakeLLMServer) -> None:
    fake_llm_server.enqueue(200, anthropic_message(SUMMARY))
    summarizer = AnthropicSummarizer(
        model="claude-test", api_key="k", base_url=fake_llm_server.anthropic_base_url
    )
    assert summarizer.summarize(SummaryRequest(messages=_history())) == SUMMARY
    sent = fake_llm_server.requests[0].json
    assert sent["system"] == DEFAULT_SYSTEM_PROMPT
    assert sent["max_tokens"] == 2_000
    assert [m["role"] for m in sent["messages"]] == ["user"]
