"""acall / aprepare never block the event loop: while a compaction waits for a (slow) summarizer,
a ticker task on the same loop keeps ticking. No timing assertions: the slow parts only finish
once the ticker has ticked, so a blocked loop would deadlock (caught by a generous timeout)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from contextfold import ContextManager
from contextfold.compaction.summarizers import (
    AnthropicSummarizer,
    LLMSummarizer,
    OpenAICompatibleSummarizer,
    SummaryRequest,
)
from contextfold.providers.llm import ChatResult
from contextfold.testing import overflow_error
from tests.support.http_fakes import (  # noqa: F401
    FakeLLMServer,
    anthropic_message,
    fake_llm_server_fixture,
    openai_completion,
)

SAFETY = 60.0  # seconds before a deadlock is reported as a failure (never reached when it works)
TICKS = 5
#: the ticker's pace: it proves the loop keeps running while a call waits (a pace, not a wait)
TICK = 0.001

SYSTEM = {"role": "system", "content": "You are a coding agent."}
TASK = {"role": "user", "content": "Please fix the bug in src/app.py. You must keep the API."}


def turn(i: int, words: int = 150) -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": f"Step {i}: the root cause is in f{i}.",
            "tool_calls": [
                {
                    "id": f"c{i}",
                    "type": "function",
                    "function": {"name": "bash", "arguments": json.dumps({"command": f"cat f{i}"})},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": f"c{i}",
            "content": " ".join(f"w{i}x{j}" for j in range(words)),
        },
    ]


def loaded(tmp_path: Path, window: int = 8_000, **kw: Any) -> ContextManager:
    """A small window filled past the Full line (no prepare yet): the next prepare summarizes
    with the LLM (the window is large enough that the head holds more than the pinned task)."""
    cm = ContextManager(tmp_path, "a", window, **kw)
    cm.add_many([SYSTEM, TASK])
    i = 0
    while cm.view_tokens < 0.70 * window:
        cm.add_many(turn(i))
        i += 1
    cm.add({"role": "user", "content": "what next?"})
    return cm


class Ticker:
    """A task that ticks on the loop; ``after(n)`` is an event set once it ticked n times."""

    def __init__(self) -> None:
        self.ticks = 0
        self.reached = asyncio.Event()
        self.reached_threadsafe = threading.Event()
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(0)
            self.ticks += 1
            if self.ticks == TICKS:
                self.reached.set()
                self.reached_threadsafe.set()
            await asyncio.sleep(TICK)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        assert self._task is not None
        self._task.cancel()


class AsyncOnlyModel:
    """A ChatModel whose async path waits for the ticker; its sync path must not be used."""

    def __init__(self, ticker: Ticker) -> None:
        self.ticker = ticker
        self.async_calls: list[list[dict[str, Any]]] = []
        self.ticks_seen: list[int] = []

    def complete(
        self, messages: Sequence[Mapping[str, Any]], *, max_tokens: int | None = None
    ) -> ChatResult:
        raise AssertionError("the sync client was used inside acall")

    async def acomplete(
        self, messages: Sequence[Mapping[str, Any]], *, max_tokens: int | None = None
    ) -> ChatResult:
        self.async_calls.append([dict(m) for m in messages])
        await self.ticker.reached.wait()  # only the running loop can get us past this
        self.ticks_seen.append(self.ticker.ticks)
        text = json.dumps(messages)
        if "Extract durable facts" in text:
            return ChatResult(text='{"kind": "constraint", "text": "Keep the API.", "msg": 0}')
        return ChatResult(text="### Summary\nThe agent read files and found the root cause.")


async def _reply(view: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": "ok"}


def test_acall_summarizes_through_the_async_client_while_the_loop_runs(tmp_path: Path) -> None:
    async def main() -> tuple[ContextManager, AsyncOnlyModel, Ticker]:
        ticker = Ticker()
        model = AsyncOnlyModel(ticker)
        cm = loaded(
            tmp_path,
            10_000,  # room for contextfold's tool schemas
            summarizer=LLMSummarizer(model, context_window=8_000),
            fact_extractor="llm",
        )
        before = len(cm.records())
        tools = cm.tool_schemas()  # opens the session index (SQLite) on this thread
        ticker.start()
        try:
            await asyncio.wait_for(cm.acall(_reply, tools=tools), SAFETY)
        finally:
            ticker.stop()
        assert len(cm.records()) > before
        found = cm.handle_tool_call(
            {"id": "s1", "function": {"name": "session_search", "arguments": '{"query": "f1"}'}}
        )
        assert "Error" not in found["content"]
        return cm, model, ticker

    cm, model, _ticker = asyncio.run(main())
    assert cm.last_record is not None and cm.last_record.summarizer == "LLMSummarizer"
    kinds = [
        "facts" if "Extract durable facts" in json.dumps(c) else "summary"
        for c in model.async_calls
    ]
    assert "summary" in kinds and "facts" in kinds  # both LLM calls went through acomplete
    assert all(t >= TICKS for t in model.ticks_seen)


class BlockingSummarizer:
    """A sync-only summarizer that blocks its thread until the loop's ticker has ticked."""

    def __init__(self, ticker: Ticker) -> None:
        self.ticker = ticker
        self.calls = 0

    def summarize(self, request: SummaryRequest) -> str:
        self.calls += 1
        if not self.ticker.reached_threadsafe.wait(SAFETY):
            raise AssertionError("the event loop was blocked while summarizing")
        return "### Summary\nslow but fine"


