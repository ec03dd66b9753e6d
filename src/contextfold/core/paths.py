"""The workspace folder and safe file names for ids that come from outside.

Ids (session, tool call, agent) are chosen by callers and by models, so they are hostile until
proven otherwise. :func:`safe_name` maps any id to a single path component that cannot escape
its folder (no separators, no ``..``, no NUL, bounded length); long or unusual ids get a short
hash suffix so that two different ids never share a file.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import UnsafeIdError

_SAFE = re.compile(r"[^A-Za-z0-9._-]")
MAX_NAME = 96


def safe_name(raw: str, *, what: str = "id") -> str:
    """A file-name-safe, collision-free rendering of ``raw``."""
    if not isinstance(raw, str) or raw == "":
        raise UnsafeIdError(f"{what} must be a non-empty string, got {raw!r}")
    cleaned = _SAFE.sub("_", raw).strip(".")
    if cleaned == raw and len(raw) <= MAX_NAME and raw not in (".", ".."):
        return raw
    digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    cleaned = cleaned[: MAX_NAME - 13] or "id"
    return f"{cleaned}-{digest}"


def check_session_id(session_id: str) -> str:
    """Session ids name folders directly, so they must already be safe: reject, don't rewrite."""
    if not isinstance(session_id, str) or not session_id:
        raise UnsafeIdError(f"session id must be a non-empty string, got {session_id!r}")
    if safe_name(session_id, what="session id") != session_id:
        raise UnsafeIdError(
            f"session id {session_id!r} is not allowed: use letters, digits, '.', '_' or '-' "
            f"(at most {MAX_NAME} characters, not starting with '.')"
        )
    return session_id


def confined(base: Path, candidate: Path) -> Path:
    """Resolve ``candidate`` and make sure it stays inside ``base``."""
    base_r = base.resolve()
    cand_r = candidate.resolve()
    if cand_r != base_r and base_r not in cand_r.parents:
        raise UnsafeIdError(f"path {str(candidate)!r} escapes {str(base)!r}")
    return cand_r


@dataclass(frozen=True, slots=True)
class Workspace:
    """The workspace folder (the embedded store lives there: see contextfold.storage)."""

    root: Path

    @classmethod
    def at(cls, root: str | Path) -> Workspace:
        return cls(Path(root))
