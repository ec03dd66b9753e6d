"""LangChain v1 ``create_agent`` with ContextFoldMiddleware, end to end: a 64-turn agent loop over
real trace tool outputs at a 6,000-token window, driven by a scripted ``BaseChatModel``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from contextfold import ContextFoldError, ContextManager
from contextfold.core.wire import to_openai
from contextfold.testing import overflow_error

from .integration_support import (
    OVERFLOW_AT,
    TURNS,
    WINDOW,
    AgentScript,
    check_request,
    recall_target,
    require,
    trace_steps,
)

require("langchain.agents")

from langchain.agents import create_agent  # noqa: E402
from langchain_core.language_models import BaseChatModel  # noqa: E402
from langchain_core.messages import (  # noqa: E402
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    ToolMessage,
    convert_to_openai_messages,
)
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from pydantic import Field  # noqa: E402

from contextfold.integrations import HistoryDivergedError  # noqa: E402
from contextfold.integrations._common import (  # noqa: E402
    fingerprint,
    logged_messages,
)
from contextfold.integrations.langchain import ContextFoldMiddleware  # noqa: E402


class ScriptedChatModel(BaseChatModel):
    """A chat model that follows an AgentScript, records every request and fails on demand."""

    script: Any
    fail_at: set[int] = Field(default_factory=set)
    calls: int = 0
    failures: int = 0
    requests: list[list[dict[str, Any]]] = Field(default_factory=list)
    bound_tools: list[str] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        self.bound_tools = [getattr(t, "name", None) or t["function"]["name"] for t in tools]
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.calls += 1
        self.requests.append(list(convert_to_openai_messages(messages)))
        if self.calls in self.fail_at:
            self.failures += 1
            raise overflow_error("openai")
        last = messages[-1]
        last_text = last.text if isinstance(last, ToolMessage) else None
        calls = self.script.next_calls(last_text)
        if calls[0][0] == "final":
            msg = AIMessage(content=calls[0][1]["text"])
        else:
            msg = AIMessage(
                content="",
                tool_calls=[
                    {"name": name, "args": args, "id": f"call_{self.calls}_{k}"}
                    for k, (name, args) in enumerate(calls)
                ],
            )
        return ChatResult(generations=[ChatGeneration(message=msg)])


def _build(tmp_path: Path) -> tuple[Any, ScriptedChatModel, ContextManager, Any, int]:
    system, _task, steps = trace_steps()
    target = recall_target(steps)
    cm = ContextManager(tmp_path / "ws", "lc-thread", WINDOW)
    model = ScriptedChatModel(script=AgentScript(steps, target), fail_at={OVERFLOW_AT})

    @tool
    def run_command(step: int, command: str) -> str:
        """Run a shell command in the repository."""
        return steps[step].output

    agent = create_agent(
        model,
        tools=[run_command],
        system_prompt=system,
        middleware=[ContextFoldMiddleware(cm)],
        checkpointer=InMemorySaver(),
    )
    return agent, model, cm, steps, target


CONFIG: Any = {"configurable": {"thread_id": "t1"}, "recursion_limit": 1000}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_long_agent_loop(tmp_path: Path, mode: str) -> None:
    agent, model, cm, steps, target = _build(tmp_path)
    task = trace_steps()[1]
    inputs = {"messages": [{"role": "user", "content": task}]}
    if mode == "sync":
        result = agent.invoke(inputs, CONFIG)
    else:
        result = asyncio.run(agent.ainvoke(inputs, CONFIG))
    state = result["messages"]

    # the loop ran to the end, through one injected overflow
    assert model.failures == 1
    assert model.calls == TURNS + 3 + 1
    assert isinstance(state[-1], AIMessage) and state[-1].content.startswith("Done")
    # contextfold's tools were offered to the model next to the agent's own
    assert {"run_command", "recall", "read_offloaded", "session_search"} <= set(model.bound_tools)

    # compactions happened, and every request the model received was valid and in the window
    assert any(r.changed for r in cm.records())
    peak = max(check_request(req, WINDOW, f"request {i}") for i, req in enumerate(model.requests))
    assert peak > WINDOW // 3
    full = sum(len(str(m.content)) for m in state)
    assert all(sum(len(str(m.get("content"))) for m in req) < full for req in model.requests[-5:])

    # the recall tool (answered by the middleware) returned the exact original output
    original = steps[target].output
    before_recall = model.requests[-3]
    assert not any(original in str(m.get("content")) for m in before_recall)
    recalled = [m for m in state if isinstance(m, ToolMessage) and m.name == "recall"]
    assert len(recalled) == 2
    assert original in recalled[-1].text

    # the log mirrors the checkpointed state exactly once: system prompt + every state message
    history = logged_messages(cm)
    assert history[0].role == "system"
    assert [fingerprint(to_openai(m)) for m in history[1:]] == [
        fingerprint(d) for d in convert_to_openai_messages(state)
    ]


def test_resume_appends_only_new_messages_and_detects_rewrites(tmp_path: Path) -> None:
    agent, model, cm, _steps, _target = _build(tmp_path)
    model.script.phase = "done"  # answer at once: a short conversation
    agent.invoke({"messages": [{"role": "user", "content": "hello"}]}, CONFIG)
    logged = len(logged_messages(cm))
    assert logged == 3  # system, user, answer
    model.script.phase = "done"
    agent.invoke({"messages": [HumanMessage("and again")]}, CONFIG)
    assert len(logged_messages(cm)) == logged + 2  # only the new user message and answer

    # after a restart (the same checkpointer, a fresh manager on the same workspace) the
    # checkpointed state and the log still agree, and only the new turn is appended
    restarted = ContextManager(tmp_path / "ws", "lc-thread", WINDOW)
    checkpointer = agent.checkpointer
    agent = create_agent(
        model,
        tools=[],
        system_prompt=trace_steps()[0],
        middleware=[ContextFoldMiddleware(restarted)],
        checkpointer=checkpointer,
    )
    model.script.phase = "done"
    agent.invoke({"messages": [HumanMessage("after restart")]}, CONFIG)
    assert len(logged_messages(restarted)) == logged + 4

    # removing a message the log already holds is refused, naming the position
    state = agent.get_state(CONFIG).values["messages"]
    agent.update_state(CONFIG, {"messages": [RemoveMessage(id=state[0].id)]})
    model.script.phase = "done"
    with pytest.raises(HistoryDivergedError, match="message 1"):
        agent.invoke({"messages": [HumanMessage("third")]}, CONFIG)


def test_one_agent_many_threads(tmp_path: Path) -> None:
    """A thread_id -> ContextManager factory: each LangGraph thread gets its own session, and
    contextfold's tools answer from the calling thread's session."""
    system, _task, steps = trace_steps()
    managers: dict[str, ContextManager] = {}

    def session_for(thread_id: str) -> ContextManager:
        managers[thread_id] = ContextManager(tmp_path / "ws", thread_id, WINDOW)
        return managers[thread_id]

    class Script:
        """run_command once, then session_history of the current session, then answer."""

        def __init__(self) -> None:
            self.n = 0

        def next_calls(self, last_text: str | None) -> list[tuple[str, dict[str, Any]]]:
            return [self.next_action(last_text)]

        def next_action(self, last_text: str | None) -> tuple[str, dict[str, Any]]:
            self.n += 1
            if self.n % 3 == 1:
                return "run_command", {"step": self.n, "command": steps[self.n].command}
            if self.n % 3 == 2:
                return "session_search", {"query": steps[self.n - 1].command.split()[0]}
            return "final", {"text": f"Done: {last_text[:40] if last_text else ''}"}

    model = ScriptedChatModel(script=Script())

    @tool
    def run_command(step: int, command: str) -> str:
        """Run a shell command in the repository."""
        return steps[step].output

    agent = create_agent(
        model,
        tools=[run_command],
        system_prompt=system,
        middleware=[ContextFoldMiddleware(session_for)],
        checkpointer=InMemorySaver(),
    )
    for thread in ("alpha", "beta"):
        agent.invoke(
            {"messages": [HumanMessage(f"task of {thread}")]},
            {"configurable": {"thread_id": thread}},
        )
    assert sorted(managers) == ["alpha", "beta"]
    for thread, cm in managers.items():
        texts = [m.text for m in logged_messages(cm)]
        assert texts[1] == f"task of {thread}"  # each log holds its own thread only
        assert len(texts) == 7  # system, task, call, output, search call, search result, answer
    no_checkpointer = create_agent(
        model, tools=[run_command], middleware=[ContextFoldMiddleware(session_for)]
    )
    with pytest.raises(ContextFoldError, match="needs a thread id"):
        no_checkpointer.invoke({"messages": [HumanMessage("no thread")]})
