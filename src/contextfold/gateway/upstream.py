"""The one upstream: forwarding requests with the client's credentials, and error shapes."""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from typing import Any

import httpx

from ..jsontypes import JSONObject
from . import netio
from .convert import Provider
from .edge import below, carries_token, confined_path

#: Request headers never forwarded: hop-by-hop, recomputed, or the gateway's own.
_DROP_REQUEST = frozenset(
    {
        "host",
        "content-length",
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "accept-encoding",
        "x-contextfold-session",
        "x-contextfold-token",
        "cookie",
        "forwarded",
        "x-forwarded-for",
        "x-forwarded-host",
        "x-forwarded-proto",
    }
)
#: Response headers not passed back to the client.
_DROP_RESPONSE = frozenset(
    {
        "content-length",
        "connection",
        "keep-alive",
        "transfer-encoding",
        "content-encoding",
        "date",
        "server",
        "set-cookie",
    }
)


def forward_headers(
    headers: Mapping[str, str], *, drop_authorization: bool = False, token: str | None = None
) -> dict[str, str]:
    """The client's headers for the upstream (its credentials included). A header carrying
    the gateway's own ``token`` (``Authorization: Bearer <token>`` in any case of the scheme,
    or the bare token in any header) is never forwarded; ``drop_authorization`` drops
    ``Authorization`` whatever it holds."""
    out: dict[str, str] = {}
    for key, value in headers.items():
        k = key.lower()
        if k in _DROP_REQUEST or (drop_authorization and k == "authorization"):
            continue
        if carries_token(value, token):
            continue
        out[k] = value
    return out


def response_headers(headers: httpx.Headers) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in _DROP_RESPONSE}


def error_body(
    provider: Provider, status: int, message: str, kind: str | None = None
) -> JSONObject:
    """An error body shaped like the provider's, so SDK clients raise their usual errors."""
    if provider == "anthropic":
        default = {
            400: "invalid_request_error",
            401: "authentication_error",
            403: "permission_error",
            404: "not_found_error",
            413: "request_too_large",
            429: "rate_limit_error",
            502: "api_error",
            503: "overloaded_error",
            504: "api_error",
        }
        return {
            "type": "error",
            "error": {"type": kind or default.get(status, "api_error"), "message": message},
        }
    default_o = {
        400: "invalid_request_error",
        401: "invalid_request_error",
        404: "invalid_request_error",
        413: "invalid_request_error",
    }
    return {
        "error": {
            "message": message,
            "type": kind or default_o.get(status, "server_error"),
            "param": None,
            "code": None,
        }
    }


class UpstreamError(Exception):
    """A non-2xx upstream answer, kept whole so it can be passed back unchanged."""

    def __init__(self, status: int, body: bytes, headers: Mapping[str, str]) -> None:
        self.status_code = status
        self.raw = body
        self.headers = dict(headers)
        try:
            parsed: Any = json.loads(body) if body else None
        except ValueError:
            parsed = None
        self.body = parsed if isinstance(parsed, dict) else None
        error = self.body.get("error") if self.body else None
        msg = error.get("message") if isinstance(error, dict) else None
        self.message = str(msg) if msg else body[:500].decode("utf-8", "replace")
        if isinstance(error, dict):
            code = error.get("code")
            if isinstance(code, str):
                self.code = code
            kind = error.get("type")
            if isinstance(kind, str):
                self.type = kind
        super().__init__(f"upstream {status}: {self.message}")


#: Errors of a request the upstream never answered (see :meth:`Upstream.send`).
_RESEND = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError, httpx.ConnectError)

#: Upstream connection pools. httpcore's pool scans all its connections (a socket poll for
#: each idle one, and a quadratic count) every time a request starts or ends, which made the
#: pool the largest CPU cost of the event loop at 50 sessions; several small pools, a
#: conversation always on the same one, keep each scan short.
POOLS = 8


class Upstream:
    def __init__(self, base_url: str, timeout: float, pools: int = POOLS) -> None:
        self.base = base_url.rstrip("/")
        limits = httpx.Limits(
            max_connections=max(1, 512 // pools), max_keepalive_connections=max(1, 128 // pools)
        )
        self.clients = [
            httpx.AsyncClient(
                timeout=httpx.Timeout(timeout, connect=min(timeout, 30.0)),
                transport=netio.transport(limits),
                follow_redirects=False,
                trust_env=False,
            )
            for _ in range(pools)
        ]
        #: the pool for requests that belong to no conversation (models, count_tokens ...)
        self.client = self.clients[0]

    async def send(
        self, key: str, url: str, content: bytes, headers: Mapping[str, str]
    ) -> httpx.Response:
        """POST on the conversation's pool; the response is returned once its headers are in
        (read or stream the body, then close it). A request that met a broken connection
        before any answer (a kept-alive connection the server had just closed, a reset, a
        refused connect) is sent once more, on a fresh connection: it was not answered."""
        client = self.client_for(key)
        for attempt in (0, 1):
            request = client.build_request("POST", url, content=content, headers=headers)
            try:
                return await client.send(request, stream=True)
            except _RESEND:
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def client_for(self, key: str) -> httpx.AsyncClient:
        """The pool of one conversation (stable for its key)."""
        return self.clients[zlib.crc32(key.encode()) % len(self.clients)]

    def url(self, path: str) -> str:
        """``path`` below the configured base (``/v1/...`` joins without doubling ``/v1``)."""
        if self.base.endswith("/v1") and path.startswith("/v1/"):
            return self.base + path[3:]
        return self.base + path

    def confined_url(self, raw_path: str) -> str | None:
        """The upstream URL of a client's passthrough path (as it came, percent-encoded), or
        None when the path could reach outside the base (dot segments, encoded slashes or
        dots, backslashes, empty segments)."""
        path = confined_path(raw_path)
        if path is None:
            return None
        url = self.url(path)
        return url if below(str(httpx.URL(self.base)), str(httpx.URL(url))) else None

    async def aclose(self) -> None:
        for client in self.clients:
            await client.aclose()


__all__ = [
    "Upstream",
    "UpstreamError",
    "error_body",
    "forward_headers",
    "response_headers",
]
