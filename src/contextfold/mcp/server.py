"""``contextfold mcp``: a workspace's recovery tools for any MCP client.

Claude Code, Codex, Cursor or any other MCP client can search and restore what a contextfold
workspace holds: ``recall`` and ``read_offloaded`` (by session id), ``session_list`` /
``session_history`` / ``session_search`` and ``memory_search`` / ``memory_get``. The tools and
their JSON schemas are the ones :class:`~contextfold.mcp.workspace_tools.WorkspaceTools` offers,
answered by the same handlers as an agent's own tools, scoped to one agent id.

Built on the official ``mcp`` Python SDK (the ``mcp`` extra), imported only
when a server is built, over stdio (the default) or streamable HTTP bound to 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ..errors import ConfigError
from ..extras import needs_extra
from .workspace_tools import WorkspaceTools

if TYPE_CHECKING:
    from mcp.server import Server

SERVER_NAME = "contextfold"
HTTP_HOST = "127.0.0.1"
HTTP_PATH = "/mcp"
DEFAULT_PORT = 8765

INSTRUCTIONS = (
    "Tools over a contextfold workspace: the full, never-compacted history of agent sessions. "
    "Find a session with session_list or session_search, read its raw messages with "
    "session_history, get the exact original text of a tool output that was compacted away "
    "with recall (search by command, file, test or error; or an evidence id) or "
    "read_offloaded (by tool call id), and look up kept facts with memory_search / memory_get."
)


def workspace_from_store(store: str) -> Path | None:
    """The folder a ``--store`` value names (a path or ``file://``), or None when it is a
    store URL (``postgresql://...``, ``memory://``) to open with :func:`open_store`."""
    parts = urlsplit(store)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ConfigError(f"--store {store!r}: a file URL must name a local folder")
        return Path(parts.path)
    if parts.scheme and len(parts.scheme) > 1:  # "C:\\..." is a path, not a scheme
        return None
    return Path(store)


def _require_mcp() -> None:
    try:
        import mcp.server  # noqa: F401
    except ImportError:
        raise ConfigError(needs_extra("contextfold mcp (the MCP SDK)", "mcp")) from None


def build_server(tools: WorkspaceTools) -> Server[object]:
    """An MCP server (low-level SDK ``Server``) exposing ``tools`` with their JSON schemas."""
    _require_mcp()
    import anyio.to_thread
    import mcp.types as types
    from mcp.server import Server, ServerRequestContext

    listed = [
        types.Tool(
            name=t.name,
            description=t.description,
            input_schema=dict(t.parameters),
            annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
        )
        for t in tools.tools()
    ]
    schemas = {t.name: dict(t.parameters) for t in tools.tools()}

    async def list_tools(
        ctx: ServerRequestContext[object], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call_tool(
        ctx: ServerRequestContext[object], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        # the handlers read files and SQLite: keep them off the event loop
        text, is_error = await anyio.to_thread.run_sync(
            tools.call, params.name, params.arguments or {}
        )
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], is_error=is_error
        )

    from importlib.metadata import PackageNotFoundError, version

    try:
        ours = version("contextfold")
    except PackageNotFoundError:
        ours = "0"
    return Server(
        SERVER_NAME,
        version=ours,
        instructions=INSTRUCTIONS,
        get_tool_input_schema=schemas.get,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def serve_stdio(server: Server[object]) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


async def serve_http(
    server: Server[object], *, port: int, announce: Callable[[str], None] | None = None
) -> None:
    """Streamable HTTP on 127.0.0.1:``port`` (0: any free port); ``announce`` gets the URL
    once the server accepts connections."""
    import uvicorn

    app = server.streamable_http_app(streamable_http_path=HTTP_PATH, host=HTTP_HOST)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HTTP_HOST, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {HTTP_HOST}:{port}: {exc.strerror or exc}") from None
    url = f"http://{HTTP_HOST}:{sock.getsockname()[1]}{HTTP_PATH}"
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uv = uvicorn.Server(config)
    task = asyncio.ensure_future(uv.serve(sockets=[sock]))
    while not uv.started and not task.done():
        await asyncio.sleep(0.02)
    if uv.started and announce is not None:
        announce(url)
    await task


def run(
    workspace: str | Path | None = None,
    *,
    store: str | None = None,
    agent_id: str = "default",
    allow_agents: Collection[str] = (),
    http: bool = False,
    port: int = DEFAULT_PORT,
) -> None:
    """Serve until the client disconnects (stdio) or the process is interrupted (HTTP)."""
    _require_mcp()
    tools = WorkspaceTools(workspace, store=store, agent_id=agent_id, allow_agents=allow_agents)
    server = build_server(tools)
    try:
        if http:

            def announce(url: str) -> None:
                print(f"contextfold mcp: serving {tools.where} at {url}", file=sys.stderr)
                sys.stderr.flush()

            asyncio.run(serve_http(server, port=port, announce=announce))
        else:
            asyncio.run(serve_stdio(server))
    except KeyboardInterrupt:
        pass
    finally:
        tools.close()


__all__ = ["build_server", "run", "serve_http", "serve_stdio", "workspace_from_store"]
