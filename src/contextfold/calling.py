"""``call`` / ``acall``: prepare, call the model, calibrate, and recover from an overflow once."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from .aio import run_off_loop
from .errors import ContextOverflowError
from .llm import ChatResult
from .overflow import is_context_overflow
from .records import CompactionRecord
from .responses import response_message
from .summarizers.llm import LLMSummarizer
from .usage import extract_input_tokens

if TYPE_CHECKING:
    from .manager import ContextManager
    from .surface import AnthropicView, OpenAIView

T = TypeVar("T")


def call(
    cm: ContextManager,
    fn: Callable[[Any], T],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    format: Literal["openai", "anthropic"] = "openai",
) -> T:
    """prepare -> fn(view) -> calibrate; on a context-overflow error compact hard and retry
    once (overflow recovery). A second overflow raises ContextOverflowError with the record."""
    with agent_summarizer(cm, fn):
        view = cm.prepare(tools=tools, format=format)
    failure: Exception | None = None
    try:
        result = fn(view)
    except Exception as exc:
        failure = exc
    if failure is not None:
        # retried outside the except block, so a retry error is not chained to the overflow
        with agent_summarizer(cm, fn):
            retry_view, record = recover(cm, failure, tools, format, view)
        try:
            result = fn(retry_view)
        except Exception as exc2:
            raise_overflow(exc2, record)
            raise
    cm.report_usage(response=result)
    return result


async def acall(
    cm: ContextManager,
    fn: Callable[[Any], Awaitable[T]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    format: Literal["openai", "anthropic"] = "openai",
) -> T:
    """:meth:`call` for an async ``fn``; the preparation and any compaction (LLM summaries,
    fact extraction) never block the event loop (see :meth:`aprepare`)."""
    view = await cm.aprepare(tools=tools, format=format)
    failure: Exception | None = None
    try:
        result = await fn(view)
    except Exception as exc:
        failure = exc
    if failure is not None:
        async with cm._async_lock():
            retry_view, record = await run_off_loop(
                lambda: recover(cm, failure, tools, format, view)
            )
        try:
            result = await fn(retry_view)
        except Exception as exc2:
            raise_overflow(exc2, record)
            raise
    if extract_input_tokens(result) is not None:  # calibration is stored
        async with cm._async_lock():
            await run_off_loop(lambda: cm.report_usage(response=result))
    return result


class _AgentModel:
    """The agent's own model ``fn`` as the summarizer's chat model."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def complete(
        self, messages: Sequence[Mapping[str, Any]], *, max_tokens: int | None = None
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
def agent_summarizer(cm: ContextManager, fn: Callable[[Any], Any]) -> Iterator[None]:
    """With ``summary_model="agent"`` and no summarizer of its own, the compactions of this
    call are summarized by the agent's model ``fn`` (the extractive summary stays the
    fallback)."""
    comp = cm.compactor
    if cm.config.summary_model != "agent" or cm.summarizer is not None:
        yield
        return
    before = comp.summarizer
    comp.summarizer = LLMSummarizer(_AgentModel(fn), context_window=cm.window)
    try:
        yield
    finally:
        comp.summarizer = before


def recover(
    cm: ContextManager, exc: Exception, tools: Any, format: str, failed: OpenAIView | AnthropicView
) -> tuple[OpenAIView | AnthropicView, CompactionRecord]:
    """Overflow recovery: learn what the error says (window, token count), compact hard,
    and give the view to retry with - never the request that just failed."""
    if not cm.config.overflow_recovery or not is_context_overflow(exc):
        raise exc
    sent = json.dumps(failed, sort_keys=True, default=str)  # before the cached dicts change
    record = cm.recover_from_overflow(exc, tools=tools)
    cm._last_fixed = cm._schema_tokens(tools)
    view = cm._render(format)
    if json.dumps(view, sort_keys=True, default=str) == sent:
        raise ContextOverflowError(
            "the model reports a context overflow and nothing is left to compact: the "
            "system prompt, the newest user message and the tool schemas alone are too large "
            f"({exc})",
            record=record,
            cause=exc,
        ) from exc
    return view, record


def raise_overflow(exc: Exception, record: CompactionRecord) -> None:
    if is_context_overflow(exc):
        raise ContextOverflowError(
            f"the model still reports a context overflow after recovery ({exc})",
            record=record,
            cause=exc,
        ) from exc


__all__ = ["acall", "call", "raise_overflow", "recover"]
