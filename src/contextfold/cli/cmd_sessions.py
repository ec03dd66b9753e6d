"""``contextfold sessions list|show|search|delete|fork|tail``: the sessions of a store, from
the shell (``history`` is another name for ``show``).

The person at the shell owns the store, so every agent's sessions are visible unless
``--agent-id`` narrows them to one agent.
"""

from __future__ import annotations

import argparse
import re
from typing import Any, TextIO

from ..engine import session_ops as ops
from ..errors import ConfigError
from ..mcp.workspace_tools import WorkspaceTools
from ..recovery.sessions.tools import render_message
from .common import (
    add_workspace,
    existing_session,
    folder_of,
    non_negative_int,
    open_existing_store,
    positive_int,
    shown,
    store_spec,
)

#: what ``--limit`` of ``sessions search`` accepts (the session_search tool's own bound)
MAX_SEARCH_LIMIT = 50
#: the agent tool's hint for a trimmed message, rewritten as the CLI command that reads it
_TRIMMED_HINT = re.compile(
    r'read the whole message with session_history \{"sessionId": "(?P<sid>[^"]+)", '
    r'"offset": (?P<offset>\d+), "lastN": 1, "maxChars": (?P<chars>\d+)\}'
)


def _cli_hints(text: str) -> str:
    return _TRIMMED_HINT.sub(
        lambda m: (
            f"read the whole message with: contextfold sessions show {m['sid']} "
            f"--start {m['offset']} --last 1 --max-chars {m['chars']}"
        ),
        text,
    )


def _spec(args: argparse.Namespace) -> str:
    return store_spec(args) or ""


def cmd_list(args: argparse.Namespace, out: TextIO) -> int:
    store = open_existing_store(_spec(args))
    try:
        infos = ops.list_sessions(store, args.agent_id)
    finally:
        store.close()
    if not infos:
        who = f" of agent {args.agent_id!r}" if args.agent_id else ""
        print(f"no sessions{who} in {shown(_spec(args))}", file=out)
        return 1
    print(f"{len(infos)} session(s) in {shown(_spec(args))}, most recent first:", file=out)
    for i in infos:
        print(
            f"- {i.session_id} (agent {i.agent_id}, {i.messages} messages, updated "
            f"{i.updated_at}): {i.title or '(no user message)'}",
            file=out,
        )
    return 0


def _render(entry: Any, sid: str, max_chars: int) -> str:
    # the offset the agent hint names is the message position here (``--start``)
    return _cli_hints(
        render_message(
            entry, max_chars=max_chars, session_id=sid, offset=entry.seq, whole_hint=True
        )
    )


def cmd_show(args: argparse.Namespace, out: TextIO) -> int:
    store = existing_session(_spec(args), args.session)
    try:
        info = ops.get_session(store, args.session)
        if args.agent_id and info.agent_id != args.agent_id:
            raise ConfigError(
                f"session {args.session!r} belongs to agent {info.agent_id!r}, not "
                f"{args.agent_id!r}"
            )
        total = info.messages
        if args.start is not None:
            first, stop = args.start, min(total, args.start + args.last)
        else:
            stop = max(0, total - args.offset)
            first = max(0, stop - args.last)
        entries = ops.show_session(store, args.session, start=first, stop=stop)
    finally:
        store.close()
    if not entries:
        print(f"session {args.session} has {total} messages; none in that range", file=out)
        return 1
    print(
        f"Session {args.session} (agent {info.agent_id}): messages {first}-{stop - 1} of "
        f"{total}, oldest first.",
        file=out,
    )
    for e in entries:
        print("\n" + _render(e, args.session, args.max_chars), file=out)
    if first > 0:
        back = max(0, first - args.last)
        print(
            f"\n{first} earlier message(s): contextfold sessions show {args.session} "
            f"--start {back} --last {first - back}",
            file=out,
        )
    return 0


def cmd_search(args: argparse.Namespace, out: TextIO) -> int:
    spec = _spec(args)
    if args.session:
        existing_session(spec, args.session).close()
    folder = folder_of(spec)
    tools = (
        WorkspaceTools(str(folder), allow_agents=("*",))
        if folder is not None
        else WorkspaceTools(store=spec, allow_agents=("*",))
    )
    call: dict[str, Any] = {"query": args.query, "limit": args.limit}
    call["agentId"] = args.agent_id or "*"
    if args.session:
        call["sessionId"] = args.session
    try:
        text, is_error = tools.call("session_search", call)
    finally:
        tools.close()
    if is_error:
        raise ConfigError(text.removeprefix("Error: ").removeprefix("session_search: "))
    lines = text.splitlines()
    if lines and lines[-1].startswith("Read around a hit with session_history"):
        lines[-1] = "Read around a hit: contextfold sessions show SESSION --start SEQ"
    print("\n".join(lines), file=out)
    return 0 if not text.startswith("No matches") else 1


def cmd_delete(args: argparse.Namespace, out: TextIO) -> int:
    if not args.yes:
        raise ConfigError(
            f"deleting session {args.session!r} removes its whole history; add --yes to do it"
        )
    store = existing_session(_spec(args), args.session)
    try:
        info = ops.delete_session(store, args.session)
    finally:
        store.close()
    print(f"deleted session {args.session} ({info.messages} messages)", file=out)
    return 0


