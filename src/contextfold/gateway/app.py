"""The Starlette application: routes, the gateway's own auth, body limit, error shapes."""

from __future__ import annotations

import contextlib
import functools
import hmac
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from ..errors import ContextFoldError, InvalidMessageError, StorageError, UnsafeIdError
from . import anthropic_proxy, fastjson, gemini_proxy, openai_proxy
from .config import GatewayConfig
from .convert import Provider
from .metrics import Metrics
from .pipeline import REQUEST_STARTED, Pipeline, RequestError, log, log_event
from .upstream import error_body, forward_headers, response_headers

Handler = Callable[[Pipeline, dict[str, Any], dict[str, str], str], Awaitable[Response]]


def _provider_for(request: Request) -> Provider:
    path = request.url.path
    if path.startswith("/v1/messages") or "anthropic-version" in request.headers:
        return "anthropic"
    if path.startswith("/v1beta/") or ":" in path.rpartition("/")[2]:
        return "gemini"  # /v1beta/models/..., /v1/models/{model}:generateContent
    if "x-goog-api-key" in request.headers:
        return "gemini"
    return "openai"


def _error(provider: Provider, status: int, message: str, kind: str | None = None) -> Response:
    return JSONResponse(error_body(provider, status, message, kind), status_code=status)


class Gateway:
    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.metrics = Metrics()
        self.pipeline = Pipeline(config, self.metrics)

    # ------------------------------------------------------------------ checks
    def _authorized(self, request: Request) -> bool:
        token = self.config.auth_token
        if token is None:
            return True
        given = request.headers.get("x-contextfold-token")
        if given is None:
            auth = request.headers.get("authorization", "")
            given = auth[7:] if auth.lower().startswith("bearer ") else None
        return given is not None and hmac.compare_digest(given.encode(), token.encode())

    async def _body(self, request: Request, provider: Provider) -> bytes | Response:
        limit = self.config.max_body_bytes
        declared = request.headers.get("content-length")
        too_big = _error(provider, 413, f"request body larger than {limit} bytes")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return too_big
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                return too_big
            chunks.append(chunk)
        return b"".join(chunks)

    # ------------------------------------------------------------------ handlers
    def _proxied(self, handler: Handler, route: str) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            return await self._serve(request, handler, route)

        return endpoint

    async def _serve(self, request: Request, handler: Handler, route: str) -> Response:
        started = time.perf_counter()
        REQUEST_STARTED.set(started)  # the added latency counts reading and parsing too
        provider = _provider_for(request)
        response = await self._run(request, provider, handler)
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

    async def gemini(self, request: Request) -> Response:
        """``POST /v1beta/models/{model}:{method}`` (and ``/v1/...``): generateContent and
        streamGenerateContent go through the gateway, countTokens and the rest pass through."""
        version = request.url.path.split("/")[1]
        model, _, method = str(request.path_params.get("target", "")).rpartition(":")
        if method not in gemini_proxy.GENERATE:
            return await self.passthrough(request)
        handler = functools.partial(
            gemini_proxy.handle, version=version, model=model, method=method
        )
        return await self._serve(request, handler, f"/{version}/models/{{model}}:{method}")

    async def _run(self, request: Request, provider: Provider, handler: Handler) -> Response:
        if not self._authorized(request):
            return _error(provider, 401, "missing or wrong gateway token", "authentication_error")
        try:
            raw = await self._body(request, provider)
        except ClientDisconnect:
            return Response(status_code=499)
        if isinstance(raw, Response):
            return raw
        try:
            body = fastjson.loads(raw)
        except ValueError as exc:
            return _error(provider, 400, f"the request body is not valid JSON ({exc})")
        if not isinstance(body, dict):
            return _error(provider, 400, "the request body must be a JSON object")
        headers = {k.lower(): v for k, v in request.headers.items()}
        try:
            return await handler(self.pipeline, body, headers, request.url.query)
        except RequestError as exc:
            return _error(provider, exc.status, exc.message, exc.kind)
        except (InvalidMessageError, UnsafeIdError) as exc:
            return _error(provider, 400, str(exc))
        except StorageError as exc:
            log_event("storage_error", error=str(exc))
            return _error(provider, 503, f"the session store failed: {exc}", None)
        except ContextFoldError as exc:
            log_event("gateway_error", error=str(exc))
            return _error(provider, 500, f"contextfold: {exc}")
        except Exception as exc:  # never a traceback to the client
            log.exception("unexpected gateway error: %s", type(exc).__name__)
            return _error(provider, 500, f"internal gateway error ({type(exc).__name__})")

    async def passthrough(self, request: Request) -> Response:
        """count_tokens and models: forwarded unchanged (nothing stored)."""
        provider = _provider_for(request)
        if not self._authorized(request):
            return _error(provider, 401, "missing or wrong gateway token", "authentication_error")
        raw = await self._body(request, provider)
        if isinstance(raw, Response):
            return raw
        if request.method == "POST":
            try:
                json.loads(raw)
            except ValueError as exc:
                return _error(provider, 400, f"the request body is not valid JSON ({exc})")
        token = self.config.auth_token
        headers = forward_headers(
            request.headers,
            drop_authorization=token is not None
            and request.headers.get("authorization") == f"Bearer {token}",
        )
        up = self.pipeline.upstream
        try:
            resp = await up.client.request(
                request.method,
                up.url(request.url.path),
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
        route = request.url.path
        self.metrics.inc(
            "contextfold_gateway_requests_total", route=route, status=str(resp.status_code)
        )
        return Response(resp.content, resp.status_code, headers=response_headers(resp.headers))

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "upstream": self.config.upstream_base})

    async def metrics_endpoint(self, request: Request) -> Response:
        if not self._authorized(request):
            return PlainTextResponse("unauthorized\n", status_code=401)
        return PlainTextResponse(self.metrics.render(), media_type="text/plain; version=0.0.4")

    async def not_found(self, request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        provider = _provider_for(request)
        if status == 405:
            return _error(
                provider, 405, f"method {request.method} not allowed on {request.url.path}"
            )
        if status == 404:
            return _error(
                provider,
                404,
                f"no route {request.url.path}",
                "not_found_error" if provider == "anthropic" else None,
            )
        return _error(provider, status, "request failed")

    async def server_error(self, request: Request, exc: Exception) -> Response:
        log.error("unexpected gateway error: %s", type(exc).__name__)
        return _error(_provider_for(request), 500, "internal gateway error")

    # ------------------------------------------------------------------ app
    def app(self) -> Starlette:
        @contextlib.asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            self.pipeline.start()
            yield
            await self.pipeline.aclose()

        routes = [
            Route(
                "/v1/chat/completions",
                self._proxied(openai_proxy.handle, "/v1/chat/completions"),
                methods=["POST"],
            ),
            Route(
                "/v1/messages",
                self._proxied(anthropic_proxy.handle, "/v1/messages"),
                methods=["POST"],
            ),
            Route("/v1/messages/count_tokens", self.passthrough, methods=["POST"]),
            Route("/v1/models", self.passthrough, methods=["GET"]),
            Route("/v1/models/{model:path}", self.passthrough, methods=["GET"]),
            Route("/v1/models/{target:path}", self.gemini, methods=["POST"]),
            Route("/v1beta/models/{target:path}", self.gemini, methods=["POST"]),
            Route("/v1beta/models", self.passthrough, methods=["GET"]),
            Route("/v1beta/models/{model:path}", self.passthrough, methods=["GET"]),
            Route("/healthz", self.healthz, methods=["GET"]),
            Route("/metrics", self.metrics_endpoint, methods=["GET"]),
        ]
        return Starlette(
            routes=routes,
            exception_handlers={HTTPException: self.not_found, Exception: self.server_error},
            lifespan=lifespan,
        )


def create_app(config: GatewayConfig) -> Starlette:
    return Gateway(config).app()


__all__ = ["Gateway", "create_app"]
