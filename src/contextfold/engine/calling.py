"""``call`` / ``acall``: prepare, call the model, calibrate, and recover from an overflow once."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Literal, TypeVar

from ..compaction.summarizers.llm import LLMSummarizer
from ..core.usage import extract_input_tokens
from ..jsontypes import JSON
from ..providers.llm import ChatResult
from ..providers.responses import response_message
from .context import SessionContext
from .overflow import raise_overflow, retry_view
from .prepare import PreparedView, ToolSchemas
from .surface import AnthropicView, OpenAIView

T = TypeVar("T")
Format = Literal["openai", "anthropic"]
#: runs a step of the session's work in a worker thread, holding the session's async lock
OffLoop = Callable[[Callable[[], PreparedView]], Awaitable[PreparedView]]


def rendered(view: PreparedView, format: Format) -> OpenAIView | AnthropicView:
    return view.anthropic() if format == "anthropic" else view.openai()


def call(
    ctx: SessionContext,
    fn: Callable[..., T],
    *,
    prepare: Callable[[], PreparedView],
    report: Callable[[object], object],
    tools: ToolSchemas | None = None,
    format: Format = "openai",
) -> T:
    """prepare -> fn(view rendered in ``format``) -> calibrate; on a context-overflow error
    compact hard and retry once (overflow recovery). A second overflow raises
    ContextOverflowError with the record."""
    with agent_summarizer(ctx, fn):
        prepared = prepare()
    failure: Exception | None = None
    try:
        result = fn(rendered(prepared, format))
    except Exception as exc:
        failure = exc
    if failure is not None:
        # retried outside the except block, so a retry error is not chained to the overflow
        with ctx.units.lock, agent_summarizer(ctx, fn):
            retry = retry_view(ctx, failure, tools, prepared)
        try:
            result = fn(rendered(retry, format))
        except Exception as exc2:
            raise_overflow(exc2, retry.record)
            raise
    report(result)
    return result


async def acall(
    ctx: SessionContext,
    fn: Callable[..., Awaitable[T]],
    *,
    prepare: Callable[[], Awaitable[PreparedView]],
    off_loop: OffLoop,
    report: Callable[[object], Awaitable[object]],
    tools: ToolSchemas | None = None,
    format: Format = "openai",
) -> T:
    """:func:`call` for an async ``fn``; the preparation and any compaction (LLM summaries,
    fact extraction) never block the event loop."""
    prepared = await prepare()
    failure: Exception | None = None
    try:
        result = await fn(rendered(prepared, format))
    except Exception as exc:
        failure = exc
    if failure is not None:
        retry = await off_loop(lambda: retry_view(ctx, failure, tools, prepared))
        try:
            result = await fn(rendered(retry, format))
        except Exception as exc2:
            raise_overflow(exc2, retry.record)
            raise
    if extract_input_tokens(result) is not None:  # calibration is stored
        await report(result)
    return result


class _AgentModel:
    """The agent's own model ``fn`` as the summarizer's chat model."""

    def __init__(self, fn: Callable[[OpenAIView], object]) -> None:
        self.fn = fn

    def complete(
        self, messages: Sequence[Mapping[str, JSON]], *, max_tokens: int | None = None
    ) -> ChatResult:
        reply = self.fn([dict(m) for m in messages])
        if (
            isinstance(reply, Mapping)
            and reply.get("role") == "assistant"
            and "choices" not in reply
        ):
            return ChatResult(text=str(reply.get("content") or ""))
        return ChatResult(text=response_message(reply).text)


@contextlib.contextmanager
def agent_summarizer(ctx: SessionContext, fn: Callable[[OpenAIView], object]) -> Iterator[None]:
    """With ``summary_model="agent"`` and no summarizer of its own, the compactions of this
    call are summarized by the agent's model ``fn`` (the extractive summary stays the
    fallback)."""
    comp = ctx.compactor
    if ctx.config.summary_model != "agent" or ctx.summarizer is not None:
        yield
        return
    before = comp.summarizer
    comp.summarizer = LLMSummarizer(_AgentModel(fn), context_window=ctx.window)
    try:
        yield
    finally:
        comp.summarizer = before


__all__ = ["acall", "agent_summarizer", "call", "raise_overflow", "rendered"]
