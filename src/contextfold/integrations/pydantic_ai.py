"""pydantic-ai: ``Agent(model, capabilities=[ContextFoldCapability(cm)])``.

pydantic-ai 2.x's extension point for what the model sees is the capability (its
``ProcessHistory`` capability is how history processors run). This one:

* ``before_model_request``: appends the run's new messages to contextfold's log (append-only
  mirror, checked by content, see :mod:`contextfold.integrations._common`);
* ``prepare_model_request`` (each attempt): the request carries contextfold's view, converted back
  to pydantic-ai messages (parts the view keeps unchanged are the original objects, thinking and
  provider parts included);
* ``on_model_request_error``: a context-overflow error compacts hard and retries the request once
  (``RetryModelRequest``); a second overflow raises ``ContextOverflowError``;
* ``after_model_request``: calibrates contextfold's estimate with the reported input tokens;
* ``get_toolset``: offers contextfold's agent tools (recall, read_offloaded, session_*,
  memory_*) answered from the session.

Unlike a plain history processor, the run's own message history (``result.all_messages()``) is
never replaced by the view: it stays complete, and contextfold's log mirrors it. Pass it back as
``message_history`` to continue the same session.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar, cast

from ..extras import needs_extra

try:
    from pydantic_ai import AgentRunResult, RunContext
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.exceptions import RetryModelRequest
    from pydantic_ai.messages import (
        BaseToolCallPart,
        BaseToolReturnPart,
        ModelMessage,
        ModelRequest,
        ModelRequestPart,
        ModelResponse,
        ModelResponsePart,
        NativeToolCallPart,
        NativeToolReturnPart,
        RetryFeedbackPart,
        RetryPromptPart,
        SystemPromptPart,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.models import ModelRequestContext
    from pydantic_ai.tools import AgentDepsT, Tool
    from pydantic_ai.toolsets import FunctionToolset
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise ImportError(
        needs_extra("contextfold.integrations.pydantic_ai (pydantic-ai 2.x)", "pydantic-ai", exc)
    ) from exc

from ..core.overflow import is_context_overflow
from ..engine.manager import ContextManager
from ..errors import ContextOverflowError
from ..jsontypes import as_object
from ._common import REF, HistoryMirror, fingerprint, input_tokens_of, openai_tool

#: the output type of the run an ``after_run`` hook sees
OutputT = TypeVar("OutputT")

# --------------------------------------------------------------------------- conversion


def _user_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    out = []
    for item in content:
        out.append(item if isinstance(item, str) else f"[{type(item).__name__}]")
    return "\n".join(out)


def _request_part(part: Any) -> dict[str, Any]:
    if isinstance(part, SystemPromptPart):
        return {"role": "system", "content": part.content}
    if isinstance(part, UserPromptPart):
        return {"role": "user", "content": _user_text(part.content)}
    if isinstance(part, BaseToolReturnPart) and not isinstance(part, NativeToolReturnPart):
        return {
            "role": "tool",
            "tool_call_id": part.tool_call_id,
            "content": part.model_response_str(),
        }
    if isinstance(part, RetryPromptPart):  # deprecated, still in old histories
        if part.tool_name is not None:
            return {
                "role": "tool",
                "tool_call_id": part.tool_call_id,
                "content": part.model_response(),
            }
        return {"role": "user", "content": part.model_response()}
    if isinstance(part, RetryFeedbackPart):
        return {"role": "user", "content": part.model_response()}
    return {"role": "user", "content": str(getattr(part, "content", ""))}


def _response(message: ModelResponse) -> dict[str, Any]:
    text = "".join(p.content for p in message.parts if isinstance(p, TextPart))
    calls = [
        {
            "id": p.tool_call_id,
            "type": "function",
            "function": {"name": p.tool_name, "arguments": p.args_as_json_str()},
        }
        for p in message.parts
        if isinstance(p, BaseToolCallPart) and not isinstance(p, NativeToolCallPart)
    ]
    out: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        out["tool_calls"] = calls
    return out


def to_openai_dicts(messages: Sequence[ModelMessage]) -> list[dict[str, object]]:
    """pydantic-ai messages as OpenAI dicts, each tagged with its position (``"3"`` for a
    response, ``"3.1"`` for a request part)."""
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        if isinstance(message, ModelResponse):
            d = _response(message)
            d[REF] = str(i)
            out.append(d)
            continue
        for j, part in enumerate(message.parts):
            d = _request_part(part)
            d[REF] = f"{i}.{j}"
            out.append(d)
    return out


class _Natives:
    """Position -> original object of one request's messages, to map the view back."""

    def __init__(self, messages: Sequence[ModelMessage], dicts: Sequence[dict[str, Any]]):
        self.messages = messages
        self.prints = {d[REF]: fingerprint(d) for d in dicts}
        self.tool_names: dict[str, str] = {}
        self.instructions: str | None = None
        for message in messages:
            if isinstance(message, ModelResponse):
                for p in message.parts:
                    if isinstance(p, BaseToolCallPart):
                        self.tool_names[p.tool_call_id] = p.tool_name
            elif message.instructions is not None:
                self.instructions = message.instructions

    def lookup(self, d: Mapping[str, Any]) -> tuple[Any, bool] | None:
        """(original object, unchanged) for a view message that came from this history."""
        ref = d.get(REF)
        if not isinstance(ref, str) or ref not in self.prints:
            return None
        i, _, j = ref.partition(".")
        message = self.messages[int(i)]
        native: Any = message if not j else message.parts[int(j)]
        return native, self.prints[ref] == fingerprint(d)

    def request_part(self, d: Mapping[str, Any]) -> tuple[ModelRequestPart, str | None]:
        found = self.lookup(d)
        content = d.get("content") or ""
        if found is not None:
            native, same = found
            if same:
                return native, d[REF].partition(".")[0]
            if isinstance(native, BaseToolReturnPart | RetryPromptPart):
                return cast(ModelRequestPart, dataclasses.replace(native, content=content)), None
        role = d.get("role")
        if role == "system":
            return SystemPromptPart(content=str(content)), None
        if role == "tool":
            call_id = str(d.get("tool_call_id"))
            name = self.tool_names.get(call_id, str(d.get("name") or "tool"))
            return ToolReturnPart(tool_name=name, content=content, tool_call_id=call_id), None
        return UserPromptPart(content=str(content)), None

    def response(self, d: Mapping[str, Any]) -> ModelResponse:
        found = self.lookup(d)
        if found is not None and found[1] and isinstance(found[0], ModelResponse):
            return found[0]
        parts: list[ModelResponsePart] = []
        if d.get("content"):
            parts.append(TextPart(content=str(d["content"])))
        for call in d.get("tool_calls") or []:
            fn = call["function"]
            parts.append(
                ToolCallPart(
                    tool_name=fn["name"], args=fn.get("arguments"), tool_call_id=call["id"]
                )
            )
        return ModelResponse(parts=parts)

    def render(self, view: Sequence[Mapping[str, Any]]) -> list[ModelMessage]:
        out: list[ModelMessage] = []
        parts: list[ModelRequestPart] = []
        sources: set[str | None] = set()

        def flush() -> None:
            if not parts:
                return
            source = next(iter(sources)) if len(sources) == 1 else None
            native = self.messages[int(source)] if source is not None else None
            if isinstance(native, ModelRequest) and list(native.parts) == parts:
                out.append(native)
            else:
                out.append(ModelRequest(parts=list(parts), instructions=self.instructions))
            parts.clear()
            sources.clear()

        for d in view:
            if d.get("role") == "assistant":
                flush()
                out.append(self.response(d))
            else:
                part, source = self.request_part(d)
                parts.append(part)
                sources.add(source)
        flush()
        return out


