"""LangChain v1 middleware: ``create_agent(model, tools, middleware=[ContextFoldMiddleware(cm)])``.

* Every model call sees contextfold's view of the conversation (compacted, big tool results
  offloaded, evidence injected when the user asks for it), converted back to LangChain messages.
* A context-overflow error from the model is recovered once: contextfold compacts hard and the
  call is retried with the smaller view (``ContextOverflowError`` if it still does not fit).
* contextfold's agent tools (``recall``, ``read_offloaded``, ``session_*``, ``memory_*``) are
  registered on the agent (``middleware.tools``) and answered from the session.
* Sync (``invoke``/``stream``) and async (``ainvoke``/``astream``).

History: LangGraph's state (and its checkpointer) stays the source of truth the agent loop sees
and is never rewritten; contextfold's log mirrors it append-only, keyed by position and checked by
content before every model call (each LangChain message id travels with its logged copy). Edits
or removals of messages already logged raise :class:`HistoryDivergedError`. One middleware
serves one contextfold session, or one per LangGraph thread with a ``thread_id -> ContextManager``
factory.

Order: middleware listed before this one (outer) hand it their edited request, which is what gets
logged; list ``ContextFoldMiddleware`` first so the others see, and may adjust, its view.
"""

from __future__ import annotations

import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Generic

from ..extras import needs_extra

try:
    from langchain.agents.middleware.types import (
        AgentMiddleware,
        AgentState,
        ModelRequest,
        ModelResponse,
        ResponseT,
    )
    from langchain_core.messages import (
        AIMessage,
        AnyMessage,
        BaseMessage,
        SystemMessage,
        ToolMessage,
        convert_to_messages,
        convert_to_openai_messages,
    )
    from langchain_core.tools import BaseTool, StructuredTool
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langgraph.config import get_config
    from langgraph.runtime import Runtime
    from langgraph.typing import ContextT
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise ImportError(
        needs_extra("contextfold.integrations.langchain (LangChain v1)", "langchain", exc)
    ) from exc

from ..engine.manager import ContextManager
from ..errors import ContextFoldError
from ._common import REF, HistoryDivergedError, HistoryMirror, fingerprint, input_tokens_of

_SYSTEM_REF = "system"


def to_openai_dict(message: BaseMessage, ref: str | None = None) -> dict[str, object]:
    """One LangChain message in OpenAI Chat Completions form, tagged with its id (or ``ref``)."""
    converted = convert_to_openai_messages(message)
    out: dict[str, object] = dict(converted) if isinstance(converted, Mapping) else {}
    if isinstance(message, ToolMessage) and not isinstance(out.get("content"), str):
        out["content"] = message.text  # contextfold offloads and recalls tool output as text
    ref = ref or message.id
    if ref:
        out[REF] = ref
    return out


def from_openai_dict(message: Mapping[str, object]) -> BaseMessage:
    """A view message contextfold built (summary, placeholder, evidence) as a LangChain one."""
    clean = {k: v for k, v in message.items() if k != REF}
    return convert_to_messages([clean])[0]


