"""Command line: compact, demo, records, restore, blocks, sessions, mcp, serve, bench.

Each subcommand lives in its own module with a ``register(subparsers)`` function; add a new
one to :data:`COMMAND_MODULES`. Exit codes: 0 done, 1 nothing found or a view over the window,
2 bad input or an error (message on stderr), 130 interrupted, 141 the reader of stdout
went away.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from types import ModuleType

from .. import export
from ..errors import ContextFoldError
from ..gateway import cli as cmd_serve  # `contextfold serve`: its parser lives with the gateway
from . import cmd_compact, cmd_evidence, cmd_mcp, cmd_sessions
from .cmd_compact import DEMO_ATTRIBUTION, demo_trace_path, load_transcript

#: Modules that add subcommands, in the order ``--help`` lists them.
COMMAND_MODULES: tuple[ModuleType, ...] = (
    cmd_compact,
    cmd_evidence,
    cmd_sessions,
    cmd_mcp,
    export,
    cmd_serve,
)

#: exit status of a command whose output pipe was closed (128 + SIGPIPE, like other tools)
EXIT_BROKEN_PIPE = 141

EPILOG = (
    "exit status: 0 done; 1 nothing found, or a view over the window; 2 bad input or an "
    "error. Run `contextfold COMMAND --help` for a command's options."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="contextfold",
        description="Keep LLM agents inside their context window; inspect and restore what "
        "compaction removed.",
        epilog=EPILOG,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(sub)
    sub.add_parser(
        "bench",
        help="replay benchmark (see contextfold bench --help)",
        add_help=False,
    )
    return parser


def _silence_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null so the exit-time flush stays quiet."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a real file (tests capture into a StringIO)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        code = _dispatch(args_list)
        sys.stdout.flush()  # a closed pipe shows up here, not in the interpreter's exit
        return code
    except BrokenPipeError:
        # `contextfold records --json | head -1`: the reader has what it wanted. Not an error
        # to report, and not SIGPIPE's default action either (that would also kill an HTTP
        # server on a client that hangs up).
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        print("contextfold: interrupted", file=sys.stderr)
        return 130


def _dispatch(args_list: list[str]) -> int:
    if args_list[:1] == ["bench"]:
        from ..bench.cli import main as bench_main

        return bench_main(args_list[1:])
    args = build_parser().parse_args(args_list)
    try:
        code: int = args.fn(args, sys.stdout)
        return code
    except ContextFoldError as exc:
        sys.stdout.flush()
        print(f"contextfold: error: {exc}", file=sys.stderr)
        return 2


__all__ = ["DEMO_ATTRIBUTION", "build_parser", "demo_trace_path", "load_transcript", "main"]

if __name__ == "__main__":
    raise SystemExit(main())
