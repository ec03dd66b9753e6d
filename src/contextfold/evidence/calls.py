"""The calls of a session in order, and which calls a file path names (pure data).

Ordinals in recall questions ("the second run", 第二次) count over :class:`CallLog`, which holds
every tool call of the session, also those whose output is still in the view.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ..core.messages import ToolCall
from ..jsontypes import JSON, JSONObject  # noqa: F401 (JSON: for get_type_hints)
from .fields import CallFields, call_fields, call_key, path_suffixes
from .model import EvidencePointer
from .understand import kind_matches, subject_matches


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
    what ordinals count over. Grown with :meth:`add`; positions are 0-based call numbers.

    Adding a call only records it (a reopened session adds thousands at once); what makes two
    calls "the same call" (:func:`.fields.call_key`, which normalizes the command) is worked
    out when :meth:`runs` asks for it, and only for the calls that can match."""

    def __init__(self) -> None:
        self.positions: dict[str, int] = {}
        self.edits: list[int] = []
        self._fields: list[CallFields] = []
        #: position -> its call key, for the calls a runs() question has looked at
        self._keys: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self.positions)

    def add(self, call_id: str, fields: CallFields) -> None:
        if call_id in self.positions:
            return
        pos = len(self._fields)
        self.positions[call_id] = pos
        self._fields.append(fields)
        if fields.action in ("edit", "write"):
            self.edits.append(pos)

    def _key(self, pos: int) -> str:
        key = self._keys.get(pos)
        if key is None:
            f = self._fields[pos]
            key = self._keys[pos] = "call:" + call_key(f.tool, f.command, f.shell)
        return key

    def runs(self, key: str) -> list[int]:
        """Positions of the calls under ``key`` (``call:...``, ``read:<path>`` or
        ``kind:<kind>:<path>``: the calls whose output is of that kind, about that path)."""
        if key.startswith("kind:"):
            return self._kind_runs(*key[5:].split(":", 1))
        if key.startswith("read:"):
            qp = key[5:]
            name = qp.rsplit("/", 1)[-1]  # a path matching qp ends with its last component
            return [
                pos
                for pos, f in enumerate(self._fields)
                if f.action == "read"
                and any(name in p for p in f.paths)
                and path_strength([qp], f.paths)
            ]
        # the key ends with the normalized command, whose words are all in the command as
        # written: a call without the key's last word (or, for a one-word command, the end
        # of it) cannot have this key, unless its tool name has blanks of its own
        words = key.split()
        word = words[-1] if len(words) > 1 else key.rsplit(":", 1)[-1]
        return [
            pos
            for pos, f in enumerate(self._fields)
            if (word in f.command or len(f.tool.split()) != 1) and self._key(pos) == key
        ]

    def _kind_runs(self, kind: str, about: str) -> list[int]:
        """Calls whose output is of ``kind``: about the path ``about``, or ``=<subject>``
        the subject named with the kind (:func:`.understand.subject_matches`)."""
        subject = about[1:] if about.startswith("=") else ""
        qp = "" if subject else about
        name = qp.rsplit("/", 1)[-1]
        out: list[int] = []
        for pos, f in enumerate(self._fields):
            if qp and not (any(name in p for p in f.paths) and path_strength([qp], f.paths)):
                continue
            p = EvidencePointer(
                id="",
                command=f.command,
                tool_name=f.tool,
                action=f.action,
                shell=f.shell,
                patterns=f.patterns,
            )
            if kind_matches(kind, p, False) and (not subject or subject_matches(kind, subject, p)):
                out.append(pos)
        return out


def stored_calls(calls: Iterable[ToolCall]) -> list[JSONObject]:
    """What a message's tool calls were about, as stored with the message (a reopened
    session's call log is then read, not re-derived by parsing every command again)."""
    out: list[JSONObject] = []
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


def load_calls(raw: object) -> list[tuple[str, CallFields]] | None:
    """The stored form back (None when missing or not in that form: derive it again).

    Run for every message with calls when a session is reopened: plain JSON values take a
    fast path (exact type checks), anything else the general one."""
    if not isinstance(raw, list):
        return None
    out: list[tuple[str, CallFields]] = []
    for item in raw:
        if type(item) is not dict and not isinstance(item, Mapping):
            return None
        get = item.get
        cid, tool, command = get("id"), get("tool"), get("command")
        paths, action, shell = get("paths"), get("action"), get("shell")
        if not (
            (type(cid) is str or isinstance(cid, str))
            and (type(tool) is str or isinstance(tool, str))
            and (type(command) is str or isinstance(command, str))
            and (type(action) is str or isinstance(action, str))
            and isinstance(shell, bool)
            and (type(paths) is list or isinstance(paths, list))
        ):
            return None
        for path in paths:
            if type(path) is not str and not isinstance(path, str):
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
