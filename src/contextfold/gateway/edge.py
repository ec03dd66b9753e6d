"""What the gateway checks at its edge, before any request reaches a session or the upstream:
its own token (accepted and stripped the same way), the client's identity, passthrough paths
confined to the upstream base, secrets kept out of what it shows, and hostile bodies (too
deep, too many messages, text that is not Unicode) refused with a clear 4xx."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from ..core.credentials import bearer, carries_token, redact, token_given

# ---------------------------------------------------------------------- the gateway's token

#: headers a request may carry once only: two of them would let the check read one and the
#: forwarding another
SINGLE_HEADERS = frozenset(
    {
        "authorization",
        "x-api-key",
        "x-goog-api-key",
        "x-contextfold-token",
        "x-contextfold-session",
        "content-length",
    }
)
#: the headers that carry a provider credential (what the upstream sees)
CREDENTIAL_HEADERS = ("x-api-key", "authorization", "x-goog-api-key")


def header_problem(raw: Iterable[tuple[bytes, bytes]]) -> str | None:
    """What is wrong with a request's headers (None: nothing): one of
    :data:`SINGLE_HEADERS` sent twice, or a value that is not ASCII (it could not be
    forwarded as it came)."""
    seen: set[str] = set()
    for key, value in raw:
        name = key.decode("latin-1").lower()
        if name in SINGLE_HEADERS:
            if name in seen:
                return f"the header {name} may be sent only once"
            seen.add(name)
        if not value.isascii():
            return f"the header {name} holds bytes that are not ASCII"
    return None


def identity(forwarded: Mapping[str, str]) -> str:
    """A hash of the provider credentials the upstream will see (never the credentials, never
    the gateway's own token: ``forwarded`` is what :func:`~.upstream.forward_headers` kept).
    One credential hashes as earlier releases hashed it, so their sessions are found again."""
    present = [forwarded[name] for name in CREDENTIAL_HEADERS if forwarded.get(name)]
    if len(present) <= 1:
        text = "contextfold-gateway|" + (present[0] if present else "")
    else:
        parts = [f"{name}={forwarded.get(name, '')}" for name in CREDENTIAL_HEADERS]
        text = "contextfold-gateway|" + "|".join(parts)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


# ---------------------------------------------------------------------- passthrough paths

_ENCODED_SEPARATORS = re.compile(r"%(?:2f|5c|2e|00)", re.IGNORECASE)


def confined_path(raw_path: str) -> str | None:
    """A passthrough path safe to put below the upstream base (each segment re-quoted), or
    None when it could leave it: dot segments, encoded slashes, backslashes or dots, empty
    segments (double slashes), control characters, a second level of percent-encoding."""
    if _ENCODED_SEPARATORS.search(raw_path) or "\\" in raw_path or not raw_path.startswith("/"):
        return None
    segments = raw_path[1:].split("/")
    out: list[str] = []
    for raw in segments:
        segment = unquote(raw)
        if segment in ("", ".", "..") or any(c in segment for c in "/\\%"):
            return None
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in segment):
            return None
        out.append(quote(segment, safe=":@!$&'()*+,;=-._~"))
    return "/" + "/".join(out)


def below(base: str, url: str) -> bool:
    """Whether ``url`` stays on ``base``'s host and below its path."""
    b, u = urlsplit(base), urlsplit(url)
    base_path = b.path.rstrip("/") + "/"
    return (b.scheme, b.netloc) == (u.scheme, u.netloc) and (u.path + "/").startswith(base_path)


def strip_userinfo(url: str) -> str:
    """``url`` without ``user:password@`` (for showing it)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


# ---------------------------------------------------------------------- hostile bodies

_BRACKETS = bytes(range(256)).translate(None, b"[]{}")
_PAIR = re.compile(rb"\[\]|\{\}")
#: a ``\\uD800``-``\\uDFFF`` escape, or such a code point encoded: only then can a parsed
#: string hold a lone surrogate (two patterns: each starts with a literal, searched fast)
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_SURROGATE_ENCODED = re.compile(rb"\xed[\xa0-\xbf]")


def too_deep(raw: bytes, limit: int) -> bool:
    """Whether the arrays and objects of a JSON text nest deeper than ``limit`` (without
    parsing it; all in C: strings cut out, then the innermost pairs removed once per level)."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    unescaped = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    brackets = b"".join(unescaped.split(b'"')[::2]).translate(None, _BRACKETS)
    for _ in range(limit):
        if not brackets:
            return False
        shorter = _PAIR.sub(b"", brackets)
        if shorter == brackets:
            return False  # unbalanced: not JSON, the parser says where
        brackets = shorter
    return bool(brackets)


def may_hold_surrogates(raw: bytes) -> bool:
    if _SURROGATE_ESCAPE.search(raw) is not None:
        return True
    return b"\xed" in raw and _SURROGATE_ENCODED.search(raw) is not None


def _position(path: list[str | int]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out or "the body"


def _not_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def lone_surrogate(value: object) -> str | None:
    """Where a string (or key) of ``value`` holds a lone UTF-16 surrogate, which is no
    Unicode text (JSON allows the escape, UTF-8 cannot carry it): None when nowhere."""
    stack: list[tuple[object, list[str | int]]] = [(value, [])]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if _not_text(item):
                return _position(path)
        elif isinstance(item, dict):
            for key, inner in item.items():
                if _not_text(key):
                    return _position(path) + " (a key)"
                stack.append((inner, [*path, key]))
        elif isinstance(item, list):
            stack.extend((inner, [*path, i]) for i, inner in enumerate(item))
    return None


__all__ = [
    "CREDENTIAL_HEADERS",
    "SINGLE_HEADERS",
    "bearer",
    "below",
    "carries_token",
    "confined_path",
    "header_problem",
    "identity",
    "lone_surrogate",
    "may_hold_surrogates",
    "redact",
    "strip_userinfo",
    "token_given",
    "too_deep",
]
