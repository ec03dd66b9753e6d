"""Small helpers shared by the backends."""

from __future__ import annotations

import hashlib
import os
import re
import threading
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import TypeVar

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


def pack_many(texts: Sequence[str]) -> list[str | bytes]:
    """:func:`pack` of each text, on several cores when there is much to compress."""
    return in_parallel(pack, texts, sum(map(len, texts)))


T = TypeVar("T")
R = TypeVar("R")
#: work on fewer bytes than this is done on the calling thread
PARALLEL_MIN_BYTES = 1 << 20
_pool: ThreadPoolExecutor | None = None
_pool_pid = 0
_pool_lock = threading.Lock()


def _helper_count() -> int:
    return min(3, (os.cpu_count() or 1) - 1)


def _helpers() -> ThreadPoolExecutor | None:
    """Threads for the parts of a big write that run outside the interpreter lock
    (compressing, writing files): one fewer than the cores, at most three; None on one core."""
    global _pool, _pool_pid
    n = _helper_count()
    if n < 1:
        return None
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():  # (a forked child has none of its threads)
            _pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="contextfold-io")
            _pool_pid = os.getpid()
        return _pool


def in_parallel(fn: Callable[[T], R], items: Sequence[T], size: int) -> list[R]:
    """``[fn(x) for x in items]``, in order; split between this thread and the helper
    threads when ``size`` (the bytes involved) is worth it. ``fn`` must be thread-safe; its
    first error is raised once every part has ended."""
    pool = _helpers() if size >= PARALLEL_MIN_BYTES and len(items) > 1 else None
    if pool is None:
        return [fn(x) for x in items]
    parts = min(len(items), _helper_count() + 1)
    step = -(-len(items) // parts)
    chunks = [items[i : i + step] for i in range(0, len(items), step)]
    futures = [pool.submit(_each, fn, c) for c in chunks[1:]]
    out: list[R] = []
    error: BaseException | None = None
    try:
        out.extend(fn(x) for x in chunks[0])
    except BaseException as exc:  # the helpers' parts still end before this returns
        error = exc
    for future in futures:
        try:
            out.extend(future.result())
        except BaseException as exc:
            error = error or exc
    if error is not None:
        raise error
    return out


def _each(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    return [fn(x) for x in items]


def unpack(value: str | bytes) -> str:
    """The text :func:`pack` stored (plain text is returned as it is)."""
    if isinstance(value, bytes):
        try:
            return zlib.decompress(value).decode("utf-8", "surrogatepass")
        except (zlib.error, UnicodeDecodeError) as exc:
            raise ValueError(f"a compressed value is damaged ({exc})") from None
    return value
