"""The scripted model for Codex CLI: OpenAI Responses answers with Codex's tools; call ids
``call_<phase>_<n>`` tell the script where it is.

Codex's default model is offered a free-form (custom) tool ``exec`` whose input is JavaScript
that calls Codex's other tools (``tools.exec_command``, ``tools.apply_patch``); the script uses
it as that model does: ``custom_tool_call`` items whose ``input`` is the source, answered by
``custom_tool_call_output`` items. When ``exec`` is not offered it calls ``exec_command`` as a
function."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.agents.mini_script import shell_command
from tests.agents.plan import DONE, FOLLOWUP, Plan, Step, first_error, recall_query
from tests.gateway.gateway_fakes import Call, Reply

_ID = re.compile(r"call_(task|ask)_(\d+)")
#: the instruction of Codex's own compaction request (its local compaction prompt)
COMPACT_PROMPT = "You are performing a CONTEXT CHECKPOINT COMPACTION"
#: the summary's line naming the last step done
_DONE = re.compile(r"Steps done: up to call_task_(\d+)")
#: the items that answer a call
OUTPUTS = ("function_call_output", "custom_tool_call_output")


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


def _custom_tools(call: Call) -> set[str]:
    """The free-form tools offered (``tools`` and ``additional_tools``, namespaces too)."""
    names: set[str] = set()

    def walk(tools: list[Any]) -> None:
        for t in tools:
            if isinstance(t, dict):
                if t.get("type") == "custom" and t.get("name"):
                    names.add(str(t["name"]))
                walk(t.get("tools") or [])

    walk(call.body.get("tools") or [])
    for item in _items(call):
        if item.get("type") == "additional_tools":
            walk(item.get("tools") or [])
    return names


def patch(step: Step) -> str:
    """An edit step as an ``apply_patch`` patch (the free-form patch language)."""
    return (
        f"*** Begin Patch\n*** Update File: {step.path}\n@@\n"
        f"-    return {step.old}\n+    return {step.new}\n*** End Patch\n"
    )


def exec_source(step: Step) -> str:
    """A plan step as the JavaScript source of an ``exec`` call."""
    if step.kind == "edit":
        return f"const r = await tools.apply_patch({json.dumps(patch(step))});\ntext(r);"
    cmd = json.dumps(shell_command(step))
    return (
        f"const r = await tools.exec_command({{cmd: {cmd}, max_output_tokens: 20000}});\n"
        "text(r.output);\ntext(`exit code: ${r.exit_code}`);"
    )


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
        self.custom_calls = 0
        self.compactions = 0

    def __call__(self, call: Call) -> Reply:
        items = _items(call)
        users = [
            i for i in items if i.get("type", "message") == "message" and i.get("role") == "user"
        ]
        last = items[-1] if items else {}
        if users and COMPACT_PROMPT in _text(users[-1]):
            return self.summary(items)
        if users and FOLLOWUP in _text(users[-1]):
            return self._answer(call, last)
        match = None
        if last.get("type") in OUTPUTS:
            match = _ID.fullmatch(str(last.get("call_id")))
        n = int(match.group(2)) + 1 if match else self._next_after_compaction(items)
        if n >= len(self.plan.steps):
            return Reply(text=DONE)
        step = self.plan.steps[n]
        if "exec" in _custom_tools(call):
            self.custom_calls += 1
            return Reply(
                text=f"Step {n}.", tool_calls=[(f"call_task_{n}", "exec", exec_source(step))]
            )
        command = shell_command(step)
        return Reply(
            text=f"Step {n}.", tool_calls=[(f"call_task_{n}", "exec_command", {"cmd": command})]
        )

    @staticmethod
    def _done(items: list[dict[str, Any]]) -> list[int]:
        """The steps whose output the items hold, and the one a compaction summary names."""
        done = [int(m.group(1)) for i in items for m in _DONE.finditer(_text(i))]
        for item in items:
            match = _ID.fullmatch(str(item.get("call_id", "")))
            if item.get("type") in OUTPUTS and match and match.group(1) == "task":
                done.append(int(match.group(2)))
        return done

    def summary(self, items: list[dict[str, Any]]) -> Reply:
        """Codex's compaction request answered as a model does: the progress, no output quoted."""
        self.compactions += 1
        done = self._done(items)
        return Reply(
            text="Progress: the off-by-one in app.py is fixed (sum(values)); build steps run.\n"
            f"Steps done: up to call_task_{max(done, default=0)}.\n"
            "Next: run the remaining build steps, then report."
        )

    def _next_after_compaction(self, items: list[dict[str, Any]]) -> int:
        """After Codex's compaction its history is the user's messages and the summary."""
        done = self._done(items)
        return max(done) + 1 if done else 0

    def _answer(self, call: Call, last: dict[str, Any]) -> Reply:
        text = json.dumps(call.body, ensure_ascii=False)
        self.followups.append(text)
        if first_error() in text:
            return Reply(text=f"The first failing run ended with: {first_error()}")
        asked = last.get("type") in OUTPUTS and last.get("call_id") == "call_ask_1"
        if "recall" in _tool_names(call) and not asked:
            self.recalled = True
            return Reply(tool_calls=[("call_ask_1", "recall", {"query": recall_query()})])
        return Reply(text="I cannot see the output of the first failing run any more.")
