"""LangChain v1 agent with contextfold: `python examples/langchain_agent.py` (no network, no key).

The model is a LangChain chat model talking to a local fake OpenAI endpoint (in your code:
`ChatOpenAI(model="gpt-4.1")` or any chat model); everything else is what you would write.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, convert_to_openai_messages
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from openai import OpenAI
from pydantic import Field

from contextfold import ContextManager
from contextfold.integrations.langchain import ContextFoldMiddleware

sys.path.insert(0, str(Path(__file__).parent))
from _fake_llm import FakeOpenAIServer, command_output


class LocalChatModel(BaseChatModel):
    """A minimal OpenAI-compatible chat model (stands in for ChatOpenAI)."""

    base_url: str
    tools: list[Any] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "local-openai"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        from langchain_core.utils.function_calling import convert_to_openai_tool

        return self.model_copy(update={"tools": [convert_to_openai_tool(t) for t in tools]})

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        client = OpenAI(base_url=self.base_url, api_key="not-needed", max_retries=0)
        reply = client.chat.completions.create(
            model="fake-model", messages=convert_to_openai_messages(messages), tools=self.tools
        )
        msg = reply.choices[0].message
        calls = [
            {"name": c.function.name, "args": json.loads(c.function.arguments), "id": c.id}
            for c in msg.tool_calls or []
            if c.type == "function"
        ]
        answer = AIMessage(msg.content or "", tool_calls=calls)
        return ChatResult(generations=[ChatGeneration(message=answer)])


@tool
def run_command(step: int, command: str) -> str:
    """Run a shell command in the repository."""
    return command_output(step)


def main() -> None:
    server = FakeOpenAIServer(turns=30, overflow_at=12)
    workspace = tempfile.mkdtemp(prefix="contextfold-example-")
    cm = ContextManager(workspace, session_id="thread-1", context_window=8_000)
    agent = create_agent(
        LocalChatModel(base_url=server.base_url),
        tools=[run_command],
        system_prompt="You are a coding agent.",
        middleware=[ContextFoldMiddleware(cm)],  # <- the one line contextfold needs
        checkpointer=InMemorySaver(),
    )
    result = agent.invoke(
        {"messages": [{"role": "user", "content": "Make the test suite pass."}]},
        {"configurable": {"thread_id": "thread-1"}, "recursion_limit": 200},
    )
    server.close()
    print(result["messages"][-1].content)
    compactions = [r for r in cm.records() if r.changed]
    print(f"model requests: {server.requests} (one refused for context overflow, then retried)")
    print(f"compactions: {len(compactions)}")
    print(f"largest request: {server.largest_request_chars} characters")


if __name__ == "__main__":
    main()
