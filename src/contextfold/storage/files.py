"""Blob files: ``<root>/blobs/ab/<sha256>``, the embedded backend's content-addressed bytes.

One blob is written to a temporary file, fsynced, renamed into place and its folder fsynced.
Many blobs (one unit of work's, :meth:`FileBlobs.put_many`) are written with a **group
commit**: every temporary file is written, one ``syncfs`` makes them all durable, they are
renamed into place, and a second ``syncfs`` makes the names durable (a batch of up to four
new blobs is written one by one). Two flushes per batch instead of two per blob, with the same
guarantee: a name never points at bytes that are not on disk, and ``put_many`` returns only
once every blob is durable (the rows that reference them are committed after it). Where ``syncfs`` is not available (not Linux), each file is fsynced.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from ..errors import StorageError
from .base import BlobCorruptError, BlobNotFoundError
from .util import check_bytes, check_sha, in_parallel, sha256_hex


def _load_syncfs() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn  # type: ignore[no-any-return]


_SYNCFS = _load_syncfs()
#: batches of at most this many new blobs are written one by one
_GROUP_MIN = 4


def _write(path: Path | str, raw: bytes, *, sync: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _present(path: str, size: int) -> bool:
    try:
        return os.stat(path).st_size == size
    except OSError:
        return False


def _write_tmp(job: tuple[str, str, bytes]) -> None:
    _write(job[0], job[2], sync=False)


def _fsync_dir(path: Path) -> None:
    dfd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _syncfs(path: Path) -> None:
    """Flush the file system holding ``path`` (everything written to it so far is durable)."""
    assert _SYNCFS is not None
    dfd = os.open(path, os.O_RDONLY)
    try:
        if _SYNCFS(dfd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
    finally:
        os.close(dfd)


class FileBlobs:
    """``<root>/blobs/ab/<sha256>``: written once, atomically; checked on every read."""

    def __init__(self, root: Path) -> None:
        self.dir = root / "blobs"

    def path(self, sha256: str) -> Path:
        check_sha(sha256)
        return self.dir / sha256[:2] / sha256

    def _tmp(self, target: Path, sha: str) -> Path:
        return target.with_name(f".{sha}.{os.getpid()}.{threading.get_ident()}.tmp")

    def _present(self, target: Path, size: int) -> bool:
        with contextlib.suppress(OSError):
            return target.stat().st_size == size
        return False

    def put(self, data: bytes) -> str:
        raw = check_bytes(data)
        sha = sha256_hex(raw)
        target = self.path(sha)
        if self._present(target, len(raw)):
            return sha
        tmp = self._tmp(target, sha)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            _write(tmp, raw, sync=True)
            os.replace(tmp, target)
            _fsync_dir(target.parent)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise StorageError(f"cannot write blob {sha[:16]}… under {self.dir}: {exc}") from exc
        return sha

    def put_many(self, datas: Iterable[bytes]) -> list[str]:
        """Store every blob (idempotent), durable on return, with one group commit; returns
        their sha256 digests in order."""
        raws = [check_bytes(d) for d in datas]
        shas = [sha256_hex(r) for r in raws]
        # plain string paths: thousands of blobs (an emergency compaction's) may come here
        root = os.fspath(self.dir)
        todo: dict[str, bytes] = {}
        for sha, raw in zip(shas, raws, strict=True):
            if sha not in todo and not _present(os.path.join(root, sha[:2], sha), len(raw)):
                todo[sha] = raw
        # syncfs flushes everything written to the file system (other programs' writes too):
        # a few blobs are cheaper one fsync at a time
        if len(todo) <= _GROUP_MIN or _SYNCFS is None:
            for raw in todo.values():
                self.put(raw)
            return shas
        jobs: list[tuple[str, str, bytes]] = []
        suffix = f".{os.getpid()}.{threading.get_ident()}.tmp"
        for sha, raw in todo.items():
            folder = os.path.join(root, sha[:2])
            jobs.append((os.path.join(folder, f".{sha}{suffix}"), os.path.join(folder, sha), raw))
        try:
            for folder in sorted({os.path.dirname(target) for _, target, _ in jobs}):
                os.makedirs(folder, exist_ok=True)
            # the writes run outside the interpreter lock: on several cores when many
            in_parallel(_write_tmp, jobs, sum(len(raw) for _, _, raw in jobs))
            _syncfs(self.dir)  # every byte durable before any name points at it
            for tmp, target, _ in jobs:
                os.replace(tmp, target)
            _syncfs(self.dir)  # the names durable before the rows that reference them commit
        except OSError as exc:
            for tmp, _, _ in jobs:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            raise StorageError(f"cannot write {len(todo)} blobs under {self.dir}: {exc}") from exc
        return shas

    def get(self, sha256: str) -> bytes:
        path = self.path(sha256)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise BlobNotFoundError(f"no blob {sha256[:16]}… under {self.dir}") from None
        except OSError as exc:
            raise StorageError(f"cannot read blob {path}: {exc}") from exc
        if sha256_hex(data) != sha256:
            raise BlobCorruptError(f"blob {path} does not match its sha256 (damaged file)")
        return data

    def has(self, sha256: str) -> bool:
        return self.path(sha256).is_file()

    def size(self, sha256: str) -> int | None:
        try:
            return self.path(sha256).stat().st_size
        except OSError:
            return None


__all__ = ["FileBlobs"]
