"""A conversation's key: which stored session a stateless request belongs to, bound to the
provider credentials the upstream will see (never the gateway's own token)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from ..core.paths import MAX_NAME, check_session_id
from ..errors import UnsafeIdError
from .edge import identity


def client_identity(forwarded: Mapping[str, str]) -> str:
    """A hash of the provider credentials the upstream will see (``x-api-key``,
    ``Authorization``, ``x-goog-api-key`` of the forwarded headers: never the gateway's own
    token, never the credentials themselves)."""
    return identity(forwarded)


SESSION_HEADER = "x-contextfold-session"


def session_key(material: str, headers: Mapping[str, str], token: str | None) -> str:
    """A conversation's key, bound to the provider credentials the upstream will see (never
    the gateway's own ``token``). An explicit session name is kept apart per credential
    (``<name>-<credential hash>``): naming another tenant's session opens one's own, and no
    answer tells whether the name is taken."""
    from .upstream import forward_headers  # httpx: not imported before `serve` runs

    ident = client_identity(forward_headers(headers, token=token))
    explicit = headers.get(SESSION_HEADER)
    if not explicit:
        return conversation_key(material, ident)
    try:
        name = check_session_id(explicit.strip())
    except UnsafeIdError as exc:
        raise UnsafeIdError(f"{SESSION_HEADER}: {exc}") from None
    if len(name) > MAX_NAME - 20:  # room for the credential's part and branch suffixes
        raise UnsafeIdError(f"{SESSION_HEADER}: at most {MAX_NAME - 20} characters")
    return f"{name}-{ident[:12]}"


def conversation_key(material: str, identity: str) -> str:
    digest = hashlib.sha256(f"{identity}|{material}".encode()).hexdigest()[:24]
    return f"gw-{digest}"


__all__ = ["SESSION_HEADER", "client_identity", "conversation_key", "session_key"]
