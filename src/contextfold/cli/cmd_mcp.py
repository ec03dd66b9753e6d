"""``contextfold mcp``: serve a workspace's recovery tools to MCP clients (see mcp_server)."""

from __future__ import annotations

import argparse
from typing import TextIO

from ..errors import ConfigError
from .common import DEFAULT_WORKSPACE, add_workspace, folder_of, port_number, store_spec


def cmd_mcp(args: argparse.Namespace, out: TextIO) -> int:
    from ..mcp.server import DEFAULT_PORT, run

    if args.port is not None and not args.http:
        raise ConfigError("--port needs --http (without it the server speaks over stdio)")
    spec = store_spec(args) or DEFAULT_WORKSPACE
    folder = folder_of(spec)
    run(
        None if folder is None else str(folder),
        store=spec if folder is None else None,
        agent_id=args.agent_id,
        allow_agents=tuple(args.allow_agent or ()),
        http=args.http,
        port=DEFAULT_PORT if args.port is None else args.port,
    )
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "mcp",
        help="serve a workspace's recall / session / memory tools to MCP clients",
        description="An MCP server (stdio by default, or streamable HTTP on 127.0.0.1) with "
        "the tools recall, read_offloaded, session_list, session_history, session_search, "
        "memory_search and memory_get over one workspace, as seen by one agent. Needs "
        "the mcp extra (pip install '.[mcp]' in the checkout).",
    )
    add_workspace(p)
    p.add_argument(
        "--agent-id",
        default="default",
        metavar="ID",
        help="the agent whose sessions the tools read (default: default)",
    )
    p.add_argument(
        "--allow-agent",
        action="append",
        metavar="ID",
        help="also allow the sessions of this agent (repeatable; '*' allows every agent)",
    )
    p.add_argument(
        "--http",
        action="store_true",
        help="serve streamable HTTP on 127.0.0.1 instead of stdio",
    )
    p.add_argument(
        "--port",
        type=port_number,
        default=None,
        help="HTTP port with --http (default 8765; 0 picks a free port and prints the URL)",
    )
    p.set_defaults(fn=cmd_mcp)
