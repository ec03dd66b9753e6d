"""The scripted model for mini-swe-agent: OpenAI Chat Completions answers (through LiteLLM)
with its one ``bash`` tool, every answer one command as its default config demands, finishing
with ``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``; tool call ids ``call_<phase>_<n>`` tell
the script where it is."""

from __future__ import annotations

import json
import re

from tests.agents.plan import FOLLOWUP, Plan, Step, first_error, recall_query
from tests.gateway.gateway_fakes import Call, Reply

_ID = re.compile(r"call_(task|ask)_(\d+)")
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def shell_command(step: Step) -> str:
    """A plan step as one shell command (agents whose only tool is a shell)."""
    if step.kind == "read":
        return f"cat {step.path}"
    if step.kind == "edit":
        return f"sed -i 's/{step.old}/{step.new}/' {step.path}"
    return step.command


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


class MiniScript:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.followups: list[str] = []
        self.recalled = False

    def _bash(self, phase: str, n: int, command: str, text: str = "") -> Reply:
        return Reply(
            text=text or f"Step {n}: running it.",
            tool_calls=[(f"call_{phase}_{n}", "bash", {"command": command})],
        )

    def __call__(self, call: Call) -> Reply:
        msgs = call.messages
        users = [m for m in msgs if m.get("role") == "user"]
        if users and FOLLOWUP in _text(users[-1].get("content")):
            return self._answer(call)
        results = call.last_tool_results()
        match = _ID.fullmatch(results[-1][0]) if results else None
        n = int(match.group(2)) + 1 if match else 0
        if n < len(self.plan.steps):
            return self._bash("task", n, shell_command(self.plan.steps[n]))
        return self._bash("task", n, SUBMIT, "All build steps ran; app.py is fixed.")

    def _answer(self, call: Call) -> Reply:
        text = json.dumps(call.body, ensure_ascii=False)
        self.followups.append(text)
        if first_error() in text:
            return self._bash(
                "ask", 2, SUBMIT, f"The first failing run ended with: {first_error()}"
            )
        results = call.last_tool_results()
        asked = bool(results) and results[-1][0] == "call_ask_1"
        if "recall" in call.tool_names() and not asked:
            self.recalled = True
            return Reply(tool_calls=[("call_ask_1", "recall", {"query": recall_query()})])
        return self._bash("ask", 2, SUBMIT, "I cannot see the first failing run any more.")
