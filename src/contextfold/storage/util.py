"""Small helpers shared by the backends."""

from __future__ import annotations

import hashlib
import re
from datetime import datetime, timezone

from ..errors import StorageError

_SHA = re.compile(r"[0-9a-f]{64}")


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_sha(sha256: str) -> str:
    """A blob name is exactly 64 lowercase hex digits (nothing else can name a file)."""
    if not isinstance(sha256, str) or not _SHA.fullmatch(sha256):
        raise StorageError(f"not a sha256 hex digest: {sha256!r}")
    return sha256


def check_bytes(data: object) -> bytes:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise StorageError(f"blobs are bytes, got {type(data).__name__}")
    return bytes(data)