def test_a_blocking_summarizer_runs_off_the_loop(tmp_path: Path) -> None:
    async def main() -> tuple[ContextManager, BlockingSummarizer]:
        ticker = Ticker()
        summarizer = BlockingSummarizer(ticker)
        cm = loaded(tmp_path, summarizer=summarizer)
        ticker.start()
        try:
            view = await asyncio.wait_for(cm.aprepare(format="anthropic"), SAFETY)
        finally:
            ticker.stop()
        assert view["messages"][-1]["content"][-1] == {"type": "text", "text": "what next?"}
        return cm, summarizer

    cm, summarizer = asyncio.run(main())
    assert summarizer.calls >= 1
    assert cm.last_record is not None and "fallback" not in cm.last_record.summarizer


def test_overflow_recovery_in_acall_also_stays_off_the_loop(tmp_path: Path) -> None:
    async def main() -> tuple[list[int], AsyncOnlyModel]:
        ticker = Ticker()
        model = AsyncOnlyModel(ticker)
        cm = ContextManager(tmp_path, "r", 128_000, summarizer=LLMSummarizer(model))
        cm.add_many([SYSTEM, TASK])
        for i in range(20):
            cm.add_many(turn(i))
        cm.add({"role": "user", "content": "go"})
        sizes: list[int] = []

        async def fn(view: list[dict[str, Any]]) -> dict[str, Any]:
            sizes.append(len(json.dumps(view)))
            if len(sizes) == 1:
                raise overflow_error("ollama")
            return {"role": "assistant", "content": "ok"}

        ticker.start()
        try:
            with pytest.warns(Warning):
                await asyncio.wait_for(cm.acall(fn), SAFETY)
        finally:
            ticker.stop()
        return sizes, model

    sizes, model = asyncio.run(main())
    assert sizes[1] < sizes[0] and model.async_calls and model.ticks_seen[0] >= TICKS


def test_real_async_openai_client_is_used(fake_llm_server: FakeLLMServer, tmp_path: Path) -> None:
    fake_llm_server.handler = lambda body: (200, openai_completion("### Summary\nfrom the server"))
    summarizer = OpenAICompatibleSummarizer(
        model="summ", base_url=fake_llm_server.openai_base_url, api_key="t", context_window=8_000
    )
    cm = loaded(tmp_path, summarizer=summarizer)

    async def main() -> None:
        await cm.acall(_reply)
        await summarizer.model.aclose()  # type: ignore[attr-defined]

    asyncio.run(main())
    chat = summarizer.model
    assert chat._client is None  # type: ignore[attr-defined]  # the sync client never built
    assert any(r.json and r.json.get("model") == "summ" for r in fake_llm_server.requests)
    assert cm.last_record is not None and cm.last_record.summarizer == "OpenAICompatibleSummarizer"


def test_concurrent_acalls_on_one_manager_are_serialized(tmp_path: Path) -> None:
    cm = ContextManager(tmp_path, "c", 50_000)
    cm.add_many([SYSTEM, TASK])

    async def main() -> list[Any]:
        return list(await asyncio.gather(*(cm.aprepare() for _ in range(8))))

    views = asyncio.run(main())
    assert all(v == views[0] for v in views)


def test_real_async_anthropic_client_is_used(
    fake_llm_server: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm_server.handler = lambda body: (200, anthropic_message("### Summary\nfrom claude"))
    summarizer = AnthropicSummarizer(
        model="claude-test",
        base_url=fake_llm_server.anthropic_base_url,
        api_key="t",
        context_window=8_000,
    )
    cm = loaded(tmp_path, summarizer=summarizer)

    async def main() -> None:
        view = await cm.acall(_reply, format="anthropic")
        assert view == {"role": "assistant", "content": "ok"}
        await summarizer.model.aclose()  # type: ignore[attr-defined]

    asyncio.run(main())
    assert summarizer.model._client is None  # type: ignore[attr-defined]
    assert [r.path for r in fake_llm_server.requests] and all(
        r.path == "/v1/messages" for r in fake_llm_server.requests
    )
    assert any(r.summarizer == "AnthropicSummarizer" for r in cm.records())


def test_a_second_event_loop_gets_its_own_async_client(
    fake_llm_server: FakeLLMServer, tmp_path: Path
) -> None:
    """Scripts often run each turn with asyncio.run: the async client of a closed loop is not
    reused (its connections belong to that loop)."""
    fake_llm_server.handler = lambda body: (200, openai_completion("### Summary\nturn done"))
    summarizer = OpenAICompatibleSummarizer(
        model="summ", base_url=fake_llm_server.openai_base_url, api_key="t", context_window=8_000
    )
    clients = []
    for _ in range(2):
        text = asyncio.run(summarizer.asummarize(_summary_request()))
        assert text == "### Summary\nturn done"
        clients.append(summarizer.model._async_client)  # type: ignore[attr-defined]
    assert clients[0] is not clients[1]
    assert len(fake_llm_server.requests) == 2


def _summary_request() -> SummaryRequest:
    from contextfold.core.wire import from_openai

    return SummaryRequest(messages=[from_openai({"role": "user", "content": "Fix the parser."})])
