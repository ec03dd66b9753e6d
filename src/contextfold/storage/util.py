"""Small helpers shared by the backends."""

from __future__ import annotations

import hashlib
import os
import re
import threading
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
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
_PREFIX = "contextfold-io"


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
            _pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix=_PREFIX)
            _pool_pid = os.getpid()
        return _pool


def in_parallel(fn: Callable[[T], R], items: Sequence[T], size: int) -> list[R]:
    """``[fn(x) for x in items]``, in order; split between this thread and the helper
    threads when ``size`` (the bytes involved) is worth it. ``fn`` must be thread-safe; its
    first error is raised once every part has ended."""
    pool = _helpers() if size >= PARALLEL_MIN_BYTES and len(items) > 1 else None
    if pool is None or threading.current_thread().name.startswith(_PREFIX):
        return [fn(x) for x in items]  # (a helper waiting for helpers could wait forever)
    parts = min(len(items), _helper_count() + 1)
    step = -(-len(items) // parts)
    chunks = [items[i : i + step] for i in range(0, len(items), step)]
    futures: list[Future[list[R]]] = []
    inline = [chunks[0]]
    for k, chunk in enumerate(chunks[1:], 1):
        try:
            futures.append(pool.submit(_each, fn, chunk))
        except RuntimeError:  # the interpreter is shutting down: the rest on this thread
            inline += chunks[k:]
            break
    results: list[list[R]] = []
    error: BaseException | None = None
    try:
        results = [_each(fn, chunk) for chunk in inline]
    except BaseException as exc:  # the helpers' parts still end before this returns
        error = exc
    done: list[list[R]] = []
    for future in futures:
        try:
            done.append(future.result())
        except BaseException as exc:
            error = error or exc
    if error is not None:
        raise error
    out = results[0]
    for part in done:
        out.extend(part)
    for part in results[1:]:  # the chunks after the submitted ones, in order
        out.extend(part)
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
