"""contextfold's agent tools over a whole workspace, without a live ContextManager.

The MCP server and the ``contextfold sessions`` command answer for sessions they did not
write and that other processes may still be writing. :class:`WorkspaceTools` offers the same
tools an agent gets from ``ContextManager.toolbox`` (``recall``, ``read_offloaded``,
``session_list`` / ``session_history`` / ``session_search``, ``memory_search`` /
``memory_get``), answered by the same handlers, with two differences: ``recall`` and
``read_offloaded`` take a ``sessionId`` (there is no current session), and every call first
catches up with what other processes wrote since the last one.

Access is scoped like the session tools: an agent reads its own sessions and those of the
agents in ``allow_agents`` (``"*"``: every agent); anything else is a tool error.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Collection, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from .errors import ConfigError, ToolArgumentsError, UnsafeIdError
from .evidence.search import EvidenceSearch
from .evidence.store import EvidenceStore
from .evidence.tools import DESCRIPTION as RECALL_DESCRIPTION
from .evidence.tools import PARAMETERS as RECALL_PARAMETERS
from .evidence.tools import recall_tool
from .memory import MemoryStore, memory_tools
from .offload import OffloadStore
from .offload_tool import READ_OFFLOADED_DESCRIPTION, READ_OFFLOADED_PROPERTIES, read_offloaded
from .paths import Workspace, check_session_id
from .sessions.index import SessionIndex
from .sessions.log import SessionLog
from .sessions.tools import AgentScope, session_tools
from .tools import Tool, ToolBox

#: sessions whose evidence index stays in memory between calls (a long-running server)
MAX_OPEN_SESSIONS = 16

SESSION_ID_PROP: Mapping[str, Any] = {
    "type": "string",
    "description": "The session to read (an id from session_list or session_search).",
}


def open_workspace(path: str | Path) -> Workspace:
    """The workspace at ``path``; ConfigError "no workspace at DIR" when it is not there."""
    root = Path(path)
    if not root.is_dir():
        raise ConfigError(f"no workspace at {root}")
    return Workspace.at(root)


class _Transcript:
    """uuid -> text of one session's log, read when a restore first needs it, and again
    when a uuid is missing and the log has grown since."""

    def __init__(self, workspace: Workspace, session_id: str) -> None:
        self.workspace = workspace
        self.session_id = session_id
        self._texts: dict[str, str] = {}
        self._size = -1

    def __call__(self, message_uuid: str) -> str | None:
        if message_uuid not in self._texts:
            try:
                size = self.workspace.log_path(self.session_id).stat().st_size
            except OSError:
                return None
            if size != self._size:
                log = SessionLog(self.workspace, self.session_id)
                self._texts = {m.uuid: m.text for m in log.read()}
                self._size = size
        return self._texts.get(message_uuid)


class WorkspaceTools:
    """The agent tools of one workspace, as seen by one agent."""

    def __init__(
        self,
        workspace: str | Path,
        *,
        agent_id: str = "default",
        allow_agents: Collection[str] = (),
    ) -> None:
        self.ws = open_workspace(workspace)
        try:
            self.agent_id = check_session_id(agent_id)
        except UnsafeIdError as exc:
            raise ConfigError(f"agent id: {exc}") from None
        self.allow_agents = frozenset(allow_agents)
        self.scope = AgentScope(self.agent_id, self.allow_agents)
        self.index = SessionIndex(self.ws)
        #: per-session evidence indexes, most recently used last (at most MAX_OPEN_SESSIONS)
        self._evidence: OrderedDict[str, tuple[EvidenceStore, EvidenceSearch]] = OrderedDict()
        self._lock = threading.Lock()
        box = ToolBox([self._recall(), self._read_offloaded()])
        for tool in session_tools(
            self.index, self.ws, agent_id=self.agent_id, allow_agents=self.allow_agents
        ):
            box.register(self._synced(tool))
        for tool in memory_tools(MemoryStore(self.ws)):
            box.register(tool)
        self.toolbox = box

    # ------------------------------------------------------------------ calling
    def tools(self) -> list[Tool]:
        return [t for name in self.toolbox.names() if (t := self.toolbox.get(name)) is not None]

    def call(self, name: str, arguments: str | Mapping[str, Any]) -> tuple[str, bool]:
        """Run one tool; returns (text, is_error). Never raises for bad input. Calls are
        serialized: the per-session search indexes are not thread-safe."""
        with self._lock:
            return self.toolbox.run(name, arguments)

    def close(self) -> None:
        self.index.close()

    # ------------------------------------------------------------------ scoping
    def _synced(self, tool: Tool) -> Tool:
        """A session tool that first indexes what other processes appended."""
        inner = tool.handler

        def handler(args: Mapping[str, Any]) -> str:
            self.index.sync()
            return inner(args)

        return replace(tool, handler=handler)

    def _owned_session(self, args: Mapping[str, Any], tool: str) -> str:
        """The ``sessionId`` argument, checked: it exists and this agent may read it."""
        try:
            sid = check_session_id(args.get("sessionId"))  # type: ignore[arg-type]
        except UnsafeIdError as exc:
            raise ToolArgumentsError(f"{tool}: {exc}") from None
        log = SessionLog(self.ws, sid)
        if not log.exists():
            raise ToolArgumentsError(f"{tool}: no session {sid!r}")
        self.scope.check(log.agent_id)
        return sid

    # ------------------------------------------------------------------ recall
    def _evidence_of(self, sid: str) -> tuple[EvidenceStore, EvidenceSearch]:
        got = self._evidence.get(sid)
        if got is None:
            store = EvidenceStore(
                self.ws.session_dir(sid), transcript_lookup=_Transcript(self.ws, sid)
            )
            got = (store, EvidenceSearch(store))
            self._evidence[sid] = got
            while len(self._evidence) > MAX_OPEN_SESSIONS:
                self._evidence.popitem(last=False)
        self._evidence.move_to_end(sid)
        got[1].sync()
        return got

    def _recall(self) -> Tool:
        def handler(args: Mapping[str, Any]) -> str:
            sid = self._owned_session(args, "recall")
            store, search = self._evidence_of(sid)
            rest = {k: v for k, v in args.items() if k != "sessionId"}
            return recall_tool(search, store).handler(rest)

        return Tool(
            name="recall",
            description=RECALL_DESCRIPTION + " Name the session with sessionId.",
            parameters={
                "type": "object",
                "properties": {"sessionId": SESSION_ID_PROP, **RECALL_PARAMETERS["properties"]},
                "required": ["sessionId"],
            },
            handler=handler,
        )

    # ------------------------------------------------------------------ read_offloaded
    def _read_offloaded(self) -> Tool:
        def handler(args: Mapping[str, Any]) -> str:
            sid = self._owned_session(args, "read_offloaded")
            rest = {k: v for k, v in args.items() if k != "sessionId"}
            return read_offloaded([OffloadStore(self.ws, sid)], rest)

        return Tool(
            name="read_offloaded",
            description=READ_OFFLOADED_DESCRIPTION + " Name the session with sessionId.",
            parameters={
                "type": "object",
                "properties": {"sessionId": SESSION_ID_PROP, **READ_OFFLOADED_PROPERTIES},
                "required": ["sessionId"],
            },
            handler=handler,
        )


__all__ = ["WorkspaceTools", "open_workspace"]
