"""Shared by the framework integration tests: a scripted agent over real trace tool outputs,
the checks every request must pass, and the skip-or-fail rule for optional packages."""

from __future__ import annotations

import importlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from contextfold.core.messages import check_view
from contextfold.core.wire import messages_from_openai
from contextfold.errors import InvalidMessageError
from contextfold.testing import message_tokens
from tests.conftest import TRACES_DIR, load_trace

#: the trajectory whose tool outputs the agents replay (93 outputs, ~70K characters)
TRACE = "deepseek__output_deepseek_chat_dev_pydicom__pydicom-1413_pydicom__pydicom-1413.json"
TURNS = 64  # tool-calling turns before the recall
WINDOW = 6_000
OVERFLOW_AT = 40  # the model call that fails once with a context-overflow error
PARALLEL_EVERY = 7  # work turns t with t % 7 == 3 make two tool calls at once
PARALLEL_TURNS = sum(1 for t in range(TURNS) if t % PARALLEL_EVERY == 3)


def require(module: str) -> Any:
    """Import an optional framework; skip the module visibly, or fail under
    CONTEXTFOLD_REQUIRE_ALL=1 (like ``tests.conftest.require_module``, usable at module level)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        reason = f"{module} is not installed ({exc}); install the matching contextfold extra"
        if os.environ.get("CONTEXTFOLD_REQUIRE_ALL") == "1":
            pytest.fail(f"required in CI but unavailable: {reason}", pytrace=False)
        pytest.skip(reason, allow_module_level=True)


@dataclass(frozen=True)
class Step:
    command: str
    output: str


def trace_steps() -> tuple[str, str, list[Step]]:
    """(system prompt, task, tool steps) of the trajectory: each command with its real output."""
    msgs = load_trace(TRACES_DIR / TRACE)
    system = str(msgs[0]["content"])
    task = str(msgs[1]["content"])
    commands: dict[str, str] = {}
    steps: list[Step] = []
    for m in msgs:
        for call in m.get("tool_calls") or []:
            commands[call["id"]] = call["function"]["arguments"]
        if m.get("role") == "tool" and isinstance(m.get("content"), str):
            raw = commands.get(m["tool_call_id"], "{}")
            try:
                cmd = str(json.loads(raw).get("command", raw))
            except (ValueError, AttributeError):
                cmd = raw
            steps.append(Step(cmd, m["content"]))
    return system, task, steps


def recall_target(steps: Sequence[Step]) -> int:
    """An early step with a distinctive, medium-sized output (it leaves the view)."""
    for i, step in enumerate(steps[:20]):
        medium = 800 <= len(step.output) <= 15_000 and step.output.count("\n") > 5
        if medium and sum(s.output == step.output for s in steps) == 1:
            return i
    raise AssertionError("no suitable recall target in the trace")


_EVIDENCE = re.compile(r"\[(\d+)\] (ev-[0-9a-f]+) .*?command: (.*?) · ")


@dataclass
class AgentScript:
    """What the scripted model does on each call, framework-neutral.

    Call ``next_action(last_tool_text)``: a tool call ``("run_command", args)``, a recall, or
    the final answer ``("final", text)``. Model calls that must fail raise from the adapter.
    """

    steps: list[Step]
    target: int
    turn: int = 0
    phase: str = "work"
    recalled: str | None = None
    log: list[str] = field(default_factory=list)

    def next_calls(self, last_tool_text: str | None) -> list[tuple[str, dict[str, Any]]]:
        """The next response: one or (on some work turns) two parallel tool calls, or the final
        answer ``[("final", {"text": ...})]``."""
        turn = self.turn
        calls = [self.next_action(last_tool_text)]
        if calls[0][0] == "run_command" and turn % PARALLEL_EVERY == 3:
            extra = TURNS + turn // PARALLEL_EVERY  # outputs the loop does not use otherwise
            calls.append(("run_command", {"step": extra, "command": self.steps[extra].command}))
        return calls

    def next_action(self, last_tool_text: str | None) -> tuple[str, dict[str, Any]]:
        if self.phase == "work":
            i = self.turn
            self.turn += 1
            if self.turn >= TURNS:
                self.phase = "search"
            return "run_command", {"step": i, "command": self.steps[i].command}
        if self.phase == "search":
            self.phase = "fetch"
            return "recall", {"query": self.steps[self.target].command, "k": 5}
        if self.phase == "fetch":
            self.phase = "answer"
            wanted = self.steps[self.target].command
            for _rank, ev_id, command in _EVIDENCE.findall(last_tool_text or ""):
                if command.strip() and command.strip() in wanted:
                    return "recall", {"query": wanted, "evidence_id": ev_id, "max_chars": 200_000}
            raise AssertionError(f"recall found no hit for {wanted!r}: {last_tool_text!r}")
        self.recalled = last_tool_text
        self.phase = "done"
        return "final", {"text": "Done: the earlier output is recalled."}


def run_command_output(steps: Sequence[Step], step: int) -> str:
    return steps[int(step)].output


def check_request(messages: Sequence[Mapping[str, Any]], window: int, what: str) -> int:
    """Every tool result has its call and vice versa, and the request fits the window."""
    try:
        check_view(messages_from_openai([dict(m) for m in messages]))
    except InvalidMessageError as exc:
        raise AssertionError(f"{what}: not provider-valid: {exc}") from None
    tokens = message_tokens(messages)
    assert tokens <= window, f"{what}: {tokens} tokens > window {window}"
    return tokens
