"""Helpers shared by the subcommands: argument types, workspace and session checks."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import ConfigError, UnsafeIdError
from ..export import open_cli_store
from ..paths import Workspace, check_session_id
from ..storage import Store
from ..workspace_tools import open_workspace

DEFAULT_WORKSPACE = "./.contextfold"


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (``-k 0`` and ``--window -1`` are usage errors)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def port_number(text: str) -> int:
    """argparse type: a TCP port, 0 meaning any free one."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be between 0 and 65535, got {value}")
    return value


def add_workspace(p: argparse.ArgumentParser, *, default: str | None = DEFAULT_WORKSPACE) -> None:
    where = f"default {default}" if default else "default: a new temporary folder"
    p.add_argument(
        "--workspace",
        default=default,
        metavar="DIR",
        help=f"the contextfold workspace folder ({where})",
    )


def existing_workspace(path: str) -> Workspace:
    """The workspace at ``path``, or ConfigError "no workspace at DIR"."""
    return open_workspace(path)


def existing_session(path: str, session_id: str) -> Store:
    """The store of the workspace at ``path``, holding ``session_id`` (close it when done);
    ConfigError naming what is missing."""
    existing_workspace(path)
    try:
        check_session_id(session_id)
    except UnsafeIdError as exc:
        raise ConfigError(str(exc)) from None
    store = open_cli_store(path, None)
    if store.session(session_id) is None:
        store.close()
        raise ConfigError(f"no session {session_id!r} in the workspace at {Path(path)}")
    return store
