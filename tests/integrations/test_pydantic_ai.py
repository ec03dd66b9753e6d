"""pydantic-ai with ContextFoldCapability, end to end: a 64-turn agent loop over real trace tool
outputs at a 6,000-token window, driven by pydantic-ai's own ``FunctionModel``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from contextfold import ContextManager
from contextfold.core.tokens import count_tools, get_counter
from contextfold.core.wire import to_openai
from contextfold.testing import message_tokens, overflow_error

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

require("pydantic_ai")

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402
from pydantic_ai.usage import RequestUsage, UsageLimits  # noqa: E402

from contextfold.errors import ContextOverflowError  # noqa: E402
from contextfold.integrations import HistoryDivergedError  # noqa: E402
from contextfold.integrations._common import (  # noqa: E402
    fingerprint,
    logged_messages,
    openai_tool,
)
from contextfold.integrations.pydantic_ai import (  # noqa: E402
    ContextFoldCapability,
    to_openai_dicts,
)

NO_LIMIT = UsageLimits(request_limit=None)


class Scripted:
    def __init__(self, script: AgentScript, fail_at: set[int], always_fail: bool = False):
        self.script = script
        self.fail_at = fail_at
        self.always_fail = always_fail
        self.calls = 0
        self.failures = 0
        self.requests: list[list[dict[str, Any]]] = []
        self.tools: list[str] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.calls += 1
        self.tools = [t.name for t in info.function_tools]
        sent = to_openai_dicts(messages)
        if info.instructions:  # what a provider receives: the instructions as a system message
            sent.insert(0, {"role": "system", "content": info.instructions})
        self.requests.append(sent)
        if self.always_fail or self.calls in self.fail_at:
            self.failures += 1
            raise overflow_error("openai")
        last = messages[-1]
        tool_text = None
        if isinstance(last, ModelRequest) and isinstance(last.parts[-1], ToolReturnPart):
            tool_text = last.parts[-1].model_response_str()
        calls = self.script.next_calls(tool_text)
        # report input tokens as a provider would (messages + tool schemas), for calibration
        schemas = [
            openai_tool(t.name, t.description or "", t.parameters_json_schema)
            for t in [*info.function_tools, *info.output_tools]
        ]
        used = RequestUsage(
            input_tokens=message_tokens(self.requests[-1]) + count_tools(get_counter(), schemas)
        )
        if calls[0][0] == "final":
            return ModelResponse(parts=[TextPart(calls[0][1]["text"])], usage=used)
        parts = [
            ToolCallPart(name, args, tool_call_id=f"call_{self.calls}_{k}")
            for k, (name, args) in enumerate(calls)
        ]
        return ModelResponse(parts=parts, usage=used)


def _agent(
    tmp_path: Path, instructions: bool = False, **kw: Any
) -> tuple[Agent[None, str], Scripted, ContextManager, Any]:
    system, _task, steps = trace_steps()
    cm = ContextManager(tmp_path / "ws", "pyd", WINDOW)
    fake = Scripted(AgentScript(steps, recall_target(steps)), {OVERFLOW_AT}, **kw)
    prompt = {"instructions": system} if instructions else {"system_prompt": system}
    agent = Agent(FunctionModel(fake), capabilities=[ContextFoldCapability(cm)], **prompt)

    @agent.tool_plain
    def run_command(step: int, command: str) -> str:
        """Run a shell command in the repository."""
        return steps[step].output

    return agent, fake, cm, steps


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_long_agent_loop(tmp_path: Path, mode: str) -> None:
    # the sync run uses a system prompt (logged), the async run instructions (budgeted per call)
    agent, fake, cm, steps = _agent(tmp_path, instructions=mode == "async")
    task = trace_steps()[1]
    if mode == "sync":
        result = agent.run_sync(task, usage_limits=NO_LIMIT)
    else:
        result = asyncio.run(agent.run(task, usage_limits=NO_LIMIT))
    assert result.output.startswith("Done")
    assert fake.failures == 1
    assert fake.calls == TURNS + 3 + 1
    assert {"run_command", "recall", "read_offloaded", "memory_search"} <= set(fake.tools)

    assert any(r.changed for r in cm.records())
    peak = max(check_request(r, WINDOW, f"request {i}") for i, r in enumerate(fake.requests))
    assert peak > WINDOW // 3

    # the run's own history stays complete (the view is request-only) and the log mirrors it
    history = result.all_messages()
    dicts = to_openai_dicts(history)
    assert len(dicts) > 2 * TURNS
    assert [fingerprint(to_openai(m)) for m in logged_messages(cm)][:-1] == [
        fingerprint(d) for d in dicts
    ][: len(logged_messages(cm)) - 1]

    # recall returned the byte-exact output that had left the view
    original = steps[fake.script.target].output
    assert not any(original in str(m.get("content")) for m in fake.requests[-3])
    returns = [
        p
        for m in history
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart) and p.tool_name == "recall"
    ]
    assert len(returns) == 2
    assert original in returns[-1].model_response_str()

    # continuing the conversation appends only the new messages (the final answer was logged
    # by after_run); asking for an old output injects it as evidence into the request
    before = len(logged_messages(cm))
    fake.script.phase = "done"
    question = f"What was the exact output of `{steps[fake.script.target].command}` earlier?"
    again = agent.run_sync(question, message_history=history)
    assert len(logged_messages(cm)) == before + 2  # the new prompt and its answer
    assert again.output.startswith("Done")
    asked = fake.requests[-1]
    assert asked[-1]["content"] == question
    injected = asked[-2]  # contextfold's evidence, as a user part right before the question
    assert injected["role"] == "user" and "evidence restored" in injected["content"]
    assert original[:300] in injected["content"]  # verbatim (cut to the injection budget)
    fake.script.phase = "done"
    with pytest.raises(HistoryDivergedError):
        agent.run_sync("unrelated", message_history=history[:3])


def test_second_overflow_raises(tmp_path: Path) -> None:
    agent, fake, _cm, _steps = _agent(tmp_path, always_fail=True)
    with pytest.raises(ContextOverflowError):
        agent.run_sync("hello")
    assert fake.failures == 2


@pytest.mark.filterwarnings("ignore:`RetryPromptPart` is deprecated")  # still in old histories
def test_conversion_of_every_part_kind() -> None:
    """Each part kind maps to an OpenAI message and back; what the view keeps unchanged comes back
    as the very same objects (thinking included), a changed tool result as a copy."""
    from pydantic_ai.messages import RetryPromptPart, SystemPromptPart, ThinkingPart, UserPromptPart

    from contextfold.integrations._common import REF
    from contextfold.integrations.pydantic_ai import _Natives

    history: list[ModelMessage] = [
        ModelRequest(parts=[SystemPromptPart("sys"), UserPromptPart("fix it")]),
        ModelResponse(
            parts=[
                ThinkingPart("let me look", signature="sig"),
                TextPart("Looking."),
                ToolCallPart("run_command", {"step": 1}, tool_call_id="c1"),
                ToolCallPart("run_command", "not json", tool_call_id="c2"),
            ]
        ),
        ModelRequest(
            parts=[
                ToolReturnPart("run_command", "output one", tool_call_id="c1"),
                RetryPromptPart("bad arguments", tool_name="run_command", tool_call_id="c2"),
            ]
        ),
        ModelResponse(parts=[TextPart("done")]),
        ModelRequest(parts=[UserPromptPart("thanks")]),
    ]
    dicts = to_openai_dicts(history)
    assert [d["role"] for d in dicts] == [
        "system", "user", "assistant", "tool", "tool", "assistant", "user"
    ]  # fmt: skip
    assert dicts[2]["content"] == "Looking."
    assert [c["id"] for c in dicts[2]["tool_calls"]] == ["c1", "c2"]
    natives = _Natives(history, dicts)
    same = natives.render(dicts)
    assert all(a is b for a, b in zip(same, history)) and len(same) == len(history)

    view = [dict(d) for d in dicts]
    view[3]["content"] = "[offloaded: read_offloaded('c1')]"
    view.insert(1, {"role": "user", "content": "summary of earlier work"})
    rendered = natives.render(view)
    assert rendered[1] is history[1]  # thinking and the signature pass through untouched
    first = rendered[0]
    assert isinstance(first, ModelRequest) and isinstance(first.parts[1], UserPromptPart)
    assert first.parts[0] is history[0].parts[0]
    tool_request = rendered[2]
    assert isinstance(tool_request, ModelRequest)
    changed = tool_request.parts[0]
    assert isinstance(changed, ToolReturnPart) and changed.content.startswith("[offloaded")
    assert changed.tool_call_id == "c1" and changed is not history[2].parts[0]
    assert tool_request.parts[1] is history[2].parts[1]
    assert all(REF in d for d in dicts)


def test_streamed_run_recovers_overflow(tmp_path: Path) -> None:
    """``run_stream`` through the capability: the overflow raised by the streaming model before
    its first event is recovered, and the view stays in a small window."""
    from pydantic_ai.models.function import DeltaToolCall

    _system, _task, steps = trace_steps()
    calls: list[list[dict[str, Any]]] = []

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> Any:
        calls.append(to_openai_dicts(messages))
        if len(calls) == 5:
            raise overflow_error("openai")
        if len(calls) < 14:
            args = f'{{"step": {len(calls)}}}'
            yield {
                0: DeltaToolCall(name="run_command", json_args=args, tool_call_id=f"c{len(calls)}")
            }
        else:
            yield "Done streaming."

    cm = ContextManager(tmp_path / "ws", "streamed", 3_000)
    agent = Agent(FunctionModel(stream_function=stream), capabilities=[ContextFoldCapability(cm)])

    @agent.tool_plain
    def run_command(step: int) -> str:
        """Run the step's command."""
        return steps[step].output

    async def run() -> str:
        async with agent.run_stream("go", usage_limits=NO_LIMIT) as result:
            return await result.get_output()

    assert asyncio.run(run()) == "Done streaming."
    assert len(calls) == 14
    assert any(r.changed for r in cm.records())
    for i, request in enumerate(calls):
        check_request(request, 3_000, f"streamed request {i}")
    assert len(logged_messages(cm)) == 1 + 2 * 12 + 1  # prompt, 12 turns, answer