def cmd_fork(args: argparse.Namespace, out: TextIO) -> int:
    store = existing_session(_spec(args), args.session)
    try:
        copied = ops.fork_session(store, args.session, args.new_session, upto=args.upto)
    finally:
        store.close()
    print(
        f"session {args.new_session}: {copied} messages copied from {args.session} "
        f"(0-{copied - 1}); {args.session} is unchanged",
        file=out,
    )
    return 0


def cmd_tail(args: argparse.Namespace, out: TextIO) -> int:
    store = existing_session(_spec(args), args.session)
    printed = 0
    try:
        for entry in ops.tail_session(
            store, args.session, last=args.last, start=args.start, interval=args.interval
        ):
            print(_render(entry, args.session, args.max_chars) + "\n", file=out, flush=True)
            printed += 1
            if args.count is not None and printed >= args.count:
                break
    except KeyboardInterrupt:  # the way to stop following
        pass
    finally:
        store.close()
    return 0


def _common(q: argparse.ArgumentParser, *, agent: bool = True) -> None:
    add_workspace(q)
    if agent:
        q.add_argument(
            "--agent-id",
            metavar="ID",
            help="only the sessions of this agent (default: every agent)",
        )


def _max_chars(q: argparse.ArgumentParser) -> None:
    q.add_argument(
        "--max-chars",
        type=positive_int,
        default=2000,
        help="trim each message to this many characters (default 2000)",
    )


def search_limit(text: str) -> int:
    value = positive_int(text)
    if value > MAX_SEARCH_LIMIT:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_SEARCH_LIMIT}, got {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not 0.01 <= value <= 60:
        raise argparse.ArgumentTypeError(f"must be between 0.01 and 60 seconds, got {value}")
    return value


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "sessions",
        help="list, show, search, delete, fork and follow the sessions of a store",
        description="The raw, never-compacted history of every session in a store (a "
        "workspace folder or PostgreSQL), the gateway's included.",
    )
    cmds = p.add_subparsers(
        dest="sessions_command",
        required=True,
        metavar="list|show|search|delete|fork|tail",
    )

    q = cmds.add_parser("list", help="sessions, most recently updated first")
    _common(q)
    q.set_defaults(fn=cmd_list)

    for name in ("show", "history"):
        q = cmds.add_parser(
            name,
            help="the raw messages of one session, oldest first"
            if name == "show"
            else "another name for show",
        )
        q.add_argument("session", help="session id")
        q.add_argument(
            "--last", type=positive_int, default=20, help="how many messages (default 20)"
        )
        q.add_argument(
            "--start",
            type=non_negative_int,
            default=None,
            metavar="SEQ",
            help="from this message position on (default: the newest --last)",
        )
        q.add_argument(
            "--offset",
            type=non_negative_int,
            default=0,
            help="without --start: skip this many newest messages first, to page back",
        )
        _max_chars(q)
        _common(q)
        q.set_defaults(fn=cmd_show)

    q = cmds.add_parser("search", help="full-text search over every session's messages")
    q.add_argument("query", help="words to look for")
    q.add_argument("--session", metavar="ID", help="only this session")
    q.add_argument(
        "--limit",
        type=search_limit,
        default=10,
        help=f"most hits (default 10, at most {MAX_SEARCH_LIMIT})",
    )
    _common(q)
    q.set_defaults(fn=cmd_search)

    q = cmds.add_parser("delete", help="delete a session and its whole history")
    q.add_argument("session", help="session id")
    q.add_argument("--yes", action="store_true", help="really delete it")
    _common(q, agent=False)
    q.set_defaults(fn=cmd_delete)

    q = cmds.add_parser("fork", help="copy a session, up to a message, into a new session")
    q.add_argument("session", help="session id to copy from (left unchanged)")
    q.add_argument("new_session", metavar="NEW", help="id of the new session")
    q.add_argument(
        "--upto",
        type=non_negative_int,
        default=None,
        metavar="SEQ",
        help="copy messages 0..SEQ (default: all)",
    )
    _common(q, agent=False)
    q.set_defaults(fn=cmd_fork)

    q = cmds.add_parser(
        "tail",
        help="follow a live session (the gateway's too): print each new message",
        description="Print the newest --last messages (or those from --start on), then each "
        "message as it is stored, until Ctrl-C (or --count messages).",
    )
    q.add_argument("session", help="session id")
    q.add_argument(
        "--last", type=non_negative_int, default=5, help="newest messages first (default 5)"
    )
    q.add_argument(
        "--start", type=non_negative_int, default=None, metavar="SEQ", help="from this position"
    )
    q.add_argument(
        "--count", type=positive_int, default=None, help="stop after printing this many messages"
    )
    q.add_argument(
        "--interval",
        type=_seconds,
        default=ops.TAIL_INTERVAL,
        help=f"seconds between looks at the store (default {ops.TAIL_INTERVAL})",
    )
    _max_chars(q)
    _common(q, agent=False)
    q.set_defaults(fn=cmd_tail)


__all__ = ["MAX_SEARCH_LIMIT", "register", "search_limit"]
