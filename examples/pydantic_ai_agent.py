"""pydantic-ai agent with contextfold: `python examples/pydantic_ai_agent.py` (no network, no
key). The model is pydantic-ai's OpenAIChatModel on a local fake OpenAI endpoint (in your code:
`Agent("openai:gpt-4.1", ...)` or any model).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.usage import UsageLimits

from contextfold import ContextManager
from contextfold.integrations.pydantic_ai import ContextFoldCapability

sys.path.insert(0, str(Path(__file__).parent))
from _fake_llm import FakeOpenAIServer, command_output


def main() -> None:
    server = FakeOpenAIServer(turns=30, overflow_at=12)
    provider = OpenAIProvider(base_url=server.base_url, api_key="not-needed")
    cm = ContextManager(tempfile.mkdtemp(prefix="contextfold-example-"), "s1", 8_000)
    agent = Agent(
        OpenAIChatModel("fake-model", provider=provider),
        system_prompt="You are a coding agent.",
        capabilities=[ContextFoldCapability(cm)],  # <- the one line contextfold needs
    )

    @agent.tool_plain
    def run_command(step: int, command: str) -> str:
        """Run a shell command in the repository."""
        return command_output(step)

    result = agent.run_sync(
        "Make the test suite pass.", usage_limits=UsageLimits(request_limit=100)
    )
    server.close()
    print(result.output)
    compactions = [r for r in cm.records() if r.changed]
    print(f"model requests: {server.requests} (one refused for context overflow, then retried)")
    print(f"compactions: {len(compactions)}")
    print(f"largest request: {server.largest_request_chars} characters")


if __name__ == "__main__":
    main()
