"""Blob files: ``<root>/blobs/ab/<sha256>``, the embedded backend's content-addressed bytes."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

from ..errors import StorageError
from .base import BlobCorruptError, BlobNotFoundError
from .util import check_bytes, check_sha, sha256_hex


class FileBlobs:
    """``<root>/blobs/ab/<sha256>``: written once, atomically; checked on every read."""

    def __init__(self, root: Path) -> None:
        self.dir = root / "blobs"

    def path(self, sha256: str) -> Path:
        check_sha(sha256)
        return self.dir / sha256[:2] / sha256

    def put(self, data: bytes) -> str:
        raw = check_bytes(data)
        sha = sha256_hex(raw)
        target = self.path(sha)
        with contextlib.suppress(OSError):
            if target.stat().st_size == len(raw):
                return sha
        tmp = target.with_name(f".{sha}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                view = memoryview(raw)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, target)
            dfd = os.open(target.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise StorageError(f"cannot write blob {sha[:16]}… under {self.dir}: {exc}") from exc
        return sha

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