def _tools_schemas(tools: Sequence[BaseTool | dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for tool in tools:
        try:
            out.append(convert_to_openai_tool(tool))
        except (ValueError, TypeError, NotImplementedError):
            continue  # provider built-in tools: not counted
    return out


class _Call(Generic[ContextT]):
    """One model call: the request's messages as OpenAI dicts and the way back."""

    def __init__(self, request: ModelRequest[ContextT]) -> None:
        self.request = request
        self.system = request.system_message
        self.dicts = [to_openai_dict(m) for m in request.messages]
        self.system_dict = (
            to_openai_dict(self.system, _SYSTEM_REF) if self.system is not None else None
        )
        self.by_ref: dict[str, tuple[BaseMessage, str]] = {}
        for msg, d in zip(request.messages, self.dicts):
            ref = d.get(REF)
            if isinstance(ref, str):
                self.by_ref[ref] = (msg, fingerprint(d))

    def request_for(self, view: list[dict[str, Any]]) -> ModelRequest[ContextT]:
        system: SystemMessage | None = None
        messages: list[AnyMessage] = []
        for i, item in enumerate(view):
            ref = item.get(REF)
            if item.get("role") == "system" and i == 0:
                # the current system prompt (it may be dynamic); contextfold logged the first
                if ref == _SYSTEM_REF and self.system is not None:
                    system = self.system
                else:
                    system = SystemMessage(content=item.get("content") or "")
                continue
            known = self.by_ref.get(ref) if isinstance(ref, str) else None
            if known is not None and known[1] == fingerprint(item):
                messages.append(known[0])  # type: ignore[arg-type]
            elif known is not None and isinstance(known[0], ToolMessage):
                messages.append(known[0].model_copy(update={"content": item.get("content")}))
            else:
                messages.append(from_openai_dict(item))  # type: ignore[arg-type]
        if system is None and self.system is not None:
            system = self.system
        return self.request.override(messages=messages, system_message=system)


def _report(manager: ContextManager, response: ModelResponse[Any]) -> None:
    for msg in response.result:
        if isinstance(msg, AIMessage) and msg.usage_metadata:
            tokens = input_tokens_of(msg.usage_metadata)
            if tokens is not None:
                manager.report_usage(input_tokens=tokens)
            return


class ContextFoldMiddleware(AgentMiddleware[AgentState[ResponseT], ContextT, ResponseT]):
    """contextfold as a LangChain ``AgentMiddleware`` (see the module docstring).

    ``sessions`` is one ``ContextManager`` (one conversation), or a callable ``thread_id ->
    ContextManager`` so one compiled agent serves many LangGraph threads, each in its own
    contextfold session (the thread id comes from ``config["configurable"]["thread_id"]``)."""

    def __init__(
        self,
        sessions: ContextManager | Callable[[str], ContextManager],
        *,
        offer_tools: bool = True,
    ) -> None:
        super().__init__()
        self._fixed: tuple[ContextManager, HistoryMirror] | None = None
        self._factory: Callable[[str], ContextManager] | None = None
        self._threads: dict[str, tuple[ContextManager, HistoryMirror]] = {}
        if isinstance(sessions, ContextManager):
            self._fixed = (sessions, HistoryMirror(sessions))
            schemas = sessions.tool_schemas()
        elif callable(sessions):
            self._factory = sessions
            with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
                schemas = ContextManager(tmp, "tool-schemas").tool_schemas()
        else:
            raise TypeError(
                "ContextFoldMiddleware needs a ContextManager or a callable thread_id -> "
                f"ContextManager, got {type(sessions).__name__}"
            )
        self.tools = self._make_tools(schemas) if offer_tools else []

    @property
    def name(self) -> str:
        return "ContextFoldMiddleware"

    def session(self) -> tuple[ContextManager, HistoryMirror]:
        """The contextfold session (and its mirror) of the current LangGraph thread."""
        if self._fixed is not None:
            return self._fixed
        configurable = get_config().get("configurable") or {}
        thread_id = configurable.get("thread_id")
        if thread_id is None:
            raise ContextFoldError(
                "ContextFoldMiddleware with a session factory needs a thread id: invoke the "
                'agent with config={"configurable": {"thread_id": ...}}'
            )
        key = str(thread_id)
        if key not in self._threads:
            assert self._factory is not None
            manager = self._factory(key)
            self._threads[key] = (manager, HistoryMirror(manager))
        return self._threads[key]

    # ------------------------------------------------------------------ tools
    def _make_tools(self, schemas: list[dict[str, Any]]) -> list[BaseTool]:
        tools: list[BaseTool] = []
        for schema in schemas:
            fn = schema["function"]
            tool_name = str(fn["name"])

            def run(_name: str = tool_name, **kwargs: Any) -> str:
                return self.session()[0].toolbox.run(_name, kwargs)[0]

            async def arun(_name: str = tool_name, **kwargs: Any) -> str:
                return run(_name, **kwargs)

            tools.append(
                StructuredTool(
                    name=tool_name,
                    description=str(fn.get("description", "")),
                    args_schema=dict(fn.get("parameters") or {"type": "object"}),
                    func=run,
                    coroutine=arun,
                )
            )
        return tools

    # ------------------------------------------------------------------ model calls
    def _prepare(
        self, request: ModelRequest[ContextT]
    ) -> tuple[ContextManager, _Call[ContextT], list[dict[str, Any]]]:
        manager, mirror = self.session()
        call = _Call(request)
        mirror.sync(call.dicts, call.system_dict)
        return manager, call, _tools_schemas(request.tools)

    def wrap_model_call(
        self,
        request: ModelRequest[ContextT],
        handler: Callable[[ModelRequest[ContextT]], ModelResponse[ResponseT]],
    ) -> ModelResponse[ResponseT]:
        manager, call, schemas = self._prepare(request)
        response = manager.call(lambda view: handler(call.request_for(view)), tools=schemas)
        _report(manager, response)
        return response

    async def awrap_model_call(
        self,
        request: ModelRequest[ContextT],
        handler: Callable[[ModelRequest[ContextT]], Awaitable[ModelResponse[ResponseT]]],
    ) -> ModelResponse[ResponseT]:
        manager, call, schemas = self._prepare(request)
        response = await manager.acall(lambda view: handler(call.request_for(view)), tools=schemas)
        _report(manager, response)
        return response

    # ------------------------------------------------------------------ end of a run
    def after_agent(
        self, state: AgentState[ResponseT], runtime: Runtime[ContextT]
    ) -> dict[str, object] | None:
        """Log the run's final answer now (not only at the next model call)."""
        self.session()[1].sync([to_openai_dict(m) for m in state["messages"]])
        return None

    async def aafter_agent(
        self, state: AgentState[ResponseT], runtime: Runtime[ContextT]
    ) -> dict[str, object] | None:
        return self.after_agent(state, runtime)


__all__ = ["ContextFoldMiddleware", "HistoryDivergedError", "from_openai_dict", "to_openai_dict"]
