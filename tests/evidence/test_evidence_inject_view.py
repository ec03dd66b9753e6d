"""Automatic injection on the library path (``ContextManager.prepare``) never injects evidence
the view still shows: every tool call in the reminder block is one whose output left the view,
even when the question's words match an output still shown best."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from contextfold import ContextManager
from tests.evidence.test_injection_e2e import add_turn, compacted_session, reminder

_CALL = re.compile(r"tool call (\S+?)(?: ·|\n)")


def _shown(view: list[dict[str, Any]]) -> dict[str, str]:
    """Tool results the view shows, by tool call id."""
    return {
        str(m["tool_call_id"]): str(m.get("content"))
        for m in view
        if m.get("role") == "tool" and m.get("tool_call_id")
    }


def _originals(cm: ContextManager) -> dict[str, str]:
    return {
        str(m.tool_call_id): str(m.content)
        for m in cm.view.history
        if m.role == "tool" and m.tool_call_id
    }


def test_library_injection_never_injects_what_the_view_still_shows(tmp_path: Path) -> None:
    cm = compacted_session(tmp_path)
    add_turn(cm, 40, "cat src/module_40.py", "def newest(): return 'still in view'\n")
    shown_before = _shown(cm.view.view_dicts())
    assert shown_before.get("call_40") == "def newest(): return 'still in view'\n"
    originals = _originals(cm)
    questions = (
        # the best match by words is the newest read, which the view still shows in full
        "What was the exact output of `cat src/module_40.py` earlier?",
        "Show me the full output of the last command again",
        "What was the exact error output of pytest earlier?",
        "之前第一次运行的完整输出是什么？",
        # the task's own words: the task is pinned in the view, and indexed with the range of
        # messages a compaction removed around it
        "Show me again the earlier message that said: Fix the date parser",
    )
    injected: list[str] = []
    for question in questions:
        cm.add({"role": "user", "content": question})
        view = cm.prepare()
        block = reminder(view)
        if block is None:
            continue
        shown = _shown(view)
        for call in _CALL.findall(str(block["content"])):
            injected.append(call)
            assert shown.get(call) != originals.get(call), f"{call} injected while still shown"
        assert "still in view" not in str(block["content"])
        assert "Fix the date parser" not in str(block["content"]).replace(question, "")
    assert injected, "no question injected anything: the test proves nothing"
    assert "call_0" in injected  # the traceback that left the view is what came
    assert json.dumps(cm.view.view_dicts()).count("still in view") >= 1
