"""Seed 002 2.3: long write_file/edit_file arguments are truncated only in the text sent to
the summarizer; the arguments stay valid JSON there and the full history never changes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contextfold import ContextManager
from contextfold.compaction.summarizers.llm import LLMSummarizer
from contextfold.core.config import ContextConfig, SummaryTriggerConfig, TruncateArgsConfig, harness
from contextfold.testing import ScriptedLLM
from tests.support.store_helpers import log_lines

MARK = "... [truncated] ..."
REPLY = (
    "## SESSION INTENT\nWrite the module.\n\n## SUMMARY\nWrote files.\n\n"
    "## ARTIFACTS\n- big.py\n\n## NEXT STEPS\n- test it\n"
)
BIG = "".join(f"def f{i}():\n    return {i}\n" for i in range(400))  # ~10,000 chars
OLD = "old_line = 1\n" * 300  # ~3,900 chars
NEW = "new_line = 2\n" * 300


class QuarterCounter:
    name = "quarter"

    def count_text(self, text: str) -> int:
        return len(text) // 4


def call(call_id: str, name: str, args: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": f"Calling {name}.",
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": f"{name} done"},
    ]


HEAD: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Write the module big.py and fix util.py."},
    *call("w1", "write_file", {"path": "big.py", "content": BIG}),
    *call("e1", "edit_file", {"path": "util.py", "edits": [{"old": OLD, "new": NEW}]}),
    *call("w2", "write_file", {"path": "small.py", "content": "x = 1\n"}),
    *call("b1", "bash", {"command": "echo " + "z" * 5_000}),
]


def transcript_args(prompt: str, call_id: str) -> tuple[str, Any]:
    """The raw JSON text of a tool call's arguments in a summarizer transcript, parsed."""
    marker = f"(id={call_id})]: "
    start = prompt.index(marker) + len(marker)
    value, end = json.JSONDecoder().raw_decode(prompt, start)
    return prompt[start:end], value


def run(tmp_path: Path, config: ContextConfig) -> tuple[ContextManager, ScriptedLLM]:
    llm = ScriptedLLM(default=REPLY)
    cm = ContextManager(
        workspace=tmp_path,
        session_id="a",
        context_window=200_000,
        token_counter=QuarterCounter(),
        config=config,
        summarizer=LLMSummarizer(llm, context_window=100_000),
        fact_extractor="extractive",
    )
    cm.add_many(HEAD)
    for i in range(3):
        cm.add_many(call(f"t{i}", "bash", {"command": f"pytest -k {i}"}))
    cm.prepare()
    assert cm.last_prepare is not None and cm.last_prepare.changed, cm.last_prepare
    summary_prompts = [p for p in llm.prompts if "Conversation:" in p or "<<<" in p]
    assert len(summary_prompts) == 1
    return cm, llm


TRIGGER = SummaryTriggerConfig(trigger_messages=16, keep_messages=4)


def test_summarizer_sees_truncated_but_valid_json(tmp_path: Path) -> None:
    _, llm = run(tmp_path, harness(summary=TRIGGER, truncate_args=TruncateArgsConfig()))
    prompt = llm.prompts[0]
    raw, args = transcript_args(prompt, "w1")
    assert args["path"] == "big.py"
    content = args["content"]
    assert MARK in content
    assert len(content) == 2_000
    head, tail = content.split(MARK)
    assert BIG.startswith(head) and BIG.endswith(tail)
    assert len(raw) < 2_200
    assert BIG not in prompt
    # edit_file: the strings nested inside the JSON are truncated one by one
    _, edit = transcript_args(prompt, "e1")
    assert edit["path"] == "util.py"
    assert MARK in edit["edits"][0]["old"] and MARK in edit["edits"][0]["new"]
    assert len(edit["edits"][0]["old"]) == 2_000
    # short arguments and other tools are untouched
    _, small = transcript_args(prompt, "w2")
    assert small == {"path": "small.py", "content": "x = 1\n"}
    _, bash = transcript_args(prompt, "b1")
    assert bash == {"command": "echo " + "z" * 5_000}


