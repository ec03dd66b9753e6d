"""Credentials and secrets in what contextfold shows: the gateway's token check (shared by the
gateway and the inspector it mounts) and redaction of passwords, keys and tokens in text."""

from __future__ import annotations

import hmac
import re
from collections.abc import Mapping

# ---------------------------------------------------------------------- the gateway's token


def _same(given: str, token: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), token.encode("utf-8"))


def bearer(value: str) -> str | None:
    """The credential of an ``Authorization: Bearer <credential>`` value (any case of the
    scheme, any spaces around), None for another scheme."""
    scheme, _, credential = value.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return credential.strip()


def carries_token(value: str, token: str | None) -> bool:
    """Whether a header value is the gateway's own token (bare or after a scheme)."""
    if not token:
        return False
    text = value.strip()
    _, _, credential = text.partition(" ")
    return _same(text, token) or (bool(credential) and _same(credential.strip(), token))


def token_given(headers: Mapping[str, str], token: str) -> bool:
    """The gateway's check: ``X-Contextfold-Token: <token>`` or ``Authorization: Bearer
    <token>`` (constant-time comparison)."""
    given = headers.get("x-contextfold-token")
    if given is not None:
        return _same(given.strip(), token)
    credential = bearer(headers.get("authorization", ""))
    return credential is not None and _same(credential, token)


# ---------------------------------------------------------------------- redaction

_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/@\s:]*):[^/@\s]*@")
_SECRET_QUERY = re.compile(
    r"(?i)\b(?P<name>(?:api[_-]?key|key|token|access[_-]?token|password|passwd|secret|sig|"
    r"signature)=)[^&\s\"']+"
)


def redact(text: str, *secrets: str | None) -> str:
    """``text`` without passwords in URLs, secret-looking query values or ``secrets``."""
    out = _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:***@", text)
    out = _SECRET_QUERY.sub(lambda m: f"{m['name']}***", out)
    for secret in secrets:
        if secret and len(secret) >= 4:
            out = out.replace(secret, "***")
    return out
