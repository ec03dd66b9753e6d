"""contextfold's agent tools over a whole workspace, without a live ContextManager.

The MCP server and the ``contextfold sessions`` command answer for sessions they did not
write and that other processes may still be writing. :class:`WorkspaceTools` offers the same
tools an agent gets from ``ContextManager.toolbox`` (``recall``, ``read_offloaded``,
``session_list`` / ``session_history`` / ``session_search``, ``memory_search`` /
``memory_get``), answered by the same handlers, with three differences: ``recall`` and
``read_offloaded`` take a ``sessionId`` (there is no current session), every call sees
what other processes have committed to the store (nothing is cached or rebuilt here), and
nothing is written (the agent's ``memory_add`` / ``memory_edit`` / ``memory_delete`` /
``memory_flush`` are not offered), except the evidence index and full-text rows a long first
request left queued: those jobs are run first, as the session's manager runs them, so the
answers are those indexing at once gives (a read-only store is read as it is).

Access is scoped like the session tools: an agent reads its own sessions and those of the
agents in ``allow_agents`` (``"*"``: every agent); anything else is a tool error.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Collection, Mapping
from pathlib import Path

from ..compaction.offload import OffloadStore
from ..core.paths import Workspace, check_session_id
from ..core.tools import Tool, ToolBox
from ..engine.filing import run_queued
from ..errors import ConfigError, ToolArgumentsError, UnsafeIdError
from ..evidence.search import EvidenceSearch
from ..evidence.store import EvidenceStore
from ..evidence.tools import DESCRIPTION as RECALL_DESCRIPTION
from ..evidence.tools import PARAMETERS as RECALL_PARAMETERS
from ..evidence.tools import recall_tool
from ..jsontypes import JSON, JSONObject
from ..recovery.memory import MemoryStore, memory_tools
from ..recovery.offload_tool import (
    READ_OFFLOADED_DESCRIPTION,
    READ_OFFLOADED_PROPERTIES,
    read_offloaded,
)
from ..recovery.sessions.index import SessionIndex
from ..recovery.sessions.log import entry_of
from ..recovery.sessions.tools import AgentScope, session_tools
from ..storage import Store
from ..storage.session import SessionStore

#: sessions whose evidence index stays in memory between calls (a long-running server)
MAX_OPEN_SESSIONS = 16

SESSION_ID_PROP: JSONObject = {
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
    """uuid -> text of one session's messages, read when a restore first needs it, and again
    when a uuid is missing and the session has grown since."""

    def __init__(self, store: Store, session_id: str) -> None:
        self.store = store
        self.session_id = session_id
        self._texts: dict[str, str] = {}
        self._head = -1

    def __call__(self, message_uuid: str) -> str | None:
        if message_uuid not in self._texts:
            head = self.store.head(self.session_id)
            if head != self._head:
                events = self.store.read(self.session_id, kinds=["message"])
                self._texts = {(e := entry_of(ev)).uuid: e.message.text for ev in events}
                self._head = head
        return self._texts.get(message_uuid)


class WorkspaceTools:
    """The agent tools of one workspace, as seen by one agent."""

    def __init__(
        self,
        workspace: str | Path | None = None,
        *,
        agent_id: str = "default",
        allow_agents: Collection[str] = (),
        store: Store | str | None = None,
    ) -> None:
        """A workspace folder, or ``store``: a store URL (``postgresql://...``) opened here, or
        a ``Store`` object used as is and left open."""
        from ..engine.export import open_cli_store

        if workspace is not None and isinstance(store, str):
            raise ConfigError("give a workspace folder or a store URL, not both")
        self._owns_store = not isinstance(store, Store)
        if isinstance(store, str):
            from ..storage import open_store

            #: the store every call reads (what other processes commit is seen at once)
            self.store: Store = open_store(store)
            self.where = self.store.url
        else:
            ws = open_workspace(workspace if workspace is not None else "./.contextfold")
            self.store = store if store is not None else open_cli_store(str(ws.root), None)
            self.where = str(ws.root)
        try:
            self.agent_id = check_session_id(agent_id)
        except UnsafeIdError as exc:
            raise ConfigError(f"agent id: {exc}") from None
        self.allow_agents = frozenset(allow_agents)
        self.scope = AgentScope(self.agent_id, self.allow_agents)
        self.index = SessionIndex(self.store)
        #: per-session evidence stores, most recently used last (at most MAX_OPEN_SESSIONS)
        self._evidence: OrderedDict[str, tuple[EvidenceStore, EvidenceSearch]] = OrderedDict()
        self._lock = threading.Lock()
        box = ToolBox([self._recall(), self._read_offloaded()])
        for tool in session_tools(
            self.index, agent_id=self.agent_id, allow_agents=self.allow_agents
        ):
            if tool.name == "session_search":
                tool = self._indexed_first(tool)
            box.register(tool)
        # memory as this agent sees it (never written from here)
        reader = SessionStore(self.store, "workspace-tools", self.agent_id)
        for tool in memory_tools(MemoryStore(reader, read_agents=tuple(self.allow_agents))):
            box.register(tool)
        self.toolbox = box

    # ------------------------------------------------------------------ calling
    def tools(self) -> list[Tool]:
        return [t for name in self.toolbox.names() if (t := self.toolbox.get(name)) is not None]

    def call(self, name: str, arguments: str | Mapping[str, JSON]) -> tuple[str, bool]:
        """Run one tool; returns (text, is_error). Never raises for bad input. Calls are
        serialized: the per-session search indexes are not thread-safe."""
        with self._lock:
            return self.toolbox.run(name, arguments)

    def close(self) -> None:
        if self._owns_store:
            self.store.close()

    # ------------------------------------------------------------------ scoping
    def _owned_session(self, args: Mapping[str, object], tool: str) -> str:
        """The ``sessionId`` argument, checked: it exists and this agent may read it."""
        try:
            sid = check_session_id(args.get("sessionId"))  # type: ignore[arg-type]
        except UnsafeIdError as exc:
            raise ToolArgumentsError(f"{tool}: {exc}") from None
        info = self.store.session(sid)
        if info is None:
            raise ToolArgumentsError(f"{tool}: no session {sid!r}")
        self.scope.check(info.agent_id)
        return sid

    # ------------------------------------------------------------------ deferred indexing
    def _indexed_first(self, tool: Tool) -> Tool:
        """``tool`` run after the indexing jobs queued in any session (a long first request's
        full-text rows, written after its answer): the ranking is over every session's rows."""
        inner = tool.handler

        def handler(args: Mapping[str, object]) -> str:
            run_queued(self.store)
            return inner(args)

        return dataclasses.replace(tool, handler=handler)

    # ------------------------------------------------------------------ recall
    def _evidence_of(self, sid: str) -> tuple[EvidenceStore, EvidenceSearch]:
        run_queued(self.store, [sid])  # the evidence index a long first request deferred
        got = self._evidence.get(sid)
        session = SessionStore(self.store, sid, "workspace-tools")
        if got is None or got[0].session.head != session.head:  # grown: read it afresh
            offloads = self._offloads(session)
            store = EvidenceStore(
                session,
                transcript_lookup=_Transcript(self.store, sid),
                offload_lookup=lambda path: self._offloaded_bytes(offloads, path),
            )
            got = (store, EvidenceSearch(store))
            self._evidence[sid] = got
            while len(self._evidence) > MAX_OPEN_SESSIONS:
                self._evidence.popitem(last=False)
        self._evidence.move_to_end(sid)
        return got

    @staticmethod
    def _offloads(session: SessionStore) -> list[OffloadStore]:
        events = list(session.read(kinds=["offload"]))
        stores = [OffloadStore(session), OffloadStore(session, name="offload_root")]
        for s in stores:
            s.load(events)
        return stores

    def _offloaded_bytes(self, stores: list[OffloadStore], path: str) -> bytes | None:
        for s in stores:
            entry = s.find(path)
            if entry is not None:
                return self.store.blobs.get(entry.sha256)
        return None

    def _recall(self) -> Tool:
        def handler(args: Mapping[str, object]) -> str:
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
        def handler(args: Mapping[str, object]) -> str:
            sid = self._owned_session(args, "read_offloaded")
            rest = {k: v for k, v in args.items() if k != "sessionId"}
            session = SessionStore(self.store, sid, "workspace-tools")
            return read_offloaded(self._offloads(session), rest)

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
