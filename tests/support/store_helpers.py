"""Read what a workspace stores, for tests that check persistence (the files of earlier
releases are now events, blobs and documents of the workspace's store)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from contextfold.core.records import CompactionRecord, OffloadEntry
from contextfold.storage import SQLiteStore
from contextfold.storage.session import SessionStore


def _store(ws: Path) -> SQLiteStore:
    return SQLiteStore(ws)


def events(ws: Path, sid: str, kind: str) -> list[dict[str, Any]]:
    store = _store(ws)
    try:
        return [dict(e.data) for e in store.read(sid, kinds=[kind])]
    finally:
        store.close()


def records(ws: Path, sid: str) -> list[CompactionRecord]:
    return [CompactionRecord.from_dict(d["record"]) for d in events(ws, sid, "compaction")]


def log_lines(ws: Path, sid: str) -> list[dict[str, Any]]:
    """Message events shaped as the lines of the old log.jsonl (seq, uuid, message, metadata)."""
    return [
        {"seq": d["pos"], "uuid": d["uuid"], "message": d["message"], "metadata": d["metadata"]}
        for d in events(ws, sid, "message")
    ]


def offloads(ws: Path, sid: str) -> list[OffloadEntry]:
    return [OffloadEntry.from_dict(d["entry"]) for d in events(ws, sid, "offload")]


def blob(ws: Path, sha: str) -> bytes:
    store = _store(ws)
    try:
        return store.blobs.get(sha)
    finally:
        store.close()


def blob_path(ws: Path, sha: str) -> Path:
    return ws / "blobs" / sha[:2] / sha


def session_store(root: Path, sid: str = "s", agent: str = "a") -> SessionStore:
    """A writer on session ``sid`` of a SQLite store at ``root``."""
    return SessionStore(SQLiteStore(root), sid, agent)


def session_ids(ws: Path) -> list[str]:
    """Ids of the sessions stored in the workspace, sorted."""
    if not (ws / "store.sqlite").is_file():
        return []
    store = _store(ws)
    try:
        return sorted(i.session_id for i in store.sessions())
    finally:
        store.close()
