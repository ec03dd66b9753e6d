"""The inspector's web app: the page (static files of this package) and its JSON API.

Mounted by ``contextfold ui`` on its own, and by the gateway at ``/ui``. Every API answer is
read from the store; the one request that changes anything, ``DELETE /api/sessions/ID``,
needs the token (``X-Contextfold-Token`` or ``Authorization: Bearer``) and the page asks for
confirmation first. The page itself holds no data and loads nothing from elsewhere.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..core.credentials import redact, token_given
from ..core.paths import check_session_id
from ..engine.session_ops import delete_session
from ..errors import ConfigError, ContextFoldError, StorageError, UnsafeIdError
from ..jsontypes import JSON
from ..storage import Store
from .data import list_sessions, timeline
from .recover import Recoverer
from .view_at import view_at

STATIC = {
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
}
#: what the page may load: itself only (no CDN, no inline script, no external fetch)
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}
#: hosts a standalone inspector answers (a page on another site cannot rebind to it)
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]"})


def _static(name: str) -> bytes:
    return resources.files("contextfold.inspector").joinpath("static").joinpath(name).read_bytes()


def _int(request: Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a whole number, got {raw[:40]!r}") from None
    if not lo <= value <= hi:
        raise ConfigError(f"{name} must be between {lo} and {hi}, got {value}")
    return value


def _text(request: Request, name: str, limit: int = 500) -> str:
    value = request.query_params.get(name, "")
    if len(value) > limit:
        raise ConfigError(f"{name} is at most {limit} characters")
    return value


class Inspector:
    """The app over one open store. ``token``: what deleting needs (and, with
    ``reads_need_token``, every API call); ``local_only`` refuses requests whose Host is not
    this machine's loopback name."""

    def __init__(
        self,
        store: Store,
        *,
        token: str | None,
        reads_need_token: bool = False,
        local_only: bool = False,
        on_delete: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        self.token = token
        self.reads_need_token = reads_need_token
        self.local_only = local_only
        self.on_delete = on_delete
        self.recoverer = Recoverer(store)

    # ------------------------------------------------------------------ checks
    def _authorized(self, request: Request) -> bool:
        return self.token is not None and token_given(request.headers, self.token)

    def _host_ok(self, request: Request) -> bool:
        if not self.local_only:
            return True
        host = request.headers.get("host", "")
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        return name in LOCAL_HOSTS

    def _error(self, status: int, message: str) -> JSONResponse:
        return JSONResponse(
            {"error": redact(message, self.token)}, status_code=status, headers=HEADERS
        )

    def _api(
        self, fn: Callable[[Request], Any], *, write: bool = False
    ) -> Callable[[Request], Response]:
        def endpoint(request: Request) -> Response:
            if not self._host_ok(request):
                return self._error(403, "this inspector answers only on its loopback address")
            if write and self.token is None:
                return self._error(403, "deleting needs a token: start the gateway with one")
            if (write or self.reads_need_token) and not self._authorized(request):
                return self._error(401, "missing or wrong token")
            try:
                return JSONResponse(fn(request), headers=HEADERS)
            except StorageError as exc:
                return self._error(503, f"the store failed: {exc}")
            except ConfigError as exc:
                status = 404 if str(exc).startswith("no ") else 400
                return self._error(status, str(exc))
            except ContextFoldError as exc:
                return self._error(400, str(exc))

        return endpoint

    # ------------------------------------------------------------------ pages
    def page(self, request: Request) -> Response:
        if not self._host_ok(request):
            return self._error(403, "this inspector answers only on its loopback address")
        return Response(_static("index.html"), media_type="text/html", headers=HEADERS)

    def asset(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC:
            return self._error(404, "no such file")
        return Response(_static(name), media_type=STATIC[name], headers=HEADERS)

    # ------------------------------------------------------------------ API
    def sessions(self, request: Request) -> JSON:
        return list_sessions(
            self.store,
            query=_text(request, "q"),
            agent=_text(request, "agent", 200),
            limit=_int(request, "limit", 50, 1, 200),
            offset=_int(request, "offset", 0, 0, 10_000_000),
        )

    def session(self, request: Request) -> JSON:
        return timeline(self.store, request.path_params["sid"])

    def head(self, request: Request) -> JSON:
        """How far the session's log goes: the page polls it to follow a live session."""
        sid = request.path_params["sid"]
        try:
            check_session_id(sid)
        except UnsafeIdError as exc:
            raise ConfigError(str(exc)) from None
        return {"head": self.store.head(sid)}

    def view(self, request: Request) -> JSON:
        return view_at(self.store, request.path_params["sid"], _int(request, "call", 1, 1, 10**7))

    def message(self, request: Request) -> JSON:
        pos = _int(request, "position", 0, 0, 10**7)
        return self.recoverer.message(request.path_params["sid"], pos)

    def offload(self, request: Request) -> JSON:
        sid = request.path_params["sid"]
        return self.recoverer.restore_offload(sid, _text(request, "call_id", 200))

    def evidence(self, request: Request) -> JSON:
        sid = request.path_params["sid"]
        return self.recoverer.restore_evidence(sid, _text(request, "id", 80))

    def recall(self, request: Request) -> JSON:
        sid = request.path_params["sid"]
        k = _int(request, "k", 5, 1, 50)
        return {"hits": list[JSON](self.recoverer.recall(sid, _text(request, "q"), k))}

    def memory(self, request: Request) -> JSON:
        sid = request.path_params["sid"]
        k = _int(request, "k", 20, 1, 50)
        return {"facts": list[JSON](self.recoverer.memory(sid, _text(request, "q"), k))}

    def config(self, request: Request) -> JSON:
        return {"token_needed": self.reads_need_token, "can_delete": self.token is not None}

    def delete(self, request: Request) -> JSON:
        sid = request.path_params["sid"]
        self.recoverer.forget(sid)
        info = delete_session(self.store, sid)
        if self.on_delete is not None:
            self.on_delete(sid)
        return {"deleted": sid, "messages": info.messages}

    def app(self) -> Starlette:
        api = self._api
        s = "/api/sessions/{sid}"
        routes = [
            Route("/", self.page, methods=["GET"]),
            Route("/static/{name}", self.asset, methods=["GET"]),
            Route("/api/config", api(self.config), methods=["GET"]),
            Route("/api/sessions", api(self.sessions), methods=["GET"]),
            Route(s, api(self.session), methods=["GET"]),
            Route(s, api(self.delete, write=True), methods=["DELETE"]),
            Route(s + "/head", api(self.head), methods=["GET"]),
            Route(s + "/view", api(self.view), methods=["GET"]),
            Route(s + "/message", api(self.message), methods=["GET"]),
            Route(s + "/offload", api(self.offload), methods=["GET"]),
            Route(s + "/evidence", api(self.evidence), methods=["GET"]),
            Route(s + "/recall", api(self.recall), methods=["GET"]),
            Route(s + "/memory", api(self.memory), methods=["GET"]),
        ]
        return Starlette(routes=routes)

    def close(self) -> None:
        self.recoverer.close()


def new_token() -> str:
    return secrets.token_urlsafe(24)


__all__ = ["Inspector", "new_token"]
