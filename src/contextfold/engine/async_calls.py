"""The facade's async calls (a mixin of :class:`~contextfold.ContextManager`): the work runs
in a worker thread under one asyncio lock per event loop, so the loop is never blocked."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Literal, TypeVar, overload

from ..core.aio import run_off_loop
from ..jsontypes import JSON  # noqa: F401 (for get_type_hints of OpenAIView)
from . import calling
from .context import SessionContext
from .prepare import PreparedView, ToolSchemas
from .surface import AnthropicView, OpenAIView

T = TypeVar("T")
V = TypeVar("V")
Format = Literal["openai", "anthropic"]


class AsyncCalls:
    """``aprepare``, ``aprepare_view`` and ``acall`` over the manager's sync calls."""

    _ctx: SessionContext
    _alocks: dict[asyncio.AbstractEventLoop, asyncio.Lock]

    def prepare_view(self, *, tools: ToolSchemas | None = None) -> PreparedView:
        raise NotImplementedError  # the manager's

    def report_usage(self, input_tokens: int | None = None, *, response: object = None) -> float:
        raise NotImplementedError  # the manager's

    @overload
    async def aprepare(
        self,
        *,
        tools: ToolSchemas | None = None,
        format: Literal["openai"] = "openai",
        copy: bool = False,
    ) -> OpenAIView: ...

    @overload
    async def aprepare(
        self,
        *,
        tools: ToolSchemas | None = None,
        format: Literal["anthropic"],
        copy: bool = False,
    ) -> AnthropicView: ...

    async def aprepare(
        self,
        *,
        tools: ToolSchemas | None = None,
        format: Format = "openai",
        copy: bool = False,
    ) -> OpenAIView | AnthropicView:
        """:meth:`prepare` without blocking the event loop: the work runs in a worker thread and
        an LLM summarizer / fact extractor calls its model's async client on this loop (see
        :mod:`contextfold.core.aio`). Calls on one manager are serialized; ``on_compaction`` runs in
        that worker thread."""

        def prepared() -> OpenAIView | AnthropicView:
            view = self.prepare_view(tools=tools)
            return view.anthropic() if format == "anthropic" else view.openai(copy=copy)

        return await self._off_loop(prepared)

    async def aprepare_view(self, *, tools: ToolSchemas | None = None) -> PreparedView:
        """:meth:`prepare_view` without blocking the event loop (see :meth:`aprepare`)."""
        return await self._off_loop(lambda: self.prepare_view(tools=tools))

    async def _off_loop(self, fn: Callable[[], V]) -> V:
        async with self._async_lock():
            return await run_off_loop(fn)

    def _async_lock(self) -> asyncio.Lock:
        """One lock per event loop (an asyncio.Lock must not cross loops)."""
        loop = asyncio.get_running_loop()
        lock = self._alocks.get(loop)
        if lock is None:
            for old in [k for k in self._alocks if k.is_closed()]:
                del self._alocks[old]
            lock = self._alocks[loop] = asyncio.Lock()
        return lock

    @overload
    async def acall(
        self,
        fn: Callable[[OpenAIView], Awaitable[T]],
        *,
        tools: ToolSchemas | None = None,
        format: Literal["openai"] = "openai",
    ) -> T: ...

    @overload
    async def acall(
        self,
        fn: Callable[[AnthropicView], Awaitable[T]],
        *,
        tools: ToolSchemas | None = None,
        format: Literal["anthropic"],
    ) -> T: ...

    async def acall(
        self,
        fn: Callable[..., Awaitable[T]],
        *,
        tools: ToolSchemas | None = None,
        format: Format = "openai",
    ) -> T:
        """:meth:`call` for an async ``fn``; the preparation and any compaction (LLM summaries,
        fact extraction) never block the event loop (see :meth:`aprepare`)."""

        async def report(result: object) -> float:
            return await self._off_loop(lambda: self.report_usage(response=result))

        return await calling.acall(
            self._ctx,
            fn,
            prepare=lambda: self.aprepare_view(tools=tools),
            off_loop=self._off_loop,
            report=report,
            tools=tools,
            format=format,
        )


__all__ = ["AsyncCalls"]
