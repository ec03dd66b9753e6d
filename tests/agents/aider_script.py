"""The scripted model for aider: OpenAI Chat Completions answers in aider's edit formats (aider
has no tools: it edits from a whole-file listing or SEARCH/REPLACE blocks in the text, and runs
the ``/run`` commands the user types), plus its history summaries."""

from __future__ import annotations

import json
import re

from tests.agents.harness import APP_PY
from tests.agents.plan import FOLLOWUP, first_error, recall_query
from tests.gateway.gateway_fakes import Call, Reply

FIXED = APP_PY.replace("sum(values) + 1", "sum(values)")
NOTE = re.compile(r"Note the result of run (\d+)\.")


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


class AiderScript:
    def __init__(self) -> None:
        #: (run asked about, request text) per "Note the result of run K." turn
        self.notes: list[tuple[int, str]] = []
        self.followups: list[str] = []
        self.main_requests: list[str] = []
        self.summaries = 0
        self.recalled = False

    def __call__(self, call: Call) -> Reply:
        msgs = call.messages
        system = _text(msgs[0].get("content")) if msgs else ""
        if "summarize this partial conversation" in system:
            self.summaries += 1
            return Reply(text="I asked you to fix app.py and to run the build steps; you did.")
        text = json.dumps(call.body, ensure_ascii=False)
        self.main_requests.append(text)
        users = [m for m in msgs if m.get("role") == "user"]
        last = _text(users[-1].get("content")) if users else ""
        if FOLLOWUP in last:
            self.followups.append(text)
            if first_error() in text:
                return Reply(text=f"The first failing run ended with: {first_error()}")
            if "recall" in call.tool_names() and msgs[-1].get("role") != "tool":
                # the gateway offers its recall tool: a model that cannot see the output asks
                self.recalled = True
                return Reply(tool_calls=[("call_recall_1", "recall", {"query": recall_query()})])
            return Reply(text="I cannot see the output of the first failing run any more.")
        note = NOTE.search(last)
        if note:
            self.notes.append((int(note.group(1)), text))
            return Reply(text=f"Noted the result of run {note.group(1)}.")
        if "SEARCH/REPLACE" in system:
            edit = "<<<<<<< SEARCH\n    return sum(values) + 1\n=======\n    return sum(values)\n"
            return Reply(
                text=f"Removing the +1.\n\napp.py\n```python\n{edit}>>>>>>> REPLACE\n```\n"
            )
        return Reply(text=f"Removing the +1.\n\napp.py\n```python\n{FIXED}```\n")
