"""Session state that compaction never touches.

Plan mode, the todo list, background tasks and permissions live beside the messages, as
``session_state`` snapshots in the session's log (the newest one wins). No compaction strategy reads or changes them; the todo
list is only *rendered* into the compaction message's Active Tasks section.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

from ..errors import ContextFoldError, StorageError
from ..jsontypes import JSON, JSONObject, as_list, as_object
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
    background_tasks: list[JSONObject] = field(default_factory=list)
    permissions: JSONObject = field(default_factory=dict)

    def active_task_lines(self) -> list[str]:
        """Todo items as the compaction message's Active Tasks lines ("[>] ...", "[ ] ..."); done ones omitted."""
        return [f"{_MARK[t.status]} {t.content}" for t in self.todos if t.status != "completed"]

    def set_todos(self, items: Sequence[Mapping[str, object] | TodoItem]) -> None:
        self.todos = [_todo(i) for i in items]

    def to_dict(self) -> JSONObject:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, JSON]) -> SessionState:
        todos, plan_file = data.get("todos", []), data.get("plan_file")
        if not isinstance(todos, list):
            raise ContextFoldError(f"todos must be a list, got {type(todos).__name__}")
        return cls(
            plan_mode=bool(data.get("plan_mode", False)),
            plan_file=plan_file if isinstance(plan_file, str) else None,
            todos=[_todo(t) for t in todos],
            background_tasks=[
                t for t in as_list(data.get("background_tasks")) if isinstance(t, dict)
            ],
            permissions=as_object(data.get("permissions")),
        )


def _todo(item: object) -> TodoItem:
    """A todo item, or a mapping ``{"content": str, "status": str}`` made one."""
    if isinstance(item, TodoItem):
        return item
    fields = dict(item) if isinstance(item, Mapping) else None
    content = fields.pop("content", None) if fields is not None else None
    status = fields.pop("status", "pending") if fields is not None else None
    if fields or not isinstance(content, str) or not isinstance(status, str):
        raise ContextFoldError(f"a todo item is {{'content': str, 'status': str}}, got {item!r}")
    return TodoItem(content=content, status=status)


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
