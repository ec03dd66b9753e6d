"""One storage layer: event logs, blobs, search and documents behind the ``Store`` protocol."""

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

__all__ = [
    "BlobCorruptError",
    "BlobNotFoundError",
    "BlobStore",
    "ConcurrentWriteError",
    "Event",
    "NewEvent",
    "SearchDoc",
    "SearchHit",
    "SessionInfo",
    "Store",
    "Transaction",
]