# --------------------------------------------------------------------------- capability


class ContextFoldCapability(AbstractCapability[AgentDepsT]):
    """contextfold for a pydantic-ai agent (see the module docstring)."""

    def __init__(self, manager: ContextManager, *, offer_tools: bool = True) -> None:
        if not isinstance(manager, ContextManager):
            raise TypeError(
                f"ContextFoldCapability needs a ContextManager, got {type(manager).__name__}"
            )
        self.manager = manager
        self.mirror = HistoryMirror(manager)
        self.offer_tools = offer_tools
        self._recovered: tuple[str | None, int] | None = None

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # holds a live ContextManager

    def get_toolset(self) -> FunctionToolset[AgentDepsT] | None:
        if not self.offer_tools:
            return None
        tools: list[Tool[AgentDepsT]] = []
        for schema in self.manager.tool_schemas():
            fn = as_object(schema["function"])
            name = str(fn["name"])

            def run(_name: str = name, **kwargs: Any) -> str:
                return self.manager.toolbox.run(_name, kwargs)[0]

            tools.append(
                Tool.from_schema(
                    run,
                    name=name,
                    description=str(fn.get("description", "")),
                    json_schema=dict(as_object(fn.get("parameters")) or {"type": "object"}),
                )
            )
        return FunctionToolset(tools)

    def _schemas(self, request_context: ModelRequestContext) -> list[dict[str, Any]]:
        """What the request carries besides the messages, for contextfold's token budget: the
        tool schemas and the instructions (rendered per request, so budgeted, not logged)."""
        params = request_context.model_request_parameters
        out: list[dict[str, Any]] = [
            openai_tool(t.name, t.description or "", t.parameters_json_schema)
            for t in [*params.function_tools, *params.output_tools]
        ]
        instructions = "\n\n".join(p.content for p in params.instruction_parts or [])
        if instructions:
            out.append({"instructions": instructions})
        return out

    async def before_model_request(
        self, ctx: RunContext[AgentDepsT], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        self.mirror.sync(to_openai_dicts(request_context.messages))
        return request_context

    async def prepare_model_request(
        self, ctx: RunContext[AgentDepsT], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        messages = request_context.messages
        natives = _Natives(messages, to_openai_dicts(messages))
        view = self.manager.prepare(tools=self._schemas(request_context))
        request_context.messages = natives.render(view)
        return request_context

    async def after_model_request(
        self,
        ctx: RunContext[AgentDepsT],
        *,
        request_context: ModelRequestContext,
        response: ModelResponse,
    ) -> ModelResponse:
        tokens = input_tokens_of(response.usage)
        if tokens is not None:
            self.manager.report_usage(input_tokens=tokens)
        return response

    async def after_run(
        self, ctx: RunContext[AgentDepsT], *, result: AgentRunResult[OutputT]
    ) -> AgentRunResult[OutputT]:
        """Log the run's final answer now (not only when the next run continues)."""
        self.mirror.sync(to_openai_dicts(result.all_messages()))
        return result

    async def on_model_request_error(
        self,
        ctx: RunContext[AgentDepsT],
        *,
        request_context: ModelRequestContext,
        error: Exception,
    ) -> ModelResponse:
        step = (ctx.run_id, ctx.run_step)
        if is_context_overflow(error) and self._recovered == step:
            raise ContextOverflowError(
                f"the model still reports a context overflow after recovery ({error})",
                cause=error,
            ) from error
        self.manager.recover_from_overflow(error, tools=self._schemas(request_context))
        self._recovered = step
        raise RetryModelRequest() from error


__all__ = ["ContextFoldCapability", "to_openai_dicts"]
