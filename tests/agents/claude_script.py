"""The scripted model for Claude Code: Anthropic Messages answers with Claude Code's own tools
(``Bash``, ``Read``, ``Edit``), tool ids ``toolu_<phase>_<n>`` telling the script where it is."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.agents.plan import DONE, FOLLOWUP, Plan, Step, first_error, recall_query
from tests.gateway_fakes import Call, Reply

_ID = re.compile(r"toolu_(task|ask)_(\d+)")


class ClaudeScript:
    def __init__(self, plan: Plan, project: Path) -> None:
        self.plan = plan
        self.project = project
        #: the follow-up requests seen (the last one holds the answer's evidence)
        self.followups: list[str] = []
        self.recalled = False

    def _tool(self, n: int, step: Step) -> Reply:
        cid = f"toolu_task_{n}"
        if step.kind == "shell":
            return Reply(
                text=f"Running step {n}.",
                tool_calls=[(cid, "Bash", {"command": step.command, "description": f"step {n}"})],
            )
        path = str(self.project / step.path)
        if step.kind == "read":
            return Reply(tool_calls=[(cid, "Read", {"file_path": path})])
        args = {"file_path": path, "old_string": step.old, "new_string": step.new}
        return Reply(tool_calls=[(cid, "Edit", {**args, "replace_all": False})])

    def __call__(self, call: Call) -> Reply:
        if not call.body.get("tools"):
            return Reply(text="ok")  # a side call (title, summary): not part of the plan
        results = call.last_tool_results()
        match = _ID.fullmatch(results[-1][0]) if results else None
        if match is None:
            last = json.dumps(call.messages[-1:], ensure_ascii=False)
            if FOLLOWUP in last:
                return self._answer(call)
            return self._tool(0, self.plan.steps[0])
        if match.group(1) == "ask":
            return self._answer(call)
        n = int(match.group(2)) + 1
        if n < len(self.plan.steps):
            return self._tool(n, self.plan.steps[n])
        return Reply(text=DONE)

    def _answer(self, call: Call) -> Reply:
        text = json.dumps(call.body, ensure_ascii=False)
        self.followups.append(text)
        if first_error() in text:
            return Reply(text=f"The first failing run ended with: {first_error()}")
        if "recall" in call.tool_names() and not self.recalled:
            self.recalled = True
            return Reply(tool_calls=[("toolu_ask_1", "recall", {"query": recall_query()})])
        return Reply(text="I cannot see the output of the first failing run any more.")
