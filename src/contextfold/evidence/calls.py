"""The calls of a session in order, and which calls a file path names (pure data).

Ordinals in recall questions ("the second run", 第二次) count over :class:`CallLog`, which holds
every tool call of the session, also those whose output is still in the view.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .fields import CallFields, call_fields, call_key, path_suffixes


def path_strength(query_paths: Sequence[str], pointer_paths: Iterable[str]) -> int:
    """Components in common when one path is a suffix of the other (0: no match)."""
    best = 0
    for pp in pointer_paths:
        sufs = path_suffixes(pp)
        if not sufs:
            continue
        full = sufs[0]
        for qp in query_paths:
            if qp in sufs:
                best = max(best, qp.count("/") + 1)
            elif full in path_suffixes(qp):
                best = max(best, full.count("/") + 1)
    return best


class CallLog:
    """Every tool call of a session in order (also those whose output is still in view):
    what ordinals count over. Grown with :meth:`add`; positions are 0-based call numbers."""

    def __init__(self) -> None:
        self.positions: dict[str, int] = {}
        self._keys: dict[str, list[int]] = {}
        self._reads: list[tuple[int, tuple[str, ...]]] = []
        self.edits: list[int] = []

    def __len__(self) -> int:
        return len(self.positions)

    def add(self, call_id: str, fields: CallFields) -> None:
        if call_id in self.positions:
            return
        pos = len(self.positions)
        self.positions[call_id] = pos
        self._keys.setdefault("call:" + call_key(fields.tool, fields.command, fields.shell), [])
        self._keys["call:" + call_key(fields.tool, fields.command, fields.shell)].append(pos)
        if fields.action == "read":
            self._reads.append((pos, fields.paths))
        elif fields.action in ("edit", "write"):
            self.edits.append(pos)

    def runs(self, key: str) -> list[int]:
        """Positions of the calls under ``key`` (``call:...`` or ``read:<path>``)."""
        if key.startswith("read:"):
            qp = key[5:]
            return [pos for pos, paths in self._reads if path_strength([qp], paths)]
        return list(self._keys.get(key, ()))


def stored_calls(calls: Iterable[Any]) -> list[dict[str, Any]]:
    """What a message's tool calls were about, as stored with the message (a reopened
    session's call log is then read, not re-derived by parsing every command again)."""
    out: list[dict[str, Any]] = []
    for call in calls:
        f = call_fields(call.name, call.arguments)
        out.append(
            {
                "id": call.id,
                "tool": f.tool,
                "command": f.command,
                "paths": list(f.paths),
                "action": f.action,
                "shell": f.shell,
            }
        )
    return out


def load_calls(raw: Any) -> list[tuple[str, CallFields]] | None:
    """The stored form back (None when missing or not in that form: derive it again)."""
    if not isinstance(raw, list):
        return None
    out: list[tuple[str, CallFields]] = []
    for item in raw:
        if not isinstance(item, Mapping):
            return None
        cid, tool, command = item.get("id"), item.get("tool"), item.get("command")
        paths, action, shell = item.get("paths"), item.get("action"), item.get("shell")
        if not (
            isinstance(cid, str)
            and isinstance(tool, str)
            and isinstance(command, str)
            and isinstance(action, str)
            and isinstance(shell, bool)
            and isinstance(paths, list)
            and all(isinstance(p, str) for p in paths)
        ):
            return None
        out.append(
            (
                cid,
                CallFields(
                    tool=tool, command=command, paths=tuple(paths), action=action, shell=shell
                ),
            )
        )
    return out


__all__ = ["CallLog", "load_calls", "path_strength", "stored_calls"]
