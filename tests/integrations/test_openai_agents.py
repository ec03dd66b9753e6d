"""OpenAI Agents SDK with ContextFoldModel + ContextFoldSession, end to end: a 64-turn
``Runner.run`` over real trace tool outputs at a 6,000-token window, driven by a fake
``agents.Model`` whose responses carry reasoning items."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from contextfold import ContextManager
from contextfold.testing import message_tokens, overflow_error

from .integration_support import (
    OVERFLOW_AT,
    PARALLEL_TURNS,
    TURNS,
    WINDOW,
    AgentScript,
    check_request,
    recall_target,
    require,
    trace_steps,
)

require("agents")

from agents import (  # noqa: E402
    Agent,
    Model,
    ModelResponse,
    RunConfig,
    Runner,
    Usage,
    function_tool,
)
from agents.testing import assistant_message, function_call  # noqa: E402
from openai.types.responses import ResponseReasoningItem  # noqa: E402

from contextfold.errors import ContextFoldError, ContextOverflowError  # noqa: E402
from contextfold.integrations._common import logged_messages  # noqa: E402
from contextfold.integrations.openai_agents import (  # noqa: E402
    ContextFoldModel,
    ContextFoldSession,
    context_filter,
    contextfold_tools,
    to_openai_dicts,
)

NO_TRACING = RunConfig(tracing_disabled=True)


class FakeModel(Model):
    """Follows an AgentScript; every response is a reasoning item plus the action."""

    def __init__(self, script: AgentScript, fail_at: set[int], always_fail: bool = False):
        self.script = script
        self.fail_at = fail_at
        self.always_fail = always_fail
        self.calls = 0
        self.failures = 0
        self.requests: list[list[dict[str, Any]]] = []
        self.tools: list[str] = []

    async def get_response(
        self,
        system_instructions: Any,
        input: Any,
        model_settings: Any,
        tools: Any,
        *a: Any,
        **kw: Any,
    ) -> Any:
        self.calls += 1
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        self.requests.append([dict(i) for i in items])
        self.tools = [t.name for t in tools]
        if self.always_fail or self.calls in self.fail_at:
            self.failures += 1
            raise overflow_error("openai")
        last = items[-1]
        tool_text = last.get("output") if last.get("type") == "function_call_output" else None
        calls = self.script.next_calls(tool_text)
        reasoning = ResponseReasoningItem(id=f"rs_{self.calls}", type="reasoning", summary=[])
        output: list[Any] = [reasoning]
        if calls[0][0] == "final":
            output.append(assistant_message(calls[0][1]["text"], item_id="msg_1"))
        for k, (name, args) in enumerate(c for c in calls if c[0] != "final"):
            n = f"{self.calls}_{k}"
            output.append(function_call(name, args, call_id=f"call_{n}", item_id=f"fc_{n}"))
        dicts = to_openai_dicts(items)
        usage = Usage(requests=1, input_tokens=message_tokens(dicts))
        return ModelResponse(output=output, usage=usage, response_id=None)

    def stream_response(self, *a: Any, **kw: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


def check_items(items: list[dict[str, Any]], what: str) -> None:
    """Provider rules of the Responses API: each function_call_output has its function_call,
    each function_call its output, and a call keeps the reasoning item it came with."""
    calls = [i["call_id"] for i in items if i.get("type") == "function_call"]
    outputs = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
    assert sorted(calls) == sorted(outputs), f"{what}: unpaired calls/outputs"
    for k, item in enumerate(items):
        if item.get("type") == "function_call":
            j = k - 1
            while j >= 0 and items[j].get("type") == "function_call":
                j -= 1  # parallel calls of the same response
            assert j >= 0 and items[j].get("type") == "reasoning", f"{what}: reasoning lost"
            turn = item["id"].removeprefix("fc_").split("_")[0]
            assert items[j]["id"] == f"rs_{turn}", f"{what}: reasoning of another turn"


def _setup(tmp_path: Path, **kw: Any) -> tuple[Agent[Any], FakeModel, ContextManager, Any]:
    system, _task, steps = trace_steps()
    cm = ContextManager(tmp_path / "ws", "agents", WINDOW)
    fake = FakeModel(AgentScript(steps, recall_target(steps)), {OVERFLOW_AT}, **kw)

    @function_tool
    def run_command(step: int, command: str) -> str:
        """Run a shell command in the repository."""
        return steps[step].output

    agent = Agent(
        name="coder",
        instructions=system,
        model=ContextFoldModel(fake, cm),
        tools=[run_command, *contextfold_tools(cm)],
    )
    return agent, fake, cm, steps


def test_long_run_with_session(tmp_path: Path) -> None:
    agent, fake, cm, steps = _setup(tmp_path)
    session = ContextFoldSession(cm)
    task = trace_steps()[1]
    result = asyncio.run(
        Runner.run(agent, task, session=session, max_turns=500, run_config=NO_TRACING)
    )
    assert str(result.final_output).startswith("Done")
    assert fake.failures == 1
    assert fake.calls == TURNS + 3 + 1
    assert {"run_command", "recall", "read_offloaded", "session_list"} <= set(fake.tools)

    assert any(r.changed for r in cm.records())
    for i, items in enumerate(fake.requests):
        check_items(items, f"request {i}")
        check_request(to_openai_dicts(items), WINDOW, f"request {i}")

    # recall answered with the exact output that had left the view
    original = steps[fake.script.target].output
    assert not any(original in str(i.get("output")) for i in fake.requests[-3])
    outputs = [i for i in result.to_input_list() if i.get("type") == "function_call_output"]
    assert original in str(outputs[-1]["output"])

    # the session is the log: stored once, the whole conversation, in order
    items = asyncio.run(session.get_items())
    outputs_stored = [i for i in items if i.get("type") == "function_call_output"]
    assert len(outputs_stored) == TURNS + 2 + PARALLEL_TURNS
    assert items[0] == {"role": "user", "content": task}
    # task, one assistant message per turn, one tool message per call, the answer
    assert len(logged_messages(cm)) == 1 + (TURNS + 2) + (TURNS + 2 + PARALLEL_TURNS) + 1

    # a later run after a restart (a fresh manager on the same workspace) continues the same
    # session: the stored items come back as they were (reasoning included), only new ones add
    before = len(logged_messages(cm))
    restarted = ContextManager(tmp_path / "ws", "agents", WINDOW)
    session = ContextFoldSession(restarted)
    assert asyncio.run(session.get_items()) == items
    again = agent.clone(model=ContextFoldModel(fake, restarted))
    fake.script.phase = "done"
    asyncio.run(Runner.run(again, "thanks", session=session, run_config=NO_TRACING))
    assert len(logged_messages(restarted)) == before + 2
    check_items(fake.requests[-1], "continued run")
    with pytest.raises(ContextFoldError, match="append-only"):
        asyncio.run(session.pop_item())


def test_input_filter_alone(tmp_path: Path) -> None:
    system, task, steps = trace_steps()
    cm = ContextManager(tmp_path / "ws", "filter", WINDOW)
    fake = FakeModel(AgentScript(steps, recall_target(steps)), set())

    @function_tool
    def run_command(step: int, command: str) -> str:
        """Run a shell command in the repository."""
        return steps[step].output

    agent = Agent(
        name="coder", instructions=system, model=fake, tools=[run_command, *contextfold_tools(cm)]
    )
    config = RunConfig(tracing_disabled=True, call_model_input_filter=context_filter(cm))
    result = asyncio.run(Runner.run(agent, task, max_turns=500, run_config=config))
    assert str(result.final_output).startswith("Done")
    assert any(r.changed for r in cm.records())
    for i, items in enumerate(fake.requests):
        check_items(items, f"request {i}")
        check_request(to_openai_dicts(items), WINDOW, f"request {i}")
    outputs = [i for i in result.to_input_list() if i.get("type") == "function_call_output"]
    assert steps[fake.script.target].output in str(outputs[-1]["output"])


def test_second_overflow_raises(tmp_path: Path) -> None:
    agent, fake, _cm, _steps = _setup(tmp_path, always_fail=True)
    with pytest.raises(ContextOverflowError):
        asyncio.run(Runner.run(agent, "hello", run_config=NO_TRACING))
    # nothing to compact in a one-message conversation: the retry would be byte-identical to
    # the request that just failed, so it is not sent
    assert fake.failures == 1


def test_streamed_run_with_the_sdk_scripted_model(tmp_path: Path) -> None:
    """Runner.run_streamed through ContextFoldModel around the SDK's own ScriptedModel: the
    overflow before the first event is recovered, compaction happens, requests stay valid."""
    from agents.testing import ModelStep, ScriptedModel

    _system, task, steps = trace_steps()
    turns = 16
    script: list[Any] = []
    for i in range(turns):
        if i == 10:
            script.append(ModelStep.raise_error(overflow_error("openai")))
        call = function_call(
            "run_command", {"step": i, "command": steps[i].command}, call_id=f"c{i}"
        )
        script.append(ModelStep(output=[call]))
    script.append(ModelStep(output=[assistant_message("Done streaming.")]))
    inner = ScriptedModel(script)
    cm = ContextManager(tmp_path / "ws", "streamed", 3_000)

    @function_tool
    def run_command(step: int, command: str) -> str:
        """Run a shell command in the repository."""
        return steps[step].output

    agent = Agent(name="coder", model=ContextFoldModel(inner, cm), tools=[run_command])

    async def run() -> Any:
        result = Runner.run_streamed(agent, task, max_turns=100, run_config=NO_TRACING)
        async for _event in result.stream_events():
            pass
        return result

    result = asyncio.run(run())
    assert result.final_output == "Done streaming."
    inner.assert_complete()
    assert len(inner.calls) == turns + 2  # every step, the failed one included
    assert any(r.changed for r in cm.records())
    for i, call in enumerate(inner.calls):
        items = [dict(x) for x in call.input]
        assert call.streamed
        check_request(to_openai_dicts(items), 3_000, f"streamed request {i}")
    assert len(logged_messages(cm)) == 1 + 2 * turns + 1  # the final answer is logged at once


def test_item_conversion_round_trip() -> None:
    """Responses items -> messages -> items gives the original items back (reasoning, ids,
    non-text content, developer role); a changed tool output becomes a new output item."""
    from contextfold.integrations.openai_agents import to_items

    items: list[Any] = [
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": [{"type": "input_text", "text": "see"}, {"type": "input_image", "image_url": "data:x"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"},
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "Looking.", "annotations": []}]},
        {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "run", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "big output"},
        {"role": "user", "content": "thanks"},
    ]  # fmt: skip
    dicts = to_openai_dicts(items)
    assert [d["role"] for d in dicts] == ["system", "user", "assistant", "tool", "user"]
    assert dicts[2]["content"] == "Looking." and dicts[2]["tool_calls"][0]["id"] == "c1"
    assert to_items(dicts) == items
    view = [dict(d) for d in dicts]
    view[3]["content"] = "[offloaded]"
    again = to_items(view)
    assert again[:5] == items[:5]
    assert again[5] == {"type": "function_call_output", "call_id": "c1", "output": "[offloaded]"}
