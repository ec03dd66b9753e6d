"""Evidence injection that picks the right thing: ordinals choose by position, what the view
still shows is never injected, and the recall tool ranks the same way (issue 16 part 5)."""

from __future__ import annotations

import json
import re

import pytest

from contextfold import ContextManager

SYSTEM = (
    "You are a helpful assistant that can interact with a computer.\n\nYour response must "
    "contain exactly ONE bash code block with ONE command (or commands connected with && or ||)."
)
TASK = (
    "Please solve this issue: Parsing a date with month 13 crashes instead of raising a clear "
    "error.\n\nYou can execute bash commands and edit files to implement the necessary changes."
)
FIRST_TB = (
    'Traceback (most recent call last):\n  File "/repo/reproduce.py", line 3, in <module>\n'
    '    parse("2024-13-01")\n  File "/repo/src/dates.py", line 42, in parse\n'
    "    month = MONTHS[m]\nKeyError: 13\n"
)
SECOND_TB = (
    'Traceback (most recent call last):\n  File "/repo/reproduce.py", line 3, in <module>\n'
    '    parse("2024-13-01")\n  File "/repo/src/dates.py", line 44, in parse\n'
    "    raise ValueError(month)\nValueError: None\n"
)
LISTING = "\n".join(f"def helper_{j}(): return {j}" for j in range(40))


def _text_step(cm: ContextManager, thought: str, command: str, rc: int, output: str) -> None:
    """One mini-swe-agent step: the action in a code block, the observation as user text."""
    cm.add(
        {
            "role": "assistant",
            "content": f"THOUGHT: {thought}\n\n```mswea_bash_command\n{command}\n```",
        }
    )
    cm.add(
        {"role": "user", "content": f"<returncode>{rc}</returncode>\n<output>\n{output}</output>"}
    )


def mini_session() -> ContextManager:
    """Two failing runs of reproduce.py, a fix, a passing run; compacted once."""
    cm = ContextManager(store="memory://", context_window=8_000)
    cm.add({"role": "system", "content": SYSTEM})
    cm.add({"role": "user", "content": TASK})
    _text_step(cm, "Reproduce the issue first.", "python reproduce.py", 1, FIRST_TB)
    for i in range(6):
        _text_step(cm, f"Read module {i}.", f"cat src/mod_{i}.py", 0, LISTING)
    _text_step(cm, "Run it again after the lookup change.", "python reproduce.py", 1, SECOND_TB)
    for i in range(6, 12):
        _text_step(cm, f"Read module {i}.", f"cat src/mod_{i}.py", 0, LISTING)
    _text_step(cm, "Fix it.", "sed -i 's/MONTHS\\[m\\]/month_of(m)/' src/dates.py", 0, "")
    _text_step(cm, "Check the fix.", "python reproduce.py", 0, "ok\n")
    cm.prepare()
    assert cm.compactor.state.compactions > 0
    assert FIRST_TB not in json.dumps(cm.view.view_dicts())  # both runs left the view
    return cm


def _injection(cm: ContextManager, question: str) -> str:
    cm.add({"role": "user", "content": question})
    view = cm.prepare()
    block = next((d for d in view if "Historical evidence restored" in str(d.get("content"))), None)
    assert block is not None, f"nothing injected for {question!r}"
    return str(block["content"])


def _items(text: str) -> list[str]:
    """The injected items' bodies, in order."""
    return re.split(r"\n\[\d+\] evidence ", text)[1:]


@pytest.mark.parametrize(
    ("question", "first"),
    [
        ("What was the error of the first failing run?", "KeyError: 13"),
        ("what was the traceback of the second failing run?", "ValueError: None"),
        ("What was the error of the last failing run?", "ValueError: None"),
        ("第一次运行失败的报错是什么？", "KeyError: 13"),
        ("上一次失败的报错是什么？", "ValueError: None"),
    ],
)
def test_ordinals_choose_by_position(question: str, first: str) -> None:
    cm = mini_session()
    text = _injection(cm, question)
    items = _items(text)
    assert items and first in items[0], text
    assert "Please solve this issue" not in text  # the pinned task is in view: never injected


def test_nothing_still_in_view_is_injected() -> None:
    cm = mini_session()
    text = _injection(cm, "What was the error of the first failing run?")
    shown = {m.uuid for m in cm.view_messages if not m.metadata.get("cf_replaced")}
    ids = re.findall(r"\[\d+\] evidence (ev-[0-9a-f]+)", text)
    assert ids
    for evidence_id in ids:
        pointer = cm.recovery.search.get(evidence_id)
        assert pointer is not None and pointer.message_uuid not in shown


def test_recall_tool_ranks_like_the_injection() -> None:
    cm = mini_session()
    question = "What was the error of the first failing run?"
    injected = re.findall(r"\[\d+\] evidence (ev-[0-9a-f]+)", _injection(cm, question))
    answer = cm.handle_tool_call(
        {
            "id": "call_r",
            "type": "function",
            "function": {"name": "recall", "arguments": json.dumps({"query": question})},
        }
    )
    recalled = re.findall(r"\n\[\d+\] (ev-[0-9a-f]+)", str(answer["content"]))
    assert recalled[: len(injected)] == injected
    assert "Please solve this issue" not in str(answer["content"])


