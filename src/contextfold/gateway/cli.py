"""``contextfold serve``: argparse setup, the handler, and a background server for embedding."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, TextIO

from ..errors import ConfigError
from ..extras import needs_extra
from .config import ENV_PREFIX, GatewayConfig, load_config
from .sessions import check_store

if TYPE_CHECKING:
    from starlette.applications import Starlette

HELP = "run the compaction gateway (an OpenAI / Anthropic compatible HTTP proxy)"
EPILOG = f"""\
Point an agent at it, for example:
  ANTHROPIC_BASE_URL=http://127.0.0.1:8787 claude
  OPENAI_BASE_URL=http://127.0.0.1:8787/v1 codex
Every setting can also come from a TOML file (--config) or {ENV_PREFIX}<NAME> variables
(e.g. {ENV_PREFIX}AUTH_TOKEN for the gateway's own bearer token)."""


def add_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "serve",
        help=HELP,
        description=HELP,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--upstream", help="provider base URL, e.g. https://api.anthropic.com")
    p.add_argument("--host", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default 8787; 0 picks a free one)")
    p.add_argument(
        "--store",
        "--workspace",
        dest="store",
        metavar="STORE",
        help="workspace folder or postgresql:// URL (default $CONTEXTFOLD_GATEWAY_STORE, else "
        "$CONTEXTFOLD_STORE, else the config file's, else ./.contextfold); --workspace is the "
        "same option",
    )
    p.add_argument("--config", help="TOML file with gateway settings")
    p.add_argument("--window", type=int, dest="context_window", help="context window in tokens")
    p.add_argument(
        "--preset",
        help="compaction preset: progressive (default), harness or spec (the design notes)",
    )
    p.add_argument(
        "--summarizer",
        choices=["extractive", "upstream"],
        help="who writes compaction summaries: extractive (no model call, the default) or "
        "upstream (the upstream model, with the request's credentials)",
    )
    p.add_argument("--max-body-bytes", type=int, help="largest request body (default 32 MiB)")
    p.add_argument("--upstream-timeout", type=float, help="seconds to wait for the upstream")
    p.add_argument(
        "--max-messages", type=int, help="messages one request may carry (default 10000)"
    )
    p.add_argument("--max-depth", type=int, help="how deep a request body may nest (default 128)")
    p.add_argument(
        "--max-header-bytes", type=int, help="bytes of a request's headers (default 64 KiB)"
    )
    p.add_argument(
        "--header-timeout",
        type=float,
        help="seconds a client has to send a request's headers (default 10)",
    )
    p.add_argument(
        "--idle-timeout",
        type=float,
        help="seconds an idle kept-alive connection stays open (default 30)",
    )
    p.add_argument(
        "--request-timeout",
        type=float,
        help="seconds the gateway may spend on a request before the upstream call: its body, "
        "storing it, the view (default 30)",
    )
    p.add_argument(
        "--workers",
        type=int,
        help="server processes sharing the port and the store (default 0: one per core, "
        "at most 8; one on memory://); a client keeps to one while its connection stays open",
    )
    p.add_argument(
        "--log-level",
        choices=["debug", "info", "warning", "error"],
        help="JSON log lines on stderr from this level on (default info)",
    )
    p.set_defaults(fn=cmd_serve)
    return p


#: the name the CLI's command modules use
register = add_parser


def config_from_args(args: argparse.Namespace) -> GatewayConfig:
    keys = (
        "upstream",
        "host",
        "port",
        "store",
        "context_window",
        "preset",
        "summarizer",
        "max_body_bytes",
        "upstream_timeout",
        "max_messages",
        "max_depth",
        "max_header_bytes",
        "header_timeout",
        "idle_timeout",
        "request_timeout",
        "workers",
        "log_level",
    )
    overrides = {k: getattr(args, k, None) for k in keys}
    if overrides["store"] is None and not os.environ.get(ENV_PREFIX + "STORE"):
        # the store every contextfold command uses, unless the gateway's own variable is set
        overrides["store"] = os.environ.get("CONTEXTFOLD_STORE") or None
    config = load_config(file=args.config, overrides=overrides)
    check_store(config.store)
    return config


def _setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter(
            '{"ts": "%(asctime)s", "level": "%(levelname)s", "pid": %(process)d, '
            '"log": %(message)s}'
        )
    )
    logger = logging.getLogger("contextfold.gateway")
    logger.handlers[:] = [handler]
    logger.setLevel(level.upper())
    logger.propagate = False


