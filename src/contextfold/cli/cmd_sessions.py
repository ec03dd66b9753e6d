"""``contextfold sessions list|history|search``: the session tools, from the shell.

The person at the shell owns the workspace, so every agent's sessions are visible unless
``--agent-id`` narrows them to one agent. The text is what the agent tools answer.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from ..workspace_tools import WorkspaceTools
from .common import add_workspace, existing_workspace, non_negative_int, positive_int


def _run(args: argparse.Namespace, out: TextIO, tool: str, call: dict[str, Any]) -> int:
    existing_workspace(args.workspace)
    tools = WorkspaceTools(args.workspace, allow_agents=("*",))
    if args.agent_id:
        call["agentId"] = args.agent_id
    elif tool != "session_history":  # history: the session id alone names it, any owner
        call["agentId"] = "*"
    try:
        text, is_error = tools.call(tool, call)
    finally:
        tools.close()
    if is_error:
        print(f"contextfold sessions: {text.removeprefix('Error: ')}", file=sys.stderr)
        return 1
    print(text, file=out)
    return 0


def cmd_list(args: argparse.Namespace, out: TextIO) -> int:
    return _run(args, out, "session_list", {})


def cmd_history(args: argparse.Namespace, out: TextIO) -> int:
    call: dict[str, Any] = {"sessionId": args.session, "lastN": args.last, "offset": args.offset}
    if args.max_chars is not None:
        call["maxChars"] = args.max_chars
    return _run(args, out, "session_history", call)


def cmd_search(args: argparse.Namespace, out: TextIO) -> int:
    call: dict[str, Any] = {"query": args.query, "limit": args.limit}
    if args.session:
        call["sessionId"] = args.session
    return _run(args, out, "session_search", call)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "sessions",
        help="list, read and search the sessions of a workspace",
        description="The raw, never-compacted history of every session in a workspace.",
    )
    cmds = p.add_subparsers(dest="sessions_command", required=True, metavar="list|history|search")

    def common(q: argparse.ArgumentParser) -> None:
        add_workspace(q)
        q.add_argument(
            "--agent-id",
            metavar="ID",
            help="only the sessions of this agent (default: every agent)",
        )

    q = cmds.add_parser("list", help="sessions, most recently updated first")
    common(q)
    q.set_defaults(fn=cmd_list)

    q = cmds.add_parser("history", help="the raw messages of one session, newest last")
    q.add_argument("session", help="session id")
    q.add_argument("--last", type=positive_int, default=20, help="how many messages (default 20)")
    q.add_argument(
        "--offset",
        type=non_negative_int,
        default=0,
        help="skip this many newest messages first, to page back (default 0)",
    )
    q.add_argument(
        "--max-chars",
        type=positive_int,
        default=None,
        help="trim each message to this many characters (default 2000)",
    )
    common(q)
    q.set_defaults(fn=cmd_history)

    q = cmds.add_parser("search", help="full-text search over every session's messages")
    q.add_argument("query", help="words to look for")
    q.add_argument("--session", metavar="ID", help="only this session")
    q.add_argument(
        "--limit", type=positive_int, default=10, help="most hits (default 10, at most 50)"
    )
    common(q)
    q.set_defaults(fn=cmd_search)
