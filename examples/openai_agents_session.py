"""OpenAI Agents SDK with contextfold: `python examples/openai_agents_session.py` (no network, no
key). The model is the SDK's own OpenAIChatCompletionsModel on a local fake OpenAI endpoint (in
your code: your usual model, e.g. `OpenAIResponsesModel("gpt-4.1", AsyncOpenAI())`).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner, function_tool
from openai import AsyncOpenAI

from contextfold import ContextManager
from contextfold.integrations.openai_agents import (
    ContextFoldModel,
    ContextFoldSession,
    contextfold_tools,
)

sys.path.insert(0, str(Path(__file__).parent))
from _fake_llm import FakeOpenAIServer, command_output


@function_tool
def run_command(step: int, command: str) -> str:
    """Run a shell command in the repository."""
    return command_output(step)


async def main() -> None:
    server = FakeOpenAIServer(turns=30, overflow_at=12)
    client = AsyncOpenAI(base_url=server.base_url, api_key="not-needed", max_retries=0)
    model = OpenAIChatCompletionsModel(model="fake-model", openai_client=client)

    cm = ContextManager(tempfile.mkdtemp(prefix="contextfold-example-"), "s1", 8_000)
    agent = Agent(
        name="coder",
        instructions="You are a coding agent.",
        model=ContextFoldModel(model, cm),  # contextfold's view + one retry on overflow
        tools=[run_command, *contextfold_tools(cm)],  # + recall, read_offloaded, ...
    )
    session = ContextFoldSession(cm)  # the conversation is stored once: in contextfold's log
    result = await Runner.run(
        agent,
        "Make the test suite pass.",
        session=session,
        max_turns=100,
        run_config=RunConfig(tracing_disabled=True),
    )
    server.close()
    print(result.final_output)
    compactions = [r for r in cm.records() if r.changed]
    print(f"model requests: {server.requests} (one refused for context overflow, then retried)")
    print(f"compactions: {len(compactions)}; session items: {len(await session.get_items())}")
    print(f"largest request: {server.largest_request_chars} characters")


if __name__ == "__main__":
    asyncio.run(main())
