"""Keep the event loop free: run contextfold's synchronous work off the loop, its LLM calls on it.

``ContextManager.aprepare`` / ``acall`` run a compaction (token counting, extractive summaries,
file and SQLite writes) in a worker thread with :func:`run_off_loop`. While that thread runs, an
LLM-backed summarizer or fact extractor that reaches :func:`call_model` sends its request back to
the caller's event loop through the model's async client (``acomplete``: ``AsyncOpenAI`` /
``AsyncAnthropic`` / a LangChain model's ``ainvoke``) and waits for it in the worker thread. The
loop keeps serving other tasks throughout; nothing here blocks it.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

#: The loop of an ``aprepare``/``acall`` whose synchronous part runs in the current thread.
_LOOP: contextvars.ContextVar[asyncio.AbstractEventLoop | None] = contextvars.ContextVar(
    "contextfold_loop", default=None
)


async def run_off_loop(fn: Callable[[], T]) -> T:
    """``fn()`` in a worker thread; model calls it makes go back to this loop (async clients)."""
    loop = asyncio.get_running_loop()
    token = _LOOP.set(loop)
    try:
        # to_thread copies the current context, so the worker sees _LOOP
        return await asyncio.to_thread(fn)
    finally:
        _LOOP.reset(token)


def _running_here(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:  # no loop runs in this thread
        return False


def call_model(sync: Callable[[], T], make_async: Callable[[], Awaitable[T]] | None) -> T:
    """One model call from synchronous code.

    Inside :func:`run_off_loop` (a worker thread of a running loop) and when the model has an
    async path, the coroutine runs on that loop and this thread waits for its result; otherwise
    ``sync()`` runs here. Exceptions propagate unchanged either way.
    """
    loop = _LOOP.get()
    if (
        make_async is None
        or loop is None
        or loop.is_closed()
        or not loop.is_running()
        or _running_here(loop)
    ):
        return sync()

    async def _run() -> T:
        return await make_async()

    return asyncio.run_coroutine_threadsafe(_run(), loop).result()


__all__ = ["call_model", "run_off_loop"]
