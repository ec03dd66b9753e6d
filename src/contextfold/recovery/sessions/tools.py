"""Agent tools over past sessions: ``session_list``, ``session_history``, ``session_search``.

Scoped by agent id: an agent sees its own sessions, plus those of the agents named in
``allow_agents`` (``"*"`` allows every agent). Any other request is a tool error (raised as
:class:`ToolArgumentsError`, which the :class:`~contextfold.core.tools.ToolBox` turns into a tool
error message). Session ids are checked before any path is built, so ``../../etc/passwd`` is
an error, never a path escape.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping

from ...core.messages import Message
from ...core.paths import check_session_id
from ...core.tools import Tool
from ...errors import StorageError, ToolArgumentsError, UnsafeIdError
from .index import SessionIndex
from .log import LogEntry, read_entries

DEFAULT_LAST_N = 20
MAX_LAST_N = 200
DEFAULT_MAX_CHARS = 2_000
MAX_CHARS_CAP = 200_000


class _Scope:
    def __init__(self, agent_id: str, allow_agents: Collection[str]) -> None:
        self.agent_id = agent_id
        self.allowed = frozenset(allow_agents)

    def check(self, target: str) -> str:
        if target == self.agent_id or "*" in self.allowed or target in self.allowed:
            return target
        raise ToolArgumentsError(
            f"access denied: agent {self.agent_id!r} may not read the sessions of agent "
            f"{target!r} (not in allow_agents)"
        )

    def check_quiet(self, target: str) -> bool:
        return target == self.agent_id or "*" in self.allowed or target in self.allowed

    def target(self, args: Mapping[str, object]) -> str | None:
        """The agent to act on: own by default; ``None`` means every allowed agent ("*")."""
        raw = args.get("agentId")
        if raw is None or raw == "":
            return self.agent_id
        if raw == "*":
            if "*" not in self.allowed:
                raise ToolArgumentsError(
                    f"access denied: agent {self.agent_id!r} may not search all agents"
                )
            return None
        return self.check(str(raw))


def _session_id(args: Mapping[str, object]) -> str:
    raw = args.get("sessionId")
    try:
        return check_session_id(raw)  # type: ignore[arg-type]
    except UnsafeIdError as exc:
        raise ToolArgumentsError(f"session_history: {exc}") from None


def _int_arg(args: Mapping[str, object], key: str, default: int, lo: int, hi: int) -> int:
    value = args.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < lo:
        raise ToolArgumentsError(f"argument {key!r} must be an integer >= {lo}")
    return min(value, hi)


def render_message(
    entry: LogEntry,
    *,
    max_chars: int,
    session_id: str,
    offset: int | None = None,
    char_offset: int = 0,
    whole_hint: bool = False,
) -> str:
    """One log entry as text: ``[seq] role: text`` plus tool calls; a long text shows
    ``max_chars`` characters from ``char_offset`` and says how to read the next part (with
    ``whole_hint``, for a reader without the tool's cap: how to read all of it at once)."""
    msg: Message = entry.message
    head = f"[{entry.seq}] {msg.role}"
    if msg.role == "tool" and msg.tool_call_id:
        head += f" (call {msg.tool_call_id})"
    if msg.name:
        head += f" ({msg.name})"
    parts = [head + ":"]
    text = msg.text
    total = len(text)
    start = min(char_offset, total)
    if start or total - start > max_chars:
        end = min(total, start + max(0, max_chars))
        text = text[start:end]
        if start:
            text = f"[characters {start:,}-{end:,} of {total:,}]\n" + text
        if end < total and whole_hint:
            text += (
                f"\n… [{total - end:,} more characters; read the whole message with "
                f'session_history {{"sessionId": "{session_id}", '
                f'"offset": {"OFFSET" if offset is None else offset}, "lastN": 1, '
                f'"maxChars": {total}}}]'
            )
        elif end < total:
            # the next part, from where this one stops: following hints never loops
            text += (
                f"\n… [{total - end:,} more characters; read on with session_history "
                f'{{"sessionId": "{session_id}", '
                f'"offset": {"OFFSET" if offset is None else offset}, "lastN": 1, '
                f'"maxChars": {min(total - end, MAX_CHARS_CAP)}, "charOffset": {end}}}]'
            )
    if text:
        parts.append(text)
    for call in msg.tool_calls:
        args = call.arguments
        if len(args) > max_chars:
            args = args[:max_chars] + f"… [{len(call.arguments) - max_chars:,} more characters]"
        parts.append(f"-> call {call.name} (id {call.id}): {args}")
    return "\n".join(parts)


def _session_history(
    index: SessionIndex, scope: _Scope, args: Mapping[str, object], max_result_chars: int
) -> str:
    """``session_history``: a page of a session's raw messages, newest last."""
    sid = _session_id(args)
    last_n = _int_arg(args, "lastN", DEFAULT_LAST_N, 1, MAX_LAST_N)
    offset = _int_arg(args, "offset", 0, 0, 10**9)
    max_chars = _int_arg(args, "maxChars", max_result_chars, 1, MAX_CHARS_CAP)
    char_offset = _int_arg(args, "charOffset", 0, 0, 10**12)
    info = index.store.session(sid)
    if info is None:
        raise ToolArgumentsError(f"session_history: no session {sid!r}")
    owner = info.agent_id
    wanted = args.get("agentId")
    if wanted not in (None, "") and wanted != owner:
        raise ToolArgumentsError(
            f"session_history: session {sid!r} does not belong to agent {wanted!r}"
        )
    scope.check(owner)
    try:
        # only the newest lastN + offset messages are read, never the whole log
        entries = read_entries(index.store, sid, last=last_n + offset)
    except StorageError as exc:
        raise ToolArgumentsError(f"session_history: cannot read session {sid!r}: {exc}") from None
    total = info.messages
    base = total - len(entries)  # position of entries[0]
    stop = max(0, total - offset)
    start = max(0, stop - last_n)
    chosen = entries[max(0, start - base) : max(0, stop - base)] if stop > start else []
    header = (
        f"Session {sid} (agent {owner}): messages {start}-{stop - 1} of {total} "
        f"(seq numbers; oldest first)."
        if chosen
        else f"Session {sid} (agent {owner}) has {total} messages; offset {offset} is past "
        f"the start."
    )
    body = [
        render_message(
            e,
            max_chars=max_chars,
            session_id=sid,
            offset=total - 1 - (start + i),
            char_offset=char_offset,
        )
        for i, e in enumerate(chosen)
    ]
    more = []
    if start > 0:
        more.append(
            f"{start} earlier message(s): call session_history with "
            f'{{"sessionId": "{sid}", "offset": {total - start}, "lastN": {last_n}}}.'
        )
    return "\n\n".join([header, *body, *more])


def _session_search(index: SessionIndex, scope: _Scope, args: Mapping[str, object]) -> str:
    """``session_search``: full-text hits over the sessions the agent may read."""
    query = args.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ToolArgumentsError("session_search: 'query' must be a non-empty string")
    target = scope.target(args)
    limit = _int_arg(args, "limit", 10, 1, 50)
    sid: str | None = None
    if args.get("sessionId") not in (None, ""):
        sid = _session_id(args)
        owner = index.session_agent(sid)
        if owner is None:
            raise ToolArgumentsError(f"session_search: no indexed session {sid!r}")
        if target is not None and owner != target:
            raise ToolArgumentsError(
                f"session_search: session {sid!r} does not belong to agent {target!r}"
            )
        target = scope.check(owner)
    if target is None and "*" in scope.allowed:
        hits = index.search(query, agent_id=None, limit=limit, session_id=sid)
    else:
        hits = index.search(query, agent_id=target, limit=limit, session_id=sid)
    if not hits:
        return f"No matches for {json.dumps(query, ensure_ascii=False)}."
    lines = [f"{len(hits)} match(es) for {json.dumps(query, ensure_ascii=False)}, best first:"]
    for h in hits:
        lines.append(
            f"- session {h.session_id} seq {h.seq} ({h.role}, {h.ts}, agent {h.agent_id}): "
            f"{h.snippet}"
        )
    lines.append('Read around a hit with session_history {"sessionId": ..., "offset": ...}.')
    return "\n".join(lines)


def session_tools(
    index: SessionIndex | Callable[[], SessionIndex],
    *,
    agent_id: str,
    allow_agents: Collection[str] = (),
    max_result_chars: int = DEFAULT_MAX_CHARS,
) -> list[Tool]:
    """The three session tools for one agent. ``index`` may be a function that returns the
    index, called when a tool runs: building the tools (for their schemas) then opens nothing."""
    scope = _Scope(agent_id, allow_agents)
    opened = index if callable(index) else (lambda: index)

    def session_list(args: Mapping[str, object]) -> str:
        target = scope.target(args)
        metas = opened().list_sessions(target)
        who = "all allowed agents" if target is None else f"agent {target!r}"
        if not metas:
            return f"No sessions for {who}."
        lines = [f"{len(metas)} session(s) for {who}, most recent first:"]
        for m in metas:
            lines.append(
                f"- {m.session_id} (agent {m.agent_id}, {m.message_count} messages, "
                f"updated {m.updated_at}): {m.title or '(no user message)'}"
            )
        return "\n".join(lines)

    def session_history(args: Mapping[str, object]) -> str:
        return _session_history(opened(), scope, args, max_result_chars)

    def session_search(args: Mapping[str, object]) -> str:
        return _session_search(opened(), scope, args)

    agent_prop = {
        "type": "string",
        "description": "Agent whose sessions to use (default: your own; '*' for all allowed).",
    }
    return [
        Tool(
            name="session_list",
            description="List past sessions (id, size, last update, first user message).",
            parameters={
                "type": "object",
                "properties": {"agentId": agent_prop},
                "required": [],
            },
            handler=session_list,
        ),
        Tool(
            name="session_history",
            description=(
                "Read the raw, never-compacted messages of a past or current session, newest "
                "last. Page backwards with offset (number of newest messages to skip)."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "sessionId": {"type": "string", "description": "Session id."},
                    "agentId": agent_prop,
                    "lastN": {
                        "type": "integer",
                        "minimum": 1,
                        "description": f"How many messages (default {DEFAULT_LAST_N}).",
                    },
                    "offset": {
                        "type": "integer",
                        "minimum": 0,
                        "description": "Skip this many newest messages first (default 0).",
                    },
                    "maxChars": {
                        "type": "integer",
                        "minimum": 1,
                        "description": (
                            f"Trim each message to this many characters (default "
                            f"{max_result_chars}, at most {MAX_CHARS_CAP})."
                        ),
                    },
                    "charOffset": {
                        "type": "integer",
                        "minimum": 0,
                        "description": (
                            "Start each message's text at this character (default 0): read a "
                            "long message part by part."
                        ),
                    },
                },
                "required": ["sessionId"],
            },
            handler=session_history,
        ),
        Tool(
            name="session_search",
            description=(
                "Full-text search over past sessions' raw messages; ranked hits with snippets, "
                "session id and seq."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "Words to look for."},
                    "agentId": agent_prop,
                    "sessionId": {"type": "string", "description": "Only this session."},
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "description": "Maximum hits (default 10, at most 50).",
                    },
                },
                "required": ["query"],
            },
            handler=session_search,
        ),
    ]


#: Who may read whose sessions (an agent id plus its ``allow_agents``); used by the MCP server.
AgentScope = _Scope

__all__ = ["AgentScope", "render_message", "session_tools"]
