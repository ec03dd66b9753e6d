"""The scripted model for Gemini CLI: Gemini API answers with Gemini CLI's own tools
(``run_shell_command``, ``read_file``, ``replace``) and valid JSON for its JSON-mode side calls
(the model router's classifier, loop detection). Gemini CLI numbers the calls itself, so the
script finds its place from the last function call in the contents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.agents.plan import DONE, FOLLOWUP, Plan, Step, first_error, recall_query
from tests.gateway_fakes import Call, Reply


def schema_value(schema: Any) -> Any:
    """A value that satisfies a JSON-mode response schema (its required fields filled)."""
    if not isinstance(schema, dict):
        return None
    kind = str(schema.get("type", "OBJECT")).upper()
    if "enum" in schema:
        return schema["enum"][0]
    if kind == "OBJECT":
        props = schema.get("properties") or {}
        return {k: schema_value(v) for k, v in props.items()}
    if kind == "ARRAY":
        return []
    if kind == "INTEGER":
        return 10  # the router's complexity score (1 to 100): a simple request
    if kind == "NUMBER":
        return 0.0  # loop detection's confidence (0 to 1): no loop
    if kind == "BOOLEAN":
        return False
    return "simple"


class GeminiScript:
    def __init__(self, plan: Plan, project: Path) -> None:
        self.plan = plan
        self.project = project
        self.followups: list[str] = []
        self.recalled = False
        self.side_calls = 0

    def _call(self, step: Step) -> tuple[str, dict[str, Any]]:
        path = str(self.project / step.path)
        if step.kind == "read":
            return "read_file", {"file_path": path}
        if step.kind == "edit":
            args = {"file_path": path, "old_string": step.old, "new_string": step.new}
            return "replace", {**args, "instruction": "drop the +1"}
        return "run_shell_command", {"command": step.command}

    def _reply(self, n: int) -> Reply:
        name, args = self._call(self.plan.steps[n])
        return Reply(text=f"Step {n}.", tool_calls=[(f"g{n}", name, args)])

    def _last_call(self, contents: list[Any]) -> tuple[str, dict[str, Any]] | None:
        for content in reversed(contents):
            if content.get("role") != "model":
                continue
            for part in reversed(content.get("parts") or []):
                fc = part.get("functionCall") if isinstance(part, dict) else None
                if isinstance(fc, dict):
                    return str(fc.get("name")), dict(fc.get("args") or {})
            return None
        return None

    def __call__(self, call: Call) -> Reply:
        config = call.body.get("generationConfig") or {}
        if config.get("responseJsonSchema") or config.get("responseSchema"):
            self.side_calls += 1
            schema = config.get("responseJsonSchema") or config.get("responseSchema")
            return Reply(text=json.dumps(schema_value(schema)))
        contents = call.messages
        users = [
            c for c in contents if c.get("role") == "user" and any("text" in p for p in c["parts"])
        ]
        if users and FOLLOWUP in json.dumps(users[-1]):
            return self._answer(call)
        last = self._last_call(contents)
        if last is None or not call.last_tool_results():
            return self._reply(0)
        steps = [self._call(s) for s in self.plan.steps]
        n = next((i for i, c in enumerate(steps) if c == last), -1) + 1
        if 0 < n < len(steps):
            return self._reply(n)
        return Reply(text=DONE)

    def _answer(self, call: Call) -> Reply:
        text = json.dumps(call.body, ensure_ascii=False)
        self.followups.append(text)
        if first_error() in text:
            return Reply(text=f"The first failing run ended with: {first_error()}")
        last = self._last_call(call.messages)
        if "recall" in call.tool_names() and (last is None or last[0] != "recall"):
            self.recalled = True
            return Reply(tool_calls=[("g_ask", "recall", {"query": recall_query()})])
        return Reply(text="I cannot see the output of the first failing run any more.")