def _tool_step(cm: ContextManager, i: int, command: str, output: str) -> None:
    cm.add(
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": f"toolu_{i}",
                    "type": "function",
                    "function": {"name": "Bash", "arguments": json.dumps({"command": command})},
                }
            ],
        }
    )
    cm.add({"role": "tool", "tool_call_id": f"toolu_{i}", "content": output})


def test_tool_call_agent_first_failing_run_and_run_before_the_fix() -> None:
    cm = ContextManager(store="memory://", context_window=8_000)
    cm.add(
        {"role": "system", "content": "You are Claude Code, Anthropic's official CLI for Claude."}
    )
    cm.add({"role": "user", "content": "Make reproduce.py stop crashing on month 13"})
    _tool_step(cm, 0, "python reproduce.py", "Exit code 1\n" + FIRST_TB)
    for i in range(1, 7):
        _tool_step(cm, i, f"cat src/mod_{i}.py", LISTING)
    _tool_step(cm, 7, "python reproduce.py", "Exit code 1\n" + SECOND_TB)
    _tool_step(cm, 8, "sed -i 's/raise ValueError(month)/raise ValueError(m)/' src/dates.py", "")
    for i in range(9, 15):
        _tool_step(cm, i, f"cat src/mod_{i}.py", LISTING)
    _tool_step(cm, 15, "python reproduce.py", "ok\n")
    cm.prepare()
    assert cm.compactor.state.compactions > 0
    reminder = (
        "<system-reminder>\nThe following agent types are available for use with the Task "
        "tool: general-purpose, Explore.\n</system-reminder>\n"
    )
    first = _items(_injection(cm, reminder + "What was the error of the first failing run?"))
    assert first and "KeyError: 13" in first[0]
    before = _items(_injection(cm, "What was the output of the run before the fix?"))
    assert before and "ValueError: None" in before[0]


def test_a_reminder_only_message_is_not_evidence() -> None:
    cm = ContextManager(store="memory://", context_window=8_000)
    cm.add(
        {"role": "system", "content": "You are Claude Code, Anthropic's official CLI for Claude."}
    )
    cm.add({"role": "user", "content": "Make reproduce.py stop crashing on month 13"})
    cm.add(
        {
            "role": "user",
            "content": "<system-reminder>\nThe following agent types are available for use "
            "with the Task tool: general-purpose, Explore.\n</system-reminder>",
        }
    )
    for i in range(14):
        _tool_step(cm, i, f"cat src/mod_{i}.py", LISTING)
    cm.prepare()
    assert cm.compactor.state.compactions > 0
    hits = cm.recovery.search.search("which agent types are available for the Task tool?", k=5)
    assert all("agent types" not in h.text_preview for h in hits)


def _mini_json_step(cm: ContextManager, i: int, command: str, rc: int, output: str) -> None:
    """One step of mini-swe-agent 2.x with tool calls: a ``bash`` call, the observation a JSON
    object (``{"returncode": ..., "output": ...}``) whose output string escapes its newlines."""
    cm.add(
        {
            "role": "assistant",
            "content": f"Step {i}: running it.",
            "tool_calls": [
                {
                    "id": f"call_task_{i}",
                    "type": "function",
                    "function": {"name": "bash", "arguments": json.dumps({"command": command})},
                }
            ],
        }
    )
    observation = json.dumps({"returncode": rc, "output": output}, indent=2)
    cm.add({"role": "tool", "tool_call_id": f"call_task_{i}", "content": observation})


def _build_log(k: int, error: str) -> str:
    lines = [f"run {k} step {j:05d}: compiled module_{j % 60:02d} ok" for j in range(60)]
    if error:
        lines += ["Traceback (most recent call last):", '  File "run.py", line 21, in <module>']
        lines.append(error)
    return "\n".join(lines) + "\n"


def test_mini_json_observations_first_failing_run_of_the_whole_session() -> None:
    """Runs 2, 5, 8 and 11 fail; the newest failing runs are still in view or offloaded, the
    first left the view long ago: "the first failing run" is run 2, by position in the whole
    history, and the query is the user's question without mini's "new task" wrapper."""
    cm = ContextManager(store="memory://", context_window=8_000)
    cm.add({"role": "system", "content": SYSTEM})
    cm.add({"role": "user", "content": TASK})
    errors = {k: f"ValueError: run {k} failed: checksum mismatch CF{k:04d}" for k in (2, 5, 8, 11)}
    for k in range(12):
        _mini_json_step(
            cm,
            k,
            f"python3 run.py {k} 8",
            1 if k in errors else 0,
            _build_log(k, errors.get(k, "")),
        )
        cm.prepare()
    assert cm.compactor.state.compactions > 0
    assert errors[2] not in json.dumps(cm.view.view_dicts())  # the first one left the view
    question = "What was the exact error of the first failing run? Quote the error line."
    text = _injection(cm, "The user added a new task: " + question)
    assert "Query: " + question in text
    items = _items(text)
    assert items and "python3 run.py 2 8" in items[0] and errors[2] in items[0], text
    recalled = cm.recovery.search.search("error of the first failing run: ValueError", k=3)
    assert recalled and recalled[0].pointer.command == "python3 run.py 2 8"