def test_full_history_and_log_keep_the_full_arguments(tmp_path: Path) -> None:
    cm, _ = run(tmp_path, harness(summary=TRIGGER, truncate_args=TruncateArgsConfig()))
    w1 = next(m for m in cm.history if m.tool_calls and m.tool_calls[0].id == "w1")
    assert w1.tool_calls[0].parsed_arguments() == {"path": "big.py", "content": BIG}
    e1 = next(m for m in cm.history if m.tool_calls and m.tool_calls[0].id == "e1")
    assert e1.tool_calls[0].parsed_arguments()["edits"][0] == {"old": OLD, "new": NEW}
    entries = log_lines(tmp_path, "a")
    assert MARK not in json.dumps(entries)
    assert [e["message"] for e in entries[: len(HEAD)]] == HEAD
    reopened = ContextManager(
        workspace=tmp_path, session_id="a", token_counter=QuarterCounter(), config=harness()
    )
    assert [m.tool_calls for m in reopened.history] == [m.tool_calls for m in cm.history]


def test_view_tail_keeps_full_arguments(tmp_path: Path) -> None:
    """Truncation is only for the summarizer: a write_file call still in the view is intact."""
    llm = ScriptedLLM(default=REPLY)
    cm = ContextManager(
        workspace=tmp_path,
        session_id="a",
        token_counter=QuarterCounter(),
        config=harness(summary=TRIGGER, truncate_args=TruncateArgsConfig()),
        summarizer=LLMSummarizer(llm, context_window=100_000),
        fact_extractor="extractive",
    )
    cm.add_many(HEAD)
    for i in range(2):
        cm.add_many(call(f"t{i}", "bash", {"command": f"pytest -k {i}"}))
    tail = call("w9", "write_file", {"path": "late.py", "content": BIG})
    cm.add_many(tail)
    view = cm.prepare()
    assert cm.last_prepare is not None and cm.last_prepare.changed
    assert view[-2:] == tail


def test_truncation_off_sends_the_full_arguments(tmp_path: Path) -> None:
    _, llm = run(tmp_path, harness(summary=TRIGGER, truncate_args=None))
    prompt = llm.prompts[0]
    _, args = transcript_args(prompt, "w1")
    assert args["content"] == BIG
    assert MARK not in prompt


def test_custom_tools_length_and_text(tmp_path: Path) -> None:
    cfg = TruncateArgsConfig(tools=("bash",), max_arg_length=100, truncation_text="<CUT>")
    _, llm = run(tmp_path, harness(summary=TRIGGER, truncate_args=cfg))
    prompt = llm.prompts[0]
    _, bash = transcript_args(prompt, "b1")
    assert "<CUT>" in bash["command"] and len(bash["command"]) == 100
    _, w1 = transcript_args(prompt, "w1")
    assert w1["content"] == BIG  # write_file is no longer in the list


def test_progressive_preset_truncates_for_its_summarizer_too(tmp_path: Path) -> None:
    llm = ScriptedLLM(default=REPLY)
    cm = ContextManager(
        workspace=tmp_path,
        session_id="a",
        context_window=200_000,
        token_counter=QuarterCounter(),
        summarizer=LLMSummarizer(llm, context_window=100_000),
        fact_extractor="extractive",
    )
    cm.add_many(HEAD)
    for i in range(3):
        cm.add_many(call(f"t{i}", "bash", {"command": f"pytest -k {i}"}))
    cm.compact(force=True)
    assert len(llm.calls) == 1
    _, args = transcript_args(llm.prompts[0], "w1")
    assert MARK in args["content"] and len(args["content"]) == 2_000
    assert cm.history[2].tool_calls[0].parsed_arguments()["content"] == BIG


@pytest.mark.parametrize("length", [1_999, 2_000])
def test_arguments_at_the_limit_are_not_truncated(tmp_path: Path, length: int) -> None:
    llm = ScriptedLLM(default=REPLY)
    cm = ContextManager(
        workspace=tmp_path,
        session_id="a",
        token_counter=QuarterCounter(),
        config=harness(summary=TRIGGER, truncate_args=TruncateArgsConfig()),
        summarizer=LLMSummarizer(llm, context_window=100_000),
        fact_extractor="extractive",
    )
    value = "c" * length
    cm.add_many(HEAD[:2] + call("w0", "write_file", {"path": "p.py", "content": value}))
    for i in range(7):
        cm.add_many(call(f"t{i}", "bash", {"command": f"pytest -k {i}"}))
    cm.prepare()
    _, args = transcript_args(llm.prompts[0], "w0")
    assert args["content"] == value
