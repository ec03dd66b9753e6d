"""Clients that rewrite their own history every turn, as the real agent programs do, for the
gateway tests: the shapes come from the programs' source (aider's ``format_chat_chunks``,
``ChatSummary``, ``get_chat_files_messages``, ``/run``; Claude Code's ``<system-reminder>``
blocks), the wording is our own."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tests.gateway.gateway_fakes import Call, Reply

AIDER_SYSTEM = (
    "Act as an expert software developer. Always use best practices when coding. Take requests "
    "for changes to the supplied code. Describe each change with a *SEARCH/REPLACE block*."
)
#: aider appends its edit-format reminder to the system prompt and, with the default
#: ``reminder="user"``, to a copy of the newest user message of the request
AIDER_REMINDER = (
    "# *SEARCH/REPLACE block* Rules:\n"
    + "Every *SEARCH/REPLACE block* must use this format: the full file path alone on a line, "
    "the opening fence, <<<<<<< SEARCH, the lines to find, =======, the replacement, "
    ">>>>>>> REPLACE, the closing fence. " * 6
)
AIDER_EXAMPLES = [
    {"role": "user", "content": "Change get_factorial() to use math.factorial"},
    {
        "role": "assistant",
        "content": "To make this change we need to modify `mathweb/flask/app.py`:\n"
        "mathweb/flask/app.py\n```python\n<<<<<<< SEARCH\nfrom flask import Flask\n=======\n"
        "import math\nfrom flask import Flask\n>>>>>>> REPLACE\n```",
    },
    {
        "role": "user",
        "content": "I switched to a new code base. Please don't consider the above files or try "
        "to edit them any longer.",
    },
    {"role": "assistant", "content": "Ok."},
]
FILES_PREFIX = (
    "I have *added these files to the chat* so you can go ahead and edit them.\n\n"
    "*Trust this message as the true contents of these files!*\n"
    "Any other messages in the chat may contain outdated versions of the files' contents.\n"
)
FILES_REPLY = "Ok, any changes I propose will be to those files."
SUMMARY_PREFIX = "I spoke to you previously about a number of things.\n"
SUMMARIZE_SYSTEM = (
    "*Briefly* summarize this partial conversation about programming. Include less detail about "
    "older parts and more detail about the most recent messages."
)
RUN_OUTPUT = "I ran this command:\n\n{command}\n\nAnd got this output:\n\n{output}\n"


def _tokens(messages: list[dict[str, Any]]) -> int:
    return sum(len(str(m.get("content", ""))) // 4 for m in messages)


@dataclass
class AiderLike:
    """The messages aider sends: system, examples, done (summarized when too big), the chat
    files block rebuilt after them, the current turn with the reminder stuffed into a copy of
    its newest user message."""

    files: dict[str, str]
    #: aider's ``max_chat_history_tokens`` (1024 for small models)
    max_history_tokens: int = 1024
    done: list[dict[str, Any]] = field(default_factory=list)
    cur: list[dict[str, Any]] = field(default_factory=list)

    def files_block(self) -> list[dict[str, Any]]:
        content = FILES_PREFIX
        for name, text in self.files.items():
            content += f"\n{name}\n```\n{text}```\n"
        return [
            {"role": "user", "content": content},
            {"role": "assistant", "content": FILES_REPLY},
        ]

    def request(self) -> list[dict[str, Any]]:
        cur = [dict(m) for m in self.cur]
        if cur and cur[-1]["role"] == "user":
            cur[-1]["content"] = cur[-1]["content"] + "\n\n" + AIDER_REMINDER
        system = {"role": "system", "content": AIDER_SYSTEM + "\n" + AIDER_REMINDER}
        return [system, *AIDER_EXAMPLES, *self.done, *self.files_block(), *cur]

    def run(self, command: str, output: str) -> None:
        """``/run``: the output goes into the current turn."""
        self.cur += [
            {"role": "user", "content": RUN_OUTPUT.format(command=command, output=output)},
            {"role": "assistant", "content": "Ok."},
        ]

    def ask(self, text: str) -> None:
        self.cur.append({"role": "user", "content": text})

    def answered(self, answer: str) -> None:
        """The turn ends: the current messages move to ``done``."""
        self.cur.append({"role": "assistant", "content": answer})
        self.done += self.cur
        self.cur = []

    def summary_request(self) -> list[dict[str, Any]] | None:
        """When ``done`` is too big: the request aider's ``ChatSummary`` sends for its head."""
        if _tokens(self.done) <= self.max_history_tokens:
            return None
        split = self._split()
        head = self.done[:split]
        text = "".join(f"# {m['role'].upper()}\n{m['content']}\n" for m in head)
        return [{"role": "system", "content": SUMMARIZE_SYSTEM}, {"role": "user", "content": text}]

    def summarized(self, summary: str) -> None:
        split = self._split()
        self.done = [{"role": "user", "content": SUMMARY_PREFIX + summary}, *self.done[split:]]
        if self.done[-1]["role"] != "assistant":
            self.done.append({"role": "assistant", "content": "Ok."})

    def _split(self) -> int:
        """Where ChatSummary splits: a tail under half the limit, the head ending with an
        assistant message."""
        half = self.max_history_tokens // 2
        tail = 0
        split = len(self.done)
        for i in range(len(self.done) - 1, -1, -1):
            t = len(str(self.done[i]["content"])) // 4
            if tail + t >= half:
                break
            tail += t
            split = i
        while split > 1 and self.done[split - 1]["role"] != "assistant":
            split -= 1
        return split


def aider_upstream(call: Call) -> Reply:
    """Answers like a model talking to aider: summaries for the summarizer, an edit otherwise
    (the request's newest user message decides which)."""
    messages = call.messages
    if messages and messages[0].get("content") == SUMMARIZE_SYSTEM:
        return Reply(text="We worked on app.py: added functions step by step; tests ran.")
    last = str(messages[-1].get("content", "")).split("\n\n")[0]
    return Reply(
        text=f"Here is the change for: {last[:60]}\napp.py\n```python\n<<<<<<< SEARCH\n"
        f"=======\n# {last[:30]}\n>>>>>>> REPLACE\n```"
    )


def distinct_bytes(messages: list[dict[str, Any]]) -> int:
    """Bytes of the distinct messages among ``messages`` (by role and content)."""
    seen = {json.dumps([m.get("role"), m.get("content")], ensure_ascii=False) for m in messages}
    return sum(len(s.encode()) for s in seen)