#: how ``contextfold serve --workers N`` hands its settings to the worker processes
WORKER_CONFIG_ENV = "CONTEXTFOLD_GATEWAY__WORKER_CONFIG"


def worker_app() -> Starlette:
    """The app of one worker process of ``contextfold serve --workers N`` (uvicorn's factory)."""
    from . import serving
    from .app import create_app

    config = GatewayConfig(**json.loads(os.environ[WORKER_CONFIG_ENV])).check()
    serving.HEADER_TIMEOUT = config.header_timeout
    _setup_logging(config.log_level)
    sys.setswitchinterval(0.001)
    return create_app(config)


def cmd_serve(args: argparse.Namespace, out: TextIO) -> int:
    config = config_from_args(args)
    try:
        import uvicorn

        from .app import create_app
        from .serving import uvicorn_options, worker_count
    except ImportError as exc:
        raise ConfigError(needs_extra("contextfold serve", "gateway", exc)) from None

    config = replace(config, workers=worker_count(config))
    _setup_logging(config.log_level)
    # ContextManager work runs in worker threads; a short GIL switch interval keeps the event
    # loop (streaming, other sessions) from waiting behind them (this process is ours)
    sys.setswitchinterval(0.001)
    workers = f", {config.workers} worker processes" if config.workers > 1 else ""
    print(
        f"contextfold gateway on http://{config.host}:{config.port} -> {config.shown_upstream} "
        f"(store {config.shown_store}{workers})",
        file=out,
        flush=True,
    )
    options = uvicorn_options(config)
    if config.workers == 1:
        server_config = uvicorn.Config(create_app(config), **options)
        server_config.header_timeout = config.header_timeout  # type: ignore[attr-defined]
        server = uvicorn.Server(server_config)
        server.run()
        return 0 if server.started else 1
    from .stores import open_shared_store

    # created (or migrated) once, here, before the workers open it side by side
    open_shared_store(config.store).close()
    os.environ[WORKER_CONFIG_ENV] = json.dumps(asdict(config))
    with _multiprocess_metrics():
        uvicorn.run(f"{__name__}:worker_app", factory=True, workers=config.workers, **options)
    return 0


@contextlib.contextmanager
def _multiprocess_metrics() -> Iterator[None]:
    """Prometheus multiprocess mode for the worker processes: each writes its counts to a
    folder of its own files and ``/metrics`` adds them up (a fresh folder, removed at exit,
    unless ``PROMETHEUS_MULTIPROC_DIR`` names one already)."""
    from .metrics import MULTIPROC_ENV

    if os.environ.get(MULTIPROC_ENV):
        yield
        return
    folder = tempfile.mkdtemp(prefix="contextfold-metrics-")
    os.environ[MULTIPROC_ENV] = folder
    try:
        yield
    finally:
        os.environ.pop(MULTIPROC_ENV, None)
        shutil.rmtree(folder, ignore_errors=True)


class BackgroundServer:
    """The gateway on a uvicorn server in a daemon thread (tests, benchmarks, notebooks)."""

    def __init__(self, config: GatewayConfig) -> None:
        import uvicorn

        from .app import create_app
        from .serving import uvicorn_options

        check_store(config.store)
        self.config = config
        server_config = uvicorn.Config(create_app(config), lifespan="on", **uvicorn_options(config))
        server_config.header_timeout = config.header_timeout  # type: ignore[attr-defined]
        self._server = uvicorn.Server(server_config)
        self._thread = threading.Thread(target=self._run, name="contextfold-gateway", daemon=True)

    def _run(self) -> None:
        asyncio.run(self._server.serve())

    def start(self, timeout: float = 20.0) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ConfigError("the gateway server did not start")
            time.sleep(0.01)
        return self

    @property
    def url(self) -> str:
        sock = self._server.servers[0].sockets[0]
        host, port = sock.getsockname()[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = [
    "BackgroundServer",
    "add_parser",
    "cmd_serve",
    "config_from_args",
    "register",
    "worker_app",
]
