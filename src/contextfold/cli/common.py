"""Helpers shared by the subcommands: argument types, workspace and session checks."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from ..core.paths import Workspace, check_session_id
from ..engine.export import open_cli_store
from ..errors import ConfigError, UnsafeIdError
from ..mcp.workspace_tools import open_workspace
from ..storage import ENV_VAR, Store, open_store

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


STORE_HELP = (
    "where sessions are stored: a workspace folder or a postgresql:// URL (default "
    "$CONTEXTFOLD_STORE, else ./.contextfold); --workspace is the same option"
)


def add_workspace(
    p: argparse.ArgumentParser,
    *,
    default: str | None = DEFAULT_WORKSPACE,
    otherwise: str = "a new temporary folder",
) -> None:
    """``--store STORE`` (alias ``--workspace``), read by :func:`store_spec`. ``default=None``:
    without ``--store`` and ``$CONTEXTFOLD_STORE`` the command makes its own (``otherwise``
    says what, in the help)."""
    help_text = STORE_HELP
    if default is None:
        help_text = (
            "where sessions are stored: a workspace folder or a postgresql:// URL (default "
            f"$CONTEXTFOLD_STORE, else {otherwise}); --workspace is the same option"
        )
    p.add_argument("--store", "--workspace", dest="store", metavar="STORE", help=help_text)
    p.set_defaults(store_default=default)


def store_spec(args: argparse.Namespace) -> str | None:
    """The store a command uses: ``--store``/``--workspace``, else ``$CONTEXTFOLD_STORE``, else
    its default (``./.contextfold``; None for a command that makes its own, like ``demo``)."""
    given: str | None = getattr(args, "store", None)
    if given:
        return given
    env = os.environ.get(ENV_VAR)
    if env:
        return env
    default: str | None = getattr(args, "store_default", DEFAULT_WORKSPACE)
    return default


def folder_of(spec: str) -> Path | None:
    """The folder a store value names (a path or ``file://``), or None for a store URL
    (``postgresql://...``, ``memory://``)."""
    parts = urlsplit(spec)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ConfigError(f"store {spec!r}: a file URL must name a local folder")
        return Path(parts.path)
    if parts.scheme and len(parts.scheme) > 1 and "://" in spec:  # "C:\\..." is a path
        return None
    return Path(spec)


def shown(spec: str) -> str:
    """A store value fit for a message: a URL's password replaced by ``***``."""
    parts = urlsplit(spec)
    if parts.password is None:
        return spec
    return urlunsplit(parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@")))


def open_existing_store(spec: str) -> Store:
    """The store ``spec`` names, which must exist when it is a folder (ConfigError "no
    workspace at DIR"); a URL is opened (its tables created on first use). Close it."""
    folder = folder_of(spec)
    if folder is None:
        return open_store(spec)
    open_workspace(folder)
    return open_cli_store(str(folder), None)


def existing_workspace(path: str) -> Workspace:
    """The workspace at ``path``, or ConfigError "no workspace at DIR"."""
    return open_workspace(path)


def existing_session(spec: str, session_id: str) -> Store:
    """The store ``spec`` names, holding ``session_id`` (close it when done); ConfigError
    naming what is missing."""
    try:
        check_session_id(session_id)
    except UnsafeIdError as exc:
        raise ConfigError(str(exc)) from None
    store = open_existing_store(spec)
    try:
        found = store.session(session_id)
    except BaseException:
        store.close()
        raise
    if found is None:
        store.close()
        raise ConfigError(f"no session {session_id!r} in {shown(spec)}")
    return store
