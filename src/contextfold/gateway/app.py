"""The Starlette application: routes, the gateway's own auth, body limit, error shapes."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from .. import __version__
from ..errors import (
    ContextFoldError,
    ContextOverflowError,
    InvalidMessageError,
    StorageError,
    UnsafeIdError,
)
from . import edge, providers
from .ahead import arrived
from .body import Arrival, BodyReader, TooDeep
from .config import GatewayConfig
from .metrics import Metrics
from .pipeline import BODY_READ, REQUEST_STARTED, Pipeline, RequestError, log, log_event
from .providers import ClientRequest, ProviderAdapter, rounds
from .upstream import forward_headers, response_headers

Provider = ProviderAdapter
#: distinct unknown paths counted by their own label in the metrics (then "(other)")
_UNKNOWN_ROUTES_MAX = 64


_VIEW_SIZE = re.compile(r"(\d+) tokens, over the (\d+)-token window")


def _overflow_numbers(detail: str) -> tuple[int | None, int | None]:
    """The view's tokens and the window from a ContextOverflowError's message."""
    found = _VIEW_SIZE.search(detail)
    return (int(found.group(1)), int(found.group(2))) if found else (None, None)


#: seconds a client is asked to wait before retrying when the session store failed (503)
STORE_RETRY_AFTER = 2


def _error(provider: Provider, status: int, message: str, kind: str | None = None) -> Response:
    headers = {"retry-after": str(STORE_RETRY_AFTER)} if status == 503 else None
    return JSONResponse(provider.error_body(status, message, kind), status, headers=headers)


class Gateway:
    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.metrics = Metrics()
        self.pipeline = Pipeline(config, self.metrics)
        self.adapters = providers.adapters()
        #: request bodies, the messages a client resent unchanged not decoded again
        self.bodies = BodyReader()
        self._unknown_routes: set[str] = set()

    def _provider_for(self, request: Request) -> Provider:
        return providers.adapter_for(self.adapters, request.url.path, request.headers)

    # ------------------------------------------------------------------ checks
    def _authorized(self, request: Request) -> bool:
        token = self.config.auth_token
        return token is None or edge.token_given(request.headers, token)

    def _refused(self, request: Request, provider: Provider) -> Response | None:
        """The answer to a request refused before its body is read (None: go on)."""
        problem = edge.header_problem(request.scope["headers"])
        if problem is not None:
            return _error(provider, 400, problem)
        if not self._authorized(request):
            return _error(provider, 401, "missing or wrong gateway token", "authentication_error")
        return None

    async def _body(
        self, request: Request, provider: Provider, arrival: Arrival | None = None
    ) -> bytes | Response:
        """The request body (or the error refusing it); ``arrival`` is fed its chunks as they
        come (see :class:`~.body.Arrival`)."""
        limit = self.config.max_body_bytes
        declared = request.headers.get("content-length")
        too_big = _error(provider, 413, f"request body larger than {limit} bytes")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return too_big
        chunks: list[bytes] = []
        size = 0

        async def read() -> Response | None:
            nonlocal size
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    return too_big
                chunks.append(chunk)
                if arrival is not None:
                    arrival.feed(chunk)
            return None

        timeout = self.config.request_timeout
        try:
            refused = await asyncio.wait_for(read(), timeout)
        except (TimeoutError, asyncio.TimeoutError):
            return _error(provider, 408, f"the request body did not arrive within {timeout:g} s")
        return refused or b"".join(chunks)

    def _parse(
        self, raw: bytes, provider: Provider, arrival: Arrival | None = None
    ) -> dict[str, Any] | Response:
        """The request body as a JSON object, or the 4xx refusing it: nested deeper than the
        limit, not JSON, text that is not Unicode, too many messages."""
        depth = self.config.max_depth
        deep = f"the request body nests deeper than {depth} levels (--max-depth)"
        try:
            body, where = self.bodies.read(raw, depth, arrival)
        except (RecursionError, TooDeep):
            return _error(provider, 400, deep)
        except ValueError as exc:
            return _error(provider, 400, f"the request body is not valid JSON ({exc})")
        if not isinstance(body, dict):
            return _error(provider, 400, "the request body must be a JSON object")
        if where is not None:
            return _error(
                provider,
                400,
                f"{where}: the text holds a lone UTF-16 surrogate (an unpaired code point in "
                "\\ud800-\\udfff), which is not Unicode text",
            )
        if body.get("stream") not in (None, True, False):
            return _error(provider, 400, "stream: must be true or false")
        most = self.config.max_messages
        for field in ("messages", "input", "contents"):  # Chat/Anthropic, Responses, Gemini
            items = body.get(field)
            if isinstance(items, list) and len(items) > most:
                return _error(
                    provider,
                    413,
                    f"{field}: {len(items)} messages, more than this gateway takes in one "
                    f"request ({most}, --max-messages)",
                )
        return body

    # ------------------------------------------------------------------ handlers
    def _proxied(
        self, adapter: ProviderAdapter, route: str
    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            started = time.perf_counter()
            REQUEST_STARTED.set(started)  # the added latency counts reading and parsing too
            # work done ahead gives way from the moment a request arrives: a long body's
            # arrival then covers the unit of work it is finishing
            with self.pipeline.ahead.arriving():
                response = await self._run(request, adapter)
            self.metrics.inc(
                "contextfold_gateway_requests_total", route=route, status=str(response.status_code)
            )
            log_event(
                "request",
                route=route,
                status=response.status_code,
                session=response.headers.get("x-contextfold-session"),
                compaction=response.headers.get("x-contextfold-compaction"),
                ms=round((time.perf_counter() - started) * 1000, 2),
            )
            return response

        return endpoint

    async def _run(self, request: Request, provider: Provider) -> Response:
        refused = self._refused(request, provider)
        if refused is not None:
            return refused
        arrival = self.bodies.arrival()
        try:
            raw = await self._body(request, provider, arrival)
        except ClientDisconnect:
            return Response(status_code=499)
        if isinstance(raw, Response):
            return raw
        BODY_READ.set(time.perf_counter())
        body = self._parse(raw, provider, arrival)
        if isinstance(body, Response):
            return body
        headers = {k.lower(): v for k, v in request.headers.items()}
        client = ClientRequest(
            path=request.url.path,
            query=request.url.query,
            headers=headers,
            body=body,
            path_params={k: str(v) for k, v in request.path_params.items()},
        )
        try:
            if not provider.wants_turn(client):  # an action of this route that is not a turn
                arrived()  # what follows waits for the upstream
                side = await provider.side_request(self.pipeline, client)
                return side if side is not None else await self._forward(request, provider, raw)
            return await rounds.handle(self.pipeline, provider, client)
        except RequestError as exc:
            return _error(provider, exc.status, exc.message, exc.kind)
        except (InvalidMessageError, UnsafeIdError) as exc:
            return _error(provider, 400, str(exc))
        except ContextOverflowError as exc:  # worded so the client's own compaction runs
            log_event("view_too_large", error=str(exc))
            need, window = _overflow_numbers(str(exc))
            return JSONResponse(provider.overflow_body(need, window, str(exc)), status_code=400)
        except StorageError as exc:
            log_event("storage_error", error=self._redact(str(exc)))
            return _error(provider, 503, f"the session store failed: {self._redact(str(exc))}")
        except ContextFoldError as exc:
            log_event("gateway_error", error=self._redact(str(exc)))
            return _error(provider, 500, f"contextfold: {self._redact(str(exc))}")
        except Exception as exc:  # never a traceback to the client
            log.exception("unexpected gateway error: %s", type(exc).__name__)
            return _error(provider, 500, f"internal gateway error ({type(exc).__name__})")

    def _redact(self, text: str) -> str:
        return edge.redact(text, self.config.auth_token, self.config.ui_token)

    async def passthrough(self, request: Request) -> Response:
        """count_tokens, models and the like: forwarded unchanged (nothing stored)."""
        provider = self._provider_for(request)
        refused = self._refused(request, provider)
        if refused is not None:
            return refused
        try:
            raw = await self._body(request, provider)
        except ClientDisconnect:
            return Response(status_code=499)
        if isinstance(raw, Response):
            return raw
        if request.method == "POST":
            parsed = self._parse(raw, provider)
            if isinstance(parsed, Response):
                return parsed
        response = await self._forward(request, provider, raw)
        route = "/v1/models" if request.method == "GET" else request.url.path
        self.metrics.inc(
            "contextfold_gateway_requests_total", route=route, status=str(response.status_code)
        )
        return response

    async def _forward(self, request: Request, provider: Provider, raw: bytes) -> Response:
        """The request sent upstream unchanged, its answer passed back (nothing stored); a
        path that would leave the upstream base is refused."""
        up = self.pipeline.upstream
        raw_path = request.scope.get("raw_path") or request.scope["path"].encode()
        url = up.confined_url(raw_path.decode("latin-1").split("?", 1)[0])
        if url is None:
            kind = "not_found_error" if provider.name == "anthropic" else None
            return _error(provider, 404, "no such path below the upstream", kind)
        headers = forward_headers(request.headers, token=self.config.auth_token)
        try:
            resp = await up.client.request(
                request.method,
                url,
                params=request.query_params,
                content=raw if request.method == "POST" else None,
                headers=headers,
            )
        except httpx.TimeoutException:
            return _error(provider, 504, "the upstream did not answer in time")
        except httpx.HTTPError as exc:
            return _error(
                provider, 502, f"the upstream could not be reached ({type(exc).__name__})"
            )
        return Response(resp.content, resp.status_code, headers=response_headers(resp.headers))

    async def healthz(self, request: Request) -> Response:
        """ "ok" and the version; with the gateway's token also the upstream (no password)."""
        out = {"status": "ok", "version": __version__}
        if self.config.auth_token is not None and self._authorized(request):
            out["upstream"] = self.config.shown_upstream
        return JSONResponse(out)

    async def metrics_endpoint(self, request: Request) -> Response:
        if not self._authorized(request):
            return PlainTextResponse("unauthorized\n", status_code=401)
        return PlainTextResponse(self.metrics.render(), media_type="text/plain; version=0.0.4")

    async def not_found(self, request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        provider = self._provider_for(request)
        path = request.url.path
        if status == 405:
            response = _error(provider, 405, f"method {request.method} not allowed on {path}")
        elif status == 404:
            response = _error(
                provider,
                404,
                f"contextfold gateway: no route {request.method} {path} "
                f"(served: {', '.join(self._served())})",
                "not_found_error" if provider.name == "anthropic" else None,
            )
        else:
            response = _error(provider, status, "request failed")
        route = self._unknown_label(path)
        self.metrics.inc("contextfold_gateway_requests_total", route=route, status=str(status))
        log_event("request", route=route, path=path[:200], method=request.method, status=status)
        return response

    def _served(self) -> list[str]:
        return [r.path for a in self.adapters for r in a.routes if r.turn]

    def _unknown_label(self, path: str) -> str:
        """The metrics label of an unknown path: the path itself for the first few distinct
        ones (a scanner cannot grow the metrics without end), then "(other)"."""
        label = path[:120]
        if label in self._unknown_routes:
            return label
        if len(self._unknown_routes) < _UNKNOWN_ROUTES_MAX:
            self._unknown_routes.add(label)
            return label
        return "(other)"

    async def server_error(self, request: Request, exc: Exception) -> Response:
        log.error("unexpected gateway error: %s", type(exc).__name__)
        return _error(self._provider_for(request), 500, "internal gateway error")

    def inspector_app(self) -> Starlette | None:
        """The session inspector over the gateway's store, behind ``ui_token`` (every one of
        its API calls needs it; the page itself holds no data). None when the gateway has a
        client token but no inspector token: the inspector shows every tenant's sessions, so
        a token the clients share never opens it."""
        from ..inspector.app import Inspector

        token = self.config.ui_token
        if token is None and self.config.auth_token is not None:
            return None
        registry = self.pipeline.registry
        inspector = Inspector(
            registry.store, token=token, reads_need_token=token is not None, on_delete=registry.drop
        )
        return inspector.app()

    # ------------------------------------------------------------------ app
    def app(self) -> Starlette:
        @contextlib.asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            self.pipeline.start()
            yield
            await self.pipeline.aclose()

        routes: list[BaseRoute] = [
            Route(
                spec.path,
                self._proxied(adapter, spec.path) if spec.turn else self.passthrough,
                methods=list(spec.methods),
            )
            for adapter in self.adapters
            for spec in adapter.routes
        ]
        routes += [
            Route("/healthz", self.healthz, methods=["GET"]),
            Route("/metrics", self.metrics_endpoint, methods=["GET"]),
        ]
        inspector = self.inspector_app()
        if inspector is not None:
            routes += [
                Route("/ui", lambda _: RedirectResponse("/ui/"), methods=["GET"]),
                Mount("/ui", inspector),
            ]
        return Starlette(
            routes=routes,
            exception_handlers={HTTPException: self.not_found, Exception: self.server_error},
            lifespan=lifespan,
        )


def create_app(config: GatewayConfig) -> Starlette:
    return Gateway(config).app()


__all__ = ["Gateway", "create_app"]
