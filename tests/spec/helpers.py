"""Sessions for the conformance suite: everything runs on ``preset="spec"``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from contextfold import ContextManager

SYSTEM = {"role": "system", "content": "You are a coding agent."}
TASK = {"role": "user", "content": "Please fix the failing test in src/app.py."}
NEWEST = {"role": "user", "content": "Now also update the changelog."}


def turn(i: int, chars: int) -> list[dict[str, Any]]:
    """One assistant tool call and its result of about ``chars`` characters."""
    body = "\n".join(f"line {i}.{j} " + "x" * 40 for j in range(max(1, chars // 50)))
    return [
        {
            "role": "assistant",
            "content": f"Step {i}: reading f{i}.",
            "tool_calls": [
                {
                    "id": f"c{i}",
                    "type": "function",
                    "function": {"name": "bash", "arguments": json.dumps({"cmd": f"cat f{i}"})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": f"c{i}", "content": body},
    ]


def turns(n: int, chars: int = 1_000, start: int = 0) -> list[dict[str, Any]]:
    return [m for i in range(start, start + n) for m in turn(i, chars)]


def spec_manager(tmp_path: Path, window: int = 10_000, **kw: Any) -> ContextManager:
    return ContextManager(
        workspace=tmp_path,
        session_id=kw.pop("session_id", "s"),
        context_window=window,
        preset="spec",
        **kw,
    )


def chars_tokens(messages: list[dict[str, Any]]) -> int:
    """What the notes' EstimateTokens gives: characters / 4."""
    return sum(len(str(m.get("content") or "")) for m in messages) // 4


def fill_to(cm: ContextManager, ratio: float, chars: int = 1_000) -> None:
    """Add turns until the view is at ``ratio`` of the window (without compacting)."""
    i = 1_000 + len(cm.history)  # ids never used before in the session
    while cm.view_tokens < ratio * cm.window:
        cm.add_many(turn(i, chars))
        i += 1
