"""``contextfold ui``: the inspector on its own uvicorn server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TextIO

from ..errors import ConfigError
from ..storage import Store
from . import DEFAULT_PORT
from .app import Inspector, new_token


class InspectorServer:
    """The inspector over ``store`` on 127.0.0.1:``port`` (0: any free port), in a daemon
    thread (``start``/``stop``) or in the foreground (``run``). The store stays the caller's."""

    def __init__(self, store: Store, *, port: int = DEFAULT_PORT, token: str | None = None) -> None:
        import uvicorn

        self.token = token or new_token()
        self.inspector = Inspector(store, token=self.token, local_only=True)
        config = uvicorn.Config(
            self.inspector.app(), host="127.0.0.1", port=port, log_level="warning", lifespan="off"
        )
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        sock = self._server.servers[0].sockets[0]
        host, port = sock.getsockname()[:2]
        return f"http://{host}:{port}/"

    def start(self, timeout: float = 20.0) -> InspectorServer:
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._server.serve()), name="contextfold-ui", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ConfigError("the inspector server did not start (is the port taken?)")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.inspector.close()

    def run(self, out: TextIO) -> None:
        """Serve until Ctrl-C, after printing where (with the token, after ``#``: it stays
        in the browser)."""
        self.start()
        print(f"contextfold inspector: {self.url}#token={self.token}", file=out, flush=True)
        print("read-only; deleting a session needs the token in that link. Ctrl-C stops.", file=out)
        try:
            while self._thread is not None and self._thread.is_alive():
                self._thread.join(timeout=0.5)
        finally:
            self.stop()


__all__ = ["DEFAULT_PORT", "InspectorServer"]
