"""The scripted model for Claude Code: Anthropic Messages answers with Claude Code's own tools
(``Bash``, ``Read``, ``Edit``), tool ids ``toolu_<phase>_<n>`` telling the script where it is.

When Claude Code compacts itself (``/compact``, auto-compact) it asks for a summary of the
conversation; the script answers as a model does (``<analysis>`` then ``<summary>``), naming
the steps done but quoting no output, so the follow-up's evidence must come from the gateway."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.agents.plan import DONE, FOLLOWUP, TASK, Plan, Step, first_error, recall_query
from tests.gateway.gateway_fakes import Call, Reply

_ID = re.compile(r"toolu_(task|ask)_(\d+)")
#: the summary's line naming the last step done
_DONE = re.compile(r"Steps done: \d+ tool calls, up to toolu_task_(\d+)")
#: the instruction of Claude Code's compaction request
COMPACT_PROMPT = "Your task is to create a detailed summary"


class ClaudeScript:
    def __init__(self, plan: Plan, project: Path) -> None:
        self.plan = plan
        self.project = project
        #: the follow-up requests seen (the last one holds the answer's evidence)
        self.followups: list[str] = []
        self.recalled = False
        self.compactions = 0

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

    def _last_user(self, call: Call) -> str:
        users = [m for m in call.messages if m.get("role") == "user"]
        return json.dumps(users[-1:], ensure_ascii=False)

    def summary(self, call: Call) -> Reply:
        """Claude Code's compaction request answered: what was done, no output quoted."""
        self.compactions += 1
        done = sorted({int(m.group(2)) for m in _ID.finditer(json.dumps(call.messages))})
        runs = [s.command for s in self.plan.steps if s.command.startswith("python3 run.py")]
        lines = [
            f"1. Primary Request and Intent: {TASK}",
            "2. Key Technical Concepts: a noisy build step, python3 run.py K prints a log.",
            f"3. Files and Code Sections: {self.project / 'app.py'} fixed (sum(values)).",
            f"4. Steps done: {len(done)} tool calls, up to toolu_task_{max(done, default=0)}.",
            f"5. Build commands run so far: {'; '.join(runs[: max(0, len(done) - 3)])}.",
            "6. Pending Tasks: none; all requested build steps have run.",
        ]
        return Reply(
            text="<analysis>\nThe user asked for a fix and build runs.\n</analysis>\n\n"
            "<summary>\n" + "\n".join(lines) + "\n</summary>"
        )

    def __call__(self, call: Call) -> Reply:
        if COMPACT_PROMPT in self._last_user(call):
            return self.summary(call)
        if not call.body.get("tools"):
            return Reply(text="ok")  # a side call (title, summary): not part of the plan
        results = call.last_tool_results()
        match = _ID.fullmatch(results[-1][0]) if results else None
        if match is None:
            if FOLLOWUP in self._last_user(call):
                return self._answer(call)
            n = self._next_after_compaction(call)
            if n < len(self.plan.steps):
                return self._tool(n, self.plan.steps[n])
            return Reply(text=DONE)
        if match.group(1) == "ask":
            return self._answer(call)
        n = int(match.group(2)) + 1
        if n < len(self.plan.steps):
            return self._tool(n, self.plan.steps[n])
        return Reply(text=DONE)

    def _next_after_compaction(self, call: Call) -> int:
        """The next step when the request does not end with a tool result: after Claude Code's
        compaction it keeps the last step's call and result verbatim and may append a system
        message (its deferred-tools list), so the newest step is the newest of the summary's
        and the kept messages' (re-issuing a kept ``tool_use`` id makes Claude Code drop the
        call, as it drops any duplicate id)."""
        text = json.dumps(call.messages, ensure_ascii=False)
        done = [int(m.group(1)) for m in _DONE.finditer(text)]
        done += [int(m.group(2)) for m in _ID.finditer(text) if m.group(1) == "task"]
        return max(done) + 1 if done else 0

    def _answer(self, call: Call) -> Reply:
        text = json.dumps(call.body, ensure_ascii=False)
        self.followups.append(text)
        if first_error() in text:
            return Reply(text=f"The first failing run ended with: {first_error()}")
        if "recall" in call.tool_names() and not self.recalled:
            self.recalled = True
            return Reply(tool_calls=[("toolu_ask_1", "recall", {"query": recall_query()})])
        return Reply(text="I cannot see the output of the first failing run any more.")
