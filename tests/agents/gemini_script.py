"""The scripted model for Gemini CLI: Gemini API answers with Gemini CLI's own tools
(``run_shell_command``, ``read_file``, ``replace``) and valid JSON for its JSON-mode side calls
(the model router's classifier, loop detection). Gemini CLI numbers the calls itself, so the
script finds its place from the last function call in the contents.

With ``fire_loop`` the script's answers to Gemini CLI's loop check say "stuck in a loop" (with
the confidence the check acts on) until the loop feedback comes back: Gemini CLI then drops
the tool results it was about to send, sends its feedback after the unanswered call, and the
script, like a model, runs the step whose result it never got again."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.agents.plan import DONE, FOLLOWUP, Plan, Step, first_error, recall_query
from tests.gateway.gateway_fakes import Call, Reply


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


#: the instruction of Gemini CLI's own compression request (its system instruction)
COMPRESS_PROMPT = "distilling chat history into a structured XML <state_snapshot>"
#: the snapshot's line naming the last step done
_DONE = re.compile(r"Steps done: up to step (\d+)\.")

#: the feedback Gemini CLI sends when its loop detection fires
LOOP_FEEDBACK = "System: Potential loop detected."
#: loop detection acts on a confidence of 0.9 or more
LOOP_CONFIDENCE = 0.95


def loop_check(schema: Any) -> bool:
    """Whether a JSON-mode side call is Gemini CLI's loop check (by its answer's schema)."""
    props = schema.get("properties") if isinstance(schema, dict) else None
    return isinstance(props, dict) and "unproductive_state_confidence" in props


class GeminiScript:
    def __init__(self, plan: Plan, project: Path, *, fire_loop: bool = False) -> None:
        self.plan = plan
        self.project = project
        self.fire_loop = fire_loop
        self.followups: list[str] = []
        self.recalled = False
        self.side_calls = 0
        self.loop_checks = 0
        self.loop_fired = 0  # loop checks answered "stuck"
        self.loop_feedbacks = 0  # requests that carried the loop feedback
        self.compressions = 0  # Gemini CLI's own compression requests answered

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

    def _last_call(
        self, contents: list[Any], *, answered: bool = False
    ) -> tuple[str, dict[str, Any]] | None:
        """The newest model turn's last call (None when that turn has none); ``answered``:
        the last call a function response answers, however far back."""
        for i in range(len(contents) - 1, -1, -1):
            content = contents[i]
            if content.get("role") != "model":
                continue
            nxt = contents[i + 1] if i + 1 < len(contents) else {}
            if answered and not any("functionResponse" in p for p in nxt.get("parts") or []):
                continue
            for part in reversed(content.get("parts") or []):
                fc = part.get("functionCall") if isinstance(part, dict) else None
                if isinstance(fc, dict):
                    return str(fc.get("name")), dict(fc.get("args") or {})
            if not answered:
                return None
        return None

    def _done(self, contents: list[Any]) -> int:
        """The newest step the contents hold: its call, or a snapshot naming it (-1: none)."""
        steps = [self._call(s) for s in self.plan.steps]
        done = [int(m.group(1)) for m in _DONE.finditer(json.dumps(contents))]
        for content in contents:
            for part in content.get("parts") or [] if content.get("role") == "model" else []:
                fc = part.get("functionCall") if isinstance(part, dict) else None
                if isinstance(fc, dict):
                    call = (str(fc.get("name")), dict(fc.get("args") or {}))
                    done += [i for i, c in enumerate(steps) if c == call]
        return max(done, default=-1)

    def snapshot(self, call: Call) -> Reply:
        """Gemini CLI's compression request answered as a model does: the progress in a
        ``<state_snapshot>``, no output quoted (the follow-up's evidence is not in it)."""
        self.compressions += 1
        n = self._done(call.messages)
        return Reply(
            text="<state_snapshot>\n<overall_goal>Fix app.py and run the build steps."
            f"</overall_goal>\n<key_knowledge>Steps done: up to step {n}.</key_knowledge>\n"
            "</state_snapshot>"
        )

    def __call__(self, call: Call) -> Reply:
        if COMPRESS_PROMPT in json.dumps(call.body.get("systemInstruction") or ""):
            return self.snapshot(call)
        config = call.body.get("generationConfig") or {}
        if config.get("responseJsonSchema") or config.get("responseSchema"):
            self.side_calls += 1
            schema = config.get("responseJsonSchema") or config.get("responseSchema")
            value = schema_value(schema)
            if loop_check(schema):
                self.loop_checks += 1
                if self.fire_loop and not self.loop_feedbacks:
                    self.loop_fired += 1
                    value["unproductive_state_confidence"] = LOOP_CONFIDENCE
                    value["unproductive_state_analysis"] = "The same build step keeps coming."
            return Reply(text=json.dumps(value))
        contents = call.messages
        users = [
            c for c in contents if c.get("role") == "user" and any("text" in p for p in c["parts"])
        ]
        if users and FOLLOWUP in json.dumps(users[-1]):
            return self._answer(call)
        if contents and LOOP_FEEDBACK in json.dumps(contents[-1]):
            # the step whose result never came back is run again
            self.loop_feedbacks += 1
            last = self._last_call(contents, answered=True)
        else:
            last = self._last_call(contents)
            if last is None or not call.last_tool_results():
                # the start, or right after Gemini CLI compressed its history: the newest step
                # its snapshot or its kept turns name
                n = self._done(contents) + 1
                return self._reply(n) if n < len(self.plan.steps) else Reply(text=DONE)
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
