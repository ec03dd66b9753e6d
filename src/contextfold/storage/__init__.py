"""One storage layer: event logs, blobs, search and documents behind the ``Store`` protocol.

:func:`open_store` picks the backend from a URL or a path: a folder -> :class:`SQLiteStore`
(embedded default), ``memory://`` -> :class:`MemoryStore`, ``postgresql://...`` ->
``PostgresStore`` (the ``postgres`` extra). ``CONTEXTFOLD_STORE`` is the default
when set.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import ConfigError
from ..extras import needs_extra
from .base import (
    BlobCorruptError,
    BlobNotFoundError,
    BlobStore,
    ConcurrentWriteError,
    Event,
    NewEvent,
    SearchDoc,
    SearchHit,
    SessionInfo,
    Store,
    Transaction,
)
from .memory import MemoryStore
from .sqlite import SQLiteStore

ENV_VAR = "CONTEXTFOLD_STORE"


def open_store(url_or_path: str | Path | None = None) -> Store:
    """A store for ``url_or_path`` (``$CONTEXTFOLD_STORE`` when None)."""
    target: str | Path | None = url_or_path
    if target is None:
        target = os.environ.get(ENV_VAR) or None
        if target is None:
            raise ConfigError(f"no store given and ${ENV_VAR} is not set")
    if isinstance(target, Path):
        return SQLiteStore(target)
    if not isinstance(target, str) or not target.strip():
        raise ConfigError(f"store must be a folder path or a URL, got {target!r}")
    if target.startswith("memory://"):
        return MemoryStore()
    if target.startswith(("postgresql://", "postgres://")):
        try:
            from .postgres import PostgresStore  # type: ignore[import-not-found,unused-ignore]
        except ImportError as exc:
            raise ConfigError(needs_extra("a PostgreSQL store", "postgres", exc)) from None
        store: Store = PostgresStore(target)
        return store
    if target.startswith("sqlite:///"):
        return SQLiteStore(Path(target[len("sqlite:///") :]).parent)
    if "://" in target:
        raise ConfigError(
            f"unknown store URL {target!r}: use a folder path, memory:// or postgresql://..."
        )
    return SQLiteStore(Path(target))


__all__ = [
    "ENV_VAR",
    "BlobCorruptError",
    "BlobNotFoundError",
    "BlobStore",
    "ConcurrentWriteError",
    "Event",
    "MemoryStore",
    "NewEvent",
    "SQLiteStore",
    "SearchDoc",
    "SearchHit",
    "SessionInfo",
    "Store",
    "Transaction",
    "open_store",
]
