"""``contextfold ui``: the session inspector in the browser (see contextfold.inspector)."""

from __future__ import annotations

import argparse
import os
from typing import TextIO

from ..errors import ConfigError
from ..extras import needs_extra
from .common import add_workspace, open_existing_store, port_number, store_spec

TOKEN_ENV = "CONTEXTFOLD_UI_TOKEN"


def cmd_ui(args: argparse.Namespace, out: TextIO) -> int:
    try:
        from ..inspector.server import InspectorServer
    except ImportError as exc:
        raise ConfigError(needs_extra("contextfold ui", "gateway", exc)) from None
    store = open_existing_store(store_spec(args) or "")
    try:
        token = os.environ.get(TOKEN_ENV) or None
        InspectorServer(store, port=args.port, token=token).run(out)
    finally:
        store.close()
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from ..inspector import DEFAULT_PORT

    p = sub.add_parser(
        "ui",
        help="open the session inspector in the browser",
        description="Serve the session inspector on 127.0.0.1: the sessions of a store, each "
        "one's model calls and compactions, the view at any call next to the full history, "
        "and the exact original text of what left the view. Read-only; deleting a session "
        f"needs the token printed in the link (or set ${TOKEN_ENV}). Needs the gateway extra.",
    )
    add_workspace(p)
    p.add_argument(
        "--port",
        type=port_number,
        default=DEFAULT_PORT,
        help=f"port on 127.0.0.1 (default {DEFAULT_PORT}; 0 picks a free one)",
    )
    p.set_defaults(fn=cmd_ui)
