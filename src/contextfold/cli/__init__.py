"""Command line: compact, demo, records, restore, blocks, sessions, export, mcp, ui, serve, bench.

Each subcommand lives in its own module with a ``register(subparsers)`` function; add a new
one to :data:`COMMAND_MODULES`. The modules are imported inside :func:`main`, so that Ctrl-C
while the program starts gives one line, not a traceback. Exit codes: see :data:`EPILOG`.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from types import ModuleType

#: Modules that add subcommands, in the order ``--help`` lists them (imported on first use).
COMMAND_MODULES: tuple[str, ...] = (
    "contextfold.cli.cmd_compact",
    "contextfold.cli.cmd_evidence",
    "contextfold.cli.cmd_sessions",
    "contextfold.cli.cmd_mcp",
    "contextfold.cli.cmd_ui",
    "contextfold.cli.cmd_export",
    "contextfold.gateway.cli",  # `contextfold serve`: its parser lives with the gateway
)

#: one exit status per kind of outcome, the same in every command
EXIT_OK = 0
#: the command ran and found nothing (no records, no hits), or a view is over the window
EXIT_NOTHING = 1
#: bad input: a usage error, a missing store, session or file, an invalid transcript or setting
EXIT_BAD_INPUT = 2
#: the store failed (unreachable, read-only, disk full); nothing was half written
EXIT_STORAGE = 3
#: interrupted (Ctrl-C)
EXIT_INTERRUPTED = 130
#: the reader of stdout went away (128 + SIGPIPE, like other tools)
EXIT_BROKEN_PIPE = 141

EPILOG = (
    "exit status (every command): 0 done; 1 nothing found, or a view over the window; "
    "2 bad input (usage, a missing store, session or file, an invalid transcript); "
    "3 the store failed (nothing half written); 130 interrupted; 141 stdout closed. "
    "Run `contextfold COMMAND --help` for a command's options."
)


def _version() -> str:
    from .. import __version__

    return __version__


def _mark_leaves(parser: argparse.ArgumentParser) -> None:
    """Each parser remembers itself as ``_parser`` (the deepest one wins), so that an unknown
    option is reported with the usage of the subcommand it was given to."""
    parser.set_defaults(_parser=parser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _mark_leaves(child)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="contextfold",
        description="Keep LLM agents inside their context window; inspect and restore what "
        "compaction removed.",
        epilog=EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"contextfold {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        module: ModuleType = importlib.import_module(name)
        module.register(sub)
    sub.add_parser(
        "bench",
        help="replay benchmark (see contextfold bench --help)",
        add_help=False,
    )
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                if child.epilog is None:
                    child.epilog = EPILOG.split(" Run ", 1)[0]
                _mark_leaves(child)
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
        return EXIT_INTERRUPTED


def _dispatch(args_list: list[str]) -> int:
    from ..errors import ContextFoldError, StorageError

    try:
        if args_list[:1] == ["bench"]:
            from ..bench.cli import main as bench_main

            return bench_main(args_list[1:])
        args, extra = build_parser().parse_known_args(args_list)
        if extra:
            leaf: argparse.ArgumentParser = args._parser
            leaf.error(f"unrecognized arguments: {' '.join(extra)}")
        code: int = args.fn(args, sys.stdout)
        return code
    except ContextFoldError as exc:
        sys.stdout.flush()
        print(f"contextfold: error: {exc}", file=sys.stderr)
        return EXIT_STORAGE if isinstance(exc, StorageError) else EXIT_BAD_INPUT


def __getattr__(name: str) -> object:
    # kept importable from here: ``from contextfold.cli import load_transcript``
    if name in ("DEMO_ATTRIBUTION", "demo_trace_path", "load_transcript"):
        from . import cmd_compact

        return getattr(cmd_compact, name)
    raise AttributeError(f"module 'contextfold.cli' has no attribute {name!r}")


__all__ = [
    "COMMAND_MODULES",
    "EPILOG",
    "EXIT_BAD_INPUT",
    "EXIT_BROKEN_PIPE",
    "EXIT_INTERRUPTED",
    "EXIT_NOTHING",
    "EXIT_OK",
    "EXIT_STORAGE",
    "build_parser",
    "main",
]

if __name__ == "__main__":
    raise SystemExit(main())
