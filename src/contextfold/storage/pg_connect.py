"""Connecting to PostgreSQL: the pool's cheap health check and the URL helpers (the schema
parameter taken out, credentials never shown)."""

from __future__ import annotations

import select
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psycopg
import psycopg_pool

Conn = psycopg.Connection[tuple[Any, ...]]


def check_connection(conn: Conn) -> None:
    """The pool's check before handing out a connection: an idle connection's socket has
    nothing to read unless the server sent something (a termination notice, or the end of
    the connection); only then is the server asked (and a dead connection raises)."""
    if not conn.closed and hasattr(select, "poll"):
        try:
            poller = select.poll()
            poller.register(conn.pgconn.socket, select.POLLIN)
            quiet = not poller.poll(0)
        except (OSError, ValueError, psycopg.Error):
            quiet = False
        if quiet:
            return
    psycopg_pool.ConnectionPool.check_connection(conn)


def public_url(url: str) -> str:
    """``url`` without user, password and query parameters (safe to log and show)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def split_param(url: str, name: str) -> tuple[str, str | None]:
    """The connection URL without the query parameter ``name`` (one of contextfold's own,
    which libpq would refuse), and that parameter."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    value = next((v for k, v in query if k == name), None)
    rest = urlencode([(k, v) for k, v in query if k != name], quote_via=quote)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, rest, parts.fragment)), value


def split_schema(url: str) -> tuple[str, str | None]:
    """The connection URL without a ``schema`` query parameter, and that parameter."""
    return split_param(url, "schema")


__all__ = ["check_connection", "public_url", "split_param", "split_schema"]
