"""``contextfold export`` and ``contextfold migrate``: a session's files, an old workspace moved in."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from ..engine.export import export_session
from ..errors import ConfigError
from ..storage import SQLiteStore


def cmd_export(args: argparse.Namespace, out: TextIO) -> int:
    from .common import existing_session, store_spec

    store = existing_session(store_spec(args) or "", args.session)
    try:
        counts = export_session(store, args.session, Path(args.output))
    finally:
        store.close()
    summary = ", ".join(f"{v} {k}" for k, v in counts.items())
    print(f"session {args.session} exported to {args.output}: {summary}", file=out)
    return 0


def cmd_migrate(args: argparse.Namespace, out: TextIO) -> int:
    from ..engine.migrate import migrate_workspace

    folder = Path(args.workspace)
    if not folder.is_dir():
        raise ConfigError(f"{folder} is not a folder")
    store = SQLiteStore(folder)
    try:
        counts = migrate_workspace(store)
    finally:
        store.close()
    print(
        f"{folder}: {counts['sessions']} of {counts['seen']} old session folder(s) moved into "
        f"{folder / 'store.sqlite'} ({counts['facts']} memory facts); the old files are left "
        "in place",
        file=out,
    )
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``export`` and ``migrate`` subcommands to the CLI's subparsers."""
    p = sub.add_parser("export", help="write a session's log, records, blocks and memory files")
    p.add_argument("session", help="session id")
    p.add_argument("-o", "--output", required=True, help="folder to write into")
    from .common import add_workspace

    add_workspace(p)
    p.set_defaults(fn=cmd_export)
    p = sub.add_parser("migrate", help="move a workspace of an earlier release into its store")
    p.add_argument("workspace", help="the workspace folder written by an earlier release")
    p.set_defaults(fn=cmd_migrate)
