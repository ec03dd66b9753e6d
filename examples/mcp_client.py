"""Query a contextfold workspace from an MCP client, as Claude Code or Codex would.

Replays the bundled agent trajectory through ContextManager at a small window (so tool
outputs leave the view), then starts ``contextfold mcp`` over stdio with the official MCP SDK
client and asks it for the original text of one of them.

    python examples/mcp_client.py [WORKSPACE]
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile

from mcp import Client
from mcp.client.stdio import StdioServerParameters

from contextfold import ContextManager
from contextfold.cli import demo_trace_path


def build_workspace(folder: str) -> str:
    """Replay the trajectory; returns the tool call id of the largest offloaded output."""
    cm = ContextManager(workspace=folder, session_id="demo", context_window=4_000)
    messages = json.loads(demo_trace_path().read_text(encoding="utf-8"))
    for i, msg in enumerate(messages):
        if msg.get("role") == "assistant" and i > 0:
            cm.prepare()
        cm.add(msg)
    offloaded = cm.offloaded()
    return max(offloaded, key=lambda k: offloaded[k].chars)


async def ask(folder: str, call_id: str) -> None:
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "contextfold", "mcp", "--workspace", folder],
        # the SDK starts servers with a minimal environment: keep a source checkout importable
        env={k: v for k, v in os.environ.items() if k == "PYTHONPATH"},
    )
    async with Client(server) as client:
        tools = await client.list_tools()
        print("tools:", ", ".join(t.name for t in tools.tools))
        listed = await client.call_tool("session_list", {})
        print(listed.content[0].text)
        page = await client.call_tool(
            "read_offloaded", {"sessionId": "demo", "id": call_id, "limit": 5}
        )
        print(page.content[0].text)
        hits = await client.call_tool(
            "recall", {"sessionId": "demo", "query": "Traceback error", "k": 1, "max_chars": 400}
        )
        print(hits.content[0].text)


def main() -> None:
    folder = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="contextfold-mcp-")
    call_id = build_workspace(folder)
    asyncio.run(ask(folder, call_id))


if __name__ == "__main__":
    main()
