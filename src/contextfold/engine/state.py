"""Session state that compaction never touches.

Plan mode, the todo list, background tasks and permissions live beside the messages, as
``session_state`` snapshots in the session's log (the newest one wins). No compaction strategy reads or changes them; the todo
list is only *rendered* into the compaction message's Active Tasks section.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import ContextFoldError, StorageError
from ..storage.session import SessionStore

TODO_STATUSES = ("pending", "in_progress", "completed")
_MARK = {"pending": "[ ]", "in_progress": "[>]", "completed": "[x]"}


@dataclass(kw_only=True)
class TodoItem:
    content: str
    status: str = "pending"

    def __post_init__(self) -> None:
        if self.status not in TODO_STATUSES:
            raise ContextFoldError(
                f"todo status must be one of {TODO_STATUSES}, got {self.status!r}"
            )


@dataclass(kw_only=True)
class SessionState:
    plan_mode: bool = False
    plan_file: str | None = None
    todos: list[TodoItem] = field(default_factory=list)
    background_tasks: list[dict[str, Any]] = field(default_factory=list)
    permissions: dict[str, Any] = field(default_factory=dict)

    def active_task_lines(self) -> list[str]:
        """Todo items as the compaction message's Active Tasks lines ("[>] ...", "[ ] ..."); done ones omitted."""
        return [f"{_MARK[t.status]} {t.content}" for t in self.todos if t.status != "completed"]

    def set_todos(self, items: list[Mapping[str, Any]] | list[TodoItem]) -> None:
        self.todos = [i if isinstance(i, TodoItem) else TodoItem(**dict(i)) for i in items]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SessionState:
        return cls(
            plan_mode=bool(data.get("plan_mode", False)),
            plan_file=data.get("plan_file"),
            todos=[TodoItem(**t) for t in data.get("todos", [])],
            background_tasks=list(data.get("background_tasks", [])),
            permissions=dict(data.get("permissions", {})),
        )


def load_state(session: SessionStore) -> SessionState:
    """The newest ``session_state`` snapshot of the session (empty state when none)."""
    last = session.read_last(1, ["session_state"])
    if not last:
        return SessionState()
    try:
        return SessionState.from_dict(last[0].data)
    except (ValueError, TypeError, ContextFoldError) as exc:
        raise StorageError(
            f"session state of {session.session_id!r} (event {last[0].seq}) is unreadable: {exc}"
        ) from exc


def save_state(session: SessionStore, state: SessionState) -> None:
    """Append a snapshot (in the current unit of work)."""
    session.emit("session_state", state.to_dict())
