"""OpenAI Agents SDK (``openai-agents``), through its own extension points::

    model = ContextFoldModel(OpenAIResponsesModel("gpt-4.1", AsyncOpenAI()), cm)
    agent = Agent(name="coder", model=model, tools=[*my_tools, *contextfold_tools(cm)])
    result = await Runner.run(agent, task, session=ContextFoldSession(cm))

* :class:`ContextFoldModel` wraps any ``agents.Model``: each call sends contextfold's view of the
  input items and retries once after compacting when the provider reports a context overflow
  (``ContextOverflowError`` if it still does not fit). Streaming is retried when the overflow
  comes before the first event.
* :func:`context_filter` is the lighter alternative for ``RunConfig(call_model_input_filter=...)``
  when the model cannot be wrapped (a model given by name): the view, no overflow retry. Use one
  of the two, not both.
* :class:`ContextFoldSession` is a ``Session`` whose storage is contextfold's log, so the
  conversation is stored once: ``get_items`` returns the full history, ``add_items`` appends what
  the log does not hold yet (the model wrapper may have logged it already during the run).
* :func:`contextfold_tools` are contextfold's agent tools (recall, read_offloaded, session_*,
  memory_*) as ``FunctionTool``\\ s answered from the session.

Items and messages: a ``function_call_output`` is a tool message, a user or system item a user or
system message, and the items of one model response (``reasoning``, assistant ``message``,
``function_call`` and other output items) one assistant message whose original items travel with
the logged copy, so a view that keeps the turn sends the very items (reasoning included) back.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, cast

from ..extras import needs_extra

try:
    from agents import (
        Agent,
        FunctionTool,
        Handoff,
        Model,
        ModelResponse,
        ModelSettings,
        RunContextWrapper,
    )
    from agents.agent_output import AgentOutputSchemaBase
    from agents.items import TResponseInputItem, TResponseStreamEvent
    from agents.memory import SessionABC
    from agents.models.interface import ModelTracing
    from agents.retry import ModelRetryAdvice, ModelRetryAdviceRequest
    from agents.run_config import CallModelData, ModelInputData
    from agents.tool import Tool
    from openai.types.responses.response_prompt_param import ResponsePromptParam
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise ImportError(
        needs_extra(
            "contextfold.integrations.openai_agents (the OpenAI Agents SDK)", "openai-agents", exc
        )
    ) from exc

from ..core.overflow import is_context_overflow
from ..core.wire import to_openai
from ..engine.manager import ContextManager
from ..errors import ContextFoldError, ContextOverflowError
from ..jsontypes import as_object
from ._common import REF, HistoryMirror, fingerprint, input_tokens_of, logged_messages, openai_tool

#: wire extra of a logged assistant message: the Responses items it came from
ITEMS = "x_contextfold_items"

# --------------------------------------------------------------------------- conversion


def _text(content: Any) -> tuple[str, bool]:
    """(text, exact): exact when ``content`` is rebuilt by the text alone."""
    if isinstance(content, str):
        return content, True
    parts = []
    for part in content or []:
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind in ("input_text", "output_text", "text"):
            parts.append(str(part.get("text", "")))
        elif kind == "refusal":
            parts.append(str(part.get("refusal", "")))
        else:
            parts.append(f"[{kind or 'content'}]")
    return "".join(parts), False


def _assistant(items: list[dict[str, Any]], ref: int) -> dict[str, Any]:
    text = ""
    calls = []
    for item in items:
        if item.get("type") == "function_call":
            calls.append(
                {
                    "id": str(item.get("call_id")),
                    "type": "function",
                    "function": {
                        "name": str(item.get("name")),
                        "arguments": str(item.get("arguments") or "{}"),
                    },
                }
            )
        elif item.get("role") == "assistant":
            text += _text(item.get("content"))[0]
    out: dict[str, Any] = {"role": "assistant", "content": text or None, REF: str(ref)}
    if calls:
        out["tool_calls"] = calls
    out[ITEMS] = items
    return out


def to_openai_dicts(items: Sequence[TResponseInputItem] | str) -> list[dict[str, object]]:
    """Responses input items as OpenAI chat messages (see the module docstring)."""
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    out: list[dict[str, Any]] = []
    group: list[dict[str, Any]] = []
    start = 0
    for i, raw in enumerate(items):
        item = dict(cast(Mapping[str, Any], raw))
        kind = item.get("type")
        role = item.get("role")
        if kind == "function_call_output":
            output = item.get("output")
            text, exact = _text(output)
            msg: dict[str, Any] = {"role": "tool", "tool_call_id": str(item.get("call_id"))}
        elif role in ("user", "system", "developer") and kind in (None, "message"):
            text, exact = _text(item.get("content"))
            exact = exact and role != "developer" and set(item) <= {"role", "content", "type"}
            msg = {"role": "user" if role == "user" else "system"}
        else:  # an item of a model response: reasoning, message, function_call, hosted calls
            if not group:
                start = i
            group.append(item)
            continue
        if group:
            out.append(_assistant(group, start))
            group = []
        msg["content"] = text
        msg[REF] = str(i)
        if not exact:
            msg[ITEMS] = [item]
        out.append(msg)
    if group:
        out.append(_assistant(group, start))
    return out


def to_items(view: Sequence[Mapping[str, object]]) -> list[TResponseInputItem]:
    """OpenAI chat messages (contextfold's view or history) back to Responses input items: the
    original items where the message is unchanged, new items otherwise."""
    out: list[dict[str, Any]] = []
    for msg in view:
        role = msg.get("role")
        stored = msg.get(ITEMS)
        if isinstance(stored, list) and stored:
            again = to_openai_dicts(stored)
            if len(again) == 1 and fingerprint(again[0]) == fingerprint(msg):
                out.extend(dict(s) for s in stored)
                continue
        content = msg.get("content") or ""
        if role == "tool":
            out.append(
                {
                    "type": "function_call_output",
                    "call_id": msg.get("tool_call_id"),
                    "output": content if isinstance(content, str) else _text(content)[0],
                }
            )
        elif role == "assistant":
            if content:
                out.append({"role": "assistant", "content": content})
            calls = msg.get("tool_calls")
            for call in calls if isinstance(calls, list | tuple) else []:
                fn = call["function"]
                out.append(
                    {
                        "type": "function_call",
                        "call_id": call["id"],
                        "name": fn["name"],
                        "arguments": fn.get("arguments", "{}"),
                    }
                )
        else:
            out.append({"role": "system" if role == "system" else "user", "content": content})
    return cast(list[TResponseInputItem], out)


#: a handoff as the model sees it (the run's context and agent types do not matter here)
AgentHandoff = Handoff[object, Agent[object]]


def _schemas(
    tools: Sequence[object], handoffs: Sequence[AgentHandoff], instructions: str | None
) -> list[dict[str, Any]]:
    """What the request carries besides the items, for contextfold's token budget: the tool
    schemas and the instructions (sent separately by the SDK, possibly different every call,
    so they are budgeted like the schemas rather than logged)."""
    out = [
        openai_tool(t.name, t.description, t.params_json_schema)
        for t in tools
        if isinstance(t, FunctionTool)
    ]
    out += [openai_tool(h.tool_name, h.tool_description, h.input_json_schema) for h in handoffs]
    if instructions:
        out.append({"instructions": instructions})
    return out


# --------------------------------------------------------------------------- model wrapper


class _Outputs:
    """The output items of a streamed response, as ``ModelResponse.to_input_items`` gives them."""

    def __init__(self, outputs: Sequence[Any]) -> None:
        self.outputs = outputs

    def to_input_items(self) -> list[TResponseInputItem]:
        return [cast(TResponseInputItem, o.model_dump(exclude_unset=True)) for o in self.outputs]


class ContextFoldModel(Model):
    """An ``agents.Model`` that sends contextfold's view and recovers from context overflow."""

    def __init__(self, model: Model, manager: ContextManager) -> None:
        if not isinstance(manager, ContextManager):
            raise TypeError(
                f"ContextFoldModel needs a ContextManager, got {type(manager).__name__}"
            )
        self.model = model
        self.manager = manager
        self.mirror = shared_mirror(manager)

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: Sequence[object],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[AgentHandoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        def send(items: str | list[TResponseInputItem]) -> Any:
            return self.model.get_response(
                system_instructions,
                items,
                model_settings,
                cast("list[Tool]", tools),  # the runner's list, passed on as it came
                output_schema,
                handoffs,
                tracing,
                previous_response_id=previous_response_id,
                conversation_id=conversation_id,
                prompt=prompt,
            )

        if previous_response_id or conversation_id:
            return cast(ModelResponse, await send(input))  # the server holds the history
        self.mirror.sync(to_openai_dicts(input))
        # acall: prepare, send, one retry after compacting on overflow, calibrate from usage
        response: ModelResponse = await self.manager.acall(
            lambda view: send(to_items(view)), tools=_schemas(tools, handoffs, system_instructions)
        )
        self._log_response(input, response)
        return response

    def _log_response(self, input: str | list[TResponseInputItem], response: Any) -> None:
        """Log the model's answer now (the next call's input repeats it; the mirror dedupes)."""
        sent = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        self.mirror.sync(to_openai_dicts([*sent, *response.to_input_items()]))

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: Sequence[object],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[AgentHandoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        def stream(items: str | list[TResponseInputItem]) -> AsyncIterator[TResponseStreamEvent]:
            return self.model.stream_response(
                system_instructions,
                items,
                model_settings,
                cast("list[Tool]", tools),  # the runner's list, passed on as it came
                output_schema,
                handoffs,
                tracing,
                previous_response_id=previous_response_id,
                conversation_id=conversation_id,
                prompt=prompt,
            )

        if previous_response_id or conversation_id:
            async for event in stream(input):
                yield event
            return
        self.mirror.sync(to_openai_dicts(input))
        schemas = _schemas(tools, handoffs, system_instructions)
        for attempt in (1, 2):
            items = to_items(self.manager.prepare(tools=schemas))
            started = False
            try:
                async for event in stream(items):
                    started = True
                    yield event
                    if getattr(event, "type", "") == "response.completed":
                        done = getattr(event, "response", None)
                        tokens = input_tokens_of(getattr(done, "usage", None))
                        if tokens is not None:
                            self.manager.report_usage(input_tokens=tokens)
                        outputs = getattr(done, "output", None) or []
                        self._log_response(input, _Outputs(outputs))
                return
            except Exception as exc:
                if started or not is_context_overflow(exc):
                    raise
                if attempt == 2:
                    raise ContextOverflowError(
                        f"the model still reports a context overflow after recovery ({exc})",
                        record=self.manager.last_record,
                        cause=exc,
                    ) from exc
                self.manager.recover_from_overflow(exc, tools=schemas)

    def get_retry_advice(self, request: ModelRetryAdviceRequest) -> ModelRetryAdvice | None:
        return self.model.get_retry_advice(request)  # the wrapped model's transport advice

    async def close(self) -> None:
        await self.model.close()


# --------------------------------------------------------------------------- filter, session, tools

_MIRRORS: weakref.WeakKeyDictionary[ContextManager, HistoryMirror] = weakref.WeakKeyDictionary()


def shared_mirror(manager: ContextManager) -> HistoryMirror:
    """One mirror per manager, shared by the model wrapper, the filter and the session."""
    mirror = _MIRRORS.get(manager)
    if mirror is None:
        mirror = _MIRRORS[manager] = HistoryMirror(manager)
    return mirror


def context_filter(manager: ContextManager) -> Callable[[CallModelData[object]], ModelInputData]:
    """A ``RunConfig(call_model_input_filter=...)`` sending contextfold's view (no retry)."""
    mirror = shared_mirror(manager)

    def call_model_input_filter(data: CallModelData[object]) -> ModelInputData:
        instructions = data.model_data.instructions
        mirror.sync(to_openai_dicts(data.model_data.input))
        tools = [t for t in data.agent.tools if isinstance(t, FunctionTool)]
        items = to_items(manager.prepare(tools=_schemas(tools, [], instructions)))
        return ModelInputData(input=items, instructions=instructions)

    return call_model_input_filter


class ContextFoldSession(SessionABC):
    """An Agents SDK ``Session`` stored in contextfold's log (append-only)."""

    session_settings = None

    def __init__(self, manager: ContextManager) -> None:
        self.manager = manager
        self.session_id = manager.session_id
        self.mirror = shared_mirror(manager)

    def _items(self) -> list[TResponseInputItem]:
        return to_items([to_openai(m) for m in logged_messages(self.manager)])

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        items = self._items()
        return items[-limit:] if limit else items

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        self.mirror.extend(to_openai_dicts(items))

    async def pop_item(self) -> TResponseInputItem | None:
        raise ContextFoldError(
            "ContextFoldSession is append-only: contextfold's log never removes a message "
            "(start a new session_id to start over)"
        )

    async def clear_session(self) -> None:
        self.manager.delete_session()


def contextfold_tools(manager: ContextManager) -> list[FunctionTool]:
    """contextfold's agent tools as Agents SDK function tools."""
    tools = []
    for schema in manager.tool_schemas():
        fn = as_object(schema["function"])
        name = str(fn["name"])

        async def invoke(_ctx: RunContextWrapper[Any], args: str, _name: str = name) -> str:
            try:
                parsed = json.loads(args) if args.strip() else {}
            except ValueError:
                parsed = args
            return manager.toolbox.run(_name, parsed)[0]

        tools.append(
            FunctionTool(
                name=name,
                description=str(fn.get("description", "")),
                params_json_schema=dict(as_object(fn.get("parameters")) or {"type": "object"}),
                on_invoke_tool=invoke,
                strict_json_schema=False,
            )
        )
    return tools


__all__ = [
    "ContextFoldModel",
    "ContextFoldSession",
    "context_filter",
    "contextfold_tools",
    "to_items",
    "to_openai_dicts",
]
