"""The scripted model for Codex CLI: OpenAI Responses answers with Codex's ``exec_command``
function calls; call ids ``call_<phase>_<n>`` tell the script where it is."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.agents.mini_script import shell_command
from tests.agents.plan import DONE, FOLLOWUP, Plan, first_error, recall_query
from tests.gateway_fakes import Call, Reply

_ID = re.compile(r"call_(task|ask)_(\d+)")


def _items(call: Call) -> list[dict[str, Any]]:
    items = call.body.get("input") or []
    return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []


def _tool_names(call: Call) -> list[str]:
    """Function names in ``tools`` and in Codex's ``additional_tools`` input items."""
    names: list[str] = []

    def walk(tools: list[Any]) -> None:
        for t in tools:
            if isinstance(t, dict):
                if t.get("name"):
                    names.append(str(t["name"]))
                walk(t.get("tools") or [])

    walk(call.body.get("tools") or [])
    for item in _items(call):
        if item.get("type") == "additional_tools":
            walk(item.get("tools") or [])
    return names


def _text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    return "".join(str(c.get("text", "")) for c in content or [] if isinstance(c, dict))


class CodexScript:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.followups: list[str] = []
        self.recalled = False

    def __call__(self, call: Call) -> Reply:
        items = _items(call)
        users = [
            i for i in items if i.get("type", "message") == "message" and i.get("role") == "user"
        ]
        last = items[-1] if items else {}
        if users and FOLLOWUP in _text(users[-1]):
            return self._answer(call, last)
        match = None
        if last.get("type") == "function_call_output":
            match = _ID.fullmatch(str(last.get("call_id")))
        n = int(match.group(2)) + 1 if match else 0
        if n < len(self.plan.steps):
            command = shell_command(self.plan.steps[n])
            return Reply(
                text=f"Step {n}.", tool_calls=[(f"call_task_{n}", "exec_command", {"cmd": command})]
            )
        return Reply(text=DONE)

    def _answer(self, call: Call, last: dict[str, Any]) -> Reply:
        text = json.dumps(call.body, ensure_ascii=False)
        self.followups.append(text)
        if first_error() in text:
            return Reply(text=f"The first failing run ended with: {first_error()}")
        asked = last.get("type") == "function_call_output" and last.get("call_id") == "call_ask_1"
        if "recall" in _tool_names(call) and not asked:
            self.recalled = True
            return Reply(tool_calls=[("call_ask_1", "recall", {"query": recall_query()})])
        return Reply(text="I cannot see the output of the first failing run any more.")
