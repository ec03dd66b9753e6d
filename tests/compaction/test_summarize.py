"""The extractive summary of a long range reads its head and its newest messages only."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from contextfold import ContextManager
from contextfold.compaction.summarize import EXTRACTIVE_HEAD, EXTRACTIVE_TAIL, extractive_span
from contextfold.compaction.summarizers.base import SummaryRequest
from contextfold.compaction.summarizers.extractive import ExtractiveSummarizer
from contextfold.core.messages import user


def test_extractive_span_keeps_short_ranges_whole() -> None:
    msgs = [user(f"m{i}") for i in range(EXTRACTIVE_HEAD + EXTRACTIVE_TAIL)]
    assert extractive_span(msgs) is msgs


def test_extractive_span_never_parts_a_call_from_its_result() -> None:
    from contextfold.core.messages import ToolCall, assistant, tool

    msgs = []
    for i in range(2_000):
        msgs += [
            assistant("", [ToolCall(id=f"c{i}", name="bash", arguments="{}")]),
            tool(f"c{i}", "x"),
        ]
    span = extractive_span(msgs)
    assert span[EXTRACTIVE_HEAD - 1].role == "tool" or span[EXTRACTIVE_HEAD].role != "tool"
    assert all(m.role != "tool" or span[j - 1].tool_calls for j, m in enumerate(span) if j), (
        "a result lost its call"
    )


def test_extractive_span_of_a_long_range_is_its_head_and_tail() -> None:
    msgs = [user(f"m{i}") for i in range(5_000)]
    span = extractive_span(msgs)
    assert len(span) == EXTRACTIVE_HEAD + EXTRACTIVE_TAIL
    assert span[0] is msgs[0] and span[EXTRACTIVE_HEAD - 1] is msgs[EXTRACTIVE_HEAD - 1]
    assert span[-1] is msgs[-1] and span[EXTRACTIVE_HEAD] is msgs[-EXTRACTIVE_TAIL]


def test_a_long_first_request_is_summarized_from_its_head_and_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int] = []
    real = ExtractiveSummarizer.summarize

    def spy(self: ExtractiveSummarizer, request: SummaryRequest) -> str:
        seen.append(len(request.messages))
        return real(self, request)

    monkeypatch.setattr(ExtractiveSummarizer, "summarize", spy)
    msgs: list[dict[str, object]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing tests of the parser package."},
    ]
    for i in range(2_000):
        args = json.dumps({"command": f"pytest -k case{i}"})
        call = {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": args}}
        msgs.append({"role": "assistant", "content": "", "tool_calls": [call]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"run {i}: 1 failed"})
    msgs.append({"role": "user", "content": "Please go on."})
    cm = ContextManager(workspace=tmp_path, session_id="s", context_window=16_000)
    cm.add_many(msgs)
    view = cm.prepare()
    assert seen and max(seen) <= EXTRACTIVE_HEAD + EXTRACTIVE_TAIL + 2  # a call keeps its result
    text = json.dumps(view)
    # the summary counts the whole range, not only what it read
    assert re.search(r"Compacted (\d+) messages", text)
    assert int(re.search(r"Compacted (\d+) messages", text).group(1)) > 3_000  # type: ignore[union-attr]
    assert "Fix the failing tests of the parser package." in text
    assert "Please go on." in text
    # what the summary did not read is still recoverable
    assert cm.recover_tool_result("c500") == "run 500: 1 failed"
