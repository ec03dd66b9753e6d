"""Seed 002 section 4: plan mode, todos, background tasks and permissions live beside the
messages; compaction never changes them; the todo list is rendered into Active Tasks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from contextfold import ContextManager
from contextfold.core.config import SummaryTriggerConfig, harness
from contextfold.engine.state import SessionState, TodoItem
from contextfold.errors import ContextFoldError, StorageError
from contextfold.testing import OverflowingModel, ScriptedSummarizer, message_tokens
from tests.support.store_helpers import events

TODOS = [
    {"content": "Write the parser tests", "status": "completed"},
    {"content": "Fix ISO week parsing", "status": "in_progress"},
    {"content": "Update the changelog", "status": "pending"},
]
ACTIVE = ["[>] Fix ISO week parsing", "[ ] Update the changelog"]


class QuarterCounter:
    name = "quarter"

    def count_text(self, text: str) -> int:
        return len(text) // 4


def manager(tmp_path: Path, **kw: Any) -> ContextManager:
    kw.setdefault("context_window", 20_000)
    return ContextManager(workspace=tmp_path, session_id="s", token_counter=QuarterCounter(), **kw)


def fill(cm: ContextManager, turns: int = 12, size: int = 600) -> None:
    cm.add({"role": "system", "content": "You are a coding agent."})
    cm.add({"role": "user", "content": "Fix the date parser."})
    for i in range(turns):
        cm.add_many(
            [
                {
                    "role": "assistant",
                    "content": f"Step {i}.",
                    "tool_calls": [
                        {
                            "id": f"c{i}",
                            "type": "function",
                            "function": {"name": "bash", "arguments": '{"command": "ls"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": f"c{i}", "content": f"out {i} " + "x" * size},
            ]
        )


def set_state(cm: ContextManager) -> None:
    st = cm.state
    st.plan_mode = True
    st.plan_file = "plans/parser.md"
    st.set_todos(TODOS)
    st.background_tasks = [{"task_id": "bg-1", "status": "running", "cmd": "pytest -x"}]
    st.permissions = {"bash": "ask", "write_file": {"allow": ["src/**"], "deny": ["tests/**"]}}


def compaction_text(view: list[dict[str, Any]]) -> str:
    return next(
        str(d["content"]) for d in view if str(d.get("content")).startswith("[Context Compaction]")
    )


def test_state_persists_and_reloads(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    fill(cm, turns=2)
    set_state(cm)
    cm.save_session_state()
    assert events(tmp_path, "s", "session_state")[-1]["plan_mode"] is True
    again = manager(tmp_path)
    assert again.state == cm.state
    assert again.state.todos[1] == TodoItem(content="Fix ISO week parsing", status="in_progress")
    assert again.state.background_tasks[0]["task_id"] == "bg-1"
    assert again.state.permissions["write_file"]["deny"] == ["tests/**"]
    assert again.state.plan_file == "plans/parser.md"


def test_fresh_session_has_empty_state(tmp_path: Path) -> None:
    st = manager(tmp_path).state
    assert st == SessionState()
    assert st.active_task_lines() == []


@pytest.mark.parametrize("how", ["full", "emergency", "trigger", "overflow"])
def test_no_compaction_changes_the_state(tmp_path: Path, how: str) -> None:
    if how == "trigger":
        cm = manager(
            tmp_path,
            config=harness(summary=SummaryTriggerConfig(trigger_messages=20, keep_messages=4)),
        )
    else:
        cm = manager(tmp_path)
    fill(cm, size=3_500 if how == "emergency" else 600)
    set_state(cm)
    cm.save_session_state()
    before_stored = events(tmp_path, "s", "session_state")
    before = SessionState.from_dict(cm.state.to_dict())
    if how == "full":
        rec = cm.compact(force=True)
    elif how == "emergency":
        rec = cm.compact(tier="emergency")
    elif how == "trigger":
        cm.prepare()
        rec = cm.last_prepare  # type: ignore[assignment]
    else:
        limit = message_tokens(cm.prepare()) // 2
        model = OverflowingModel(limit=limit)
        cm.call(model)
        assert model.overflows == 1 and len(model.calls) == 2
        rec = cm.last_prepare  # type: ignore[assignment]
    assert rec is not None and rec.changed and rec.summarized > 0
    assert cm.state == before
    assert events(tmp_path, "s", "session_state") == before_stored
    assert manager(tmp_path).state == before
    text = compaction_text(cm.prepare())
    section = text.split("## Active Tasks\n", 1)[1].split("\n\n", 1)[0]
    assert section.splitlines() == ACTIVE


def test_active_tasks_rendering_and_notes_to_the_summarizer(tmp_path: Path) -> None:
    summ = ScriptedSummarizer(default="### User Intent\nFix it\n## Summary\nworked")
    cm = manager(tmp_path, summarizer=summ)
    fill(cm)
    set_state(cm)
    cm.compact(force=True)
    assert list(summ.requests[0].notes) == ACTIVE
    text = compaction_text(cm.prepare())
    assert "## Active Tasks\n[>] Fix ISO week parsing\n[ ] Update the changelog" in text
    assert "Write the parser tests" not in text  # completed items are omitted
    # a later compaction renders the list as it is then
    cm.state.set_todos([{"content": "Update the changelog", "status": "in_progress"}])
    for i in range(20, 30):
        cm.add_many(
            [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": f"c{i}", "type": "function", "function": {"name": "bash"}}
                    ],
                },
                {"role": "tool", "tool_call_id": f"c{i}", "content": "y" * 600},
            ]
        )
    cm.compact(force=True)
    text = compaction_text(cm.prepare())
    assert "## Active Tasks\n[>] Update the changelog" in text
    assert "Fix ISO week parsing" not in text.split("## Active Tasks")[1]


def test_no_active_tasks_section_without_open_todos(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    fill(cm)
    cm.state.set_todos([{"content": "done already", "status": "completed"}])
    cm.compact(force=True)
    assert "## Active Tasks" not in compaction_text(cm.prepare())


def test_active_tasks_survive_a_restart_in_the_compaction_message(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    fill(cm)
    set_state(cm)
    cm.save_session_state()
    cm.compact(force=True)
    view = cm.prepare()
    again = manager(tmp_path)
    assert again.prepare() == view
    assert "[>] Fix ISO week parsing" in compaction_text(view)


def test_bad_todo_status_and_corrupt_state_file(tmp_path: Path) -> None:
    with pytest.raises(ContextFoldError):
        TodoItem(content="x", status="doing")
    cm = manager(tmp_path)
    with pytest.raises(ContextFoldError):
        cm.state.set_todos([{"content": "x", "status": "blocked"}])
    cm.session.emit("session_state", {"todos": [{"content": "x", "status": "blocked"}]})
    with pytest.raises(StorageError, match=r"session state of 's' \(event 0\)"):
        manager(tmp_path)


def test_state_is_per_session(tmp_path: Path) -> None:
    a = manager(tmp_path)
    set_state(a)
    a.save_session_state()
    b = ContextManager(workspace=tmp_path, session_id="other", token_counter=QuarterCounter())
    assert b.state == SessionState()


def test_delete_session_removes_the_state(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    fill(cm, turns=1)
    set_state(cm)
    cm.save_session_state()
    cm.delete_session()
    assert events(tmp_path, "s", "session_state") == []
