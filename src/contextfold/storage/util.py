"""Small helpers shared by the backends."""

from __future__ import annotations

import hashlib
import re
import zlib
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


#: Text at least this long (UTF-8 bytes) is stored compressed by the embedded store.
PACK_MIN = 512


def pack(text: str) -> str | bytes:
    """``text`` as the embedded store keeps it: zlib-compressed bytes (a BLOB) when that is
    smaller, else the text itself. :func:`unpack` gives the exact text back."""
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) < PACK_MIN:
        return text
    packed = zlib.compress(raw, 6)
    return packed if len(packed) < len(raw) * 0.9 else text


def unpack(value: str | bytes) -> str:
    """The text :func:`pack` stored (plain text is returned as it is)."""
    if isinstance(value, bytes):
        try:
            return zlib.decompress(value).decode("utf-8", "surrogatepass")
        except (zlib.error, UnicodeDecodeError) as exc:
            raise ValueError(f"a compressed value is damaged ({exc})") from None
    return value
