"""Open workspaces written by earlier releases: their files become events, blobs and documents.

The earlier layout (one folder per session: ``log.jsonl``, ``meta.json``, ``state.json``,
``session_state.json``, ``records.jsonl``, ``tool_results/`` with ``index.jsonl``,
``compact-blocks.jsonl``, ``evidence/``; ``memory/*.md``; ``index.sqlite``) is read once and
written into the workspace's store. Each session moves in one transaction (all of it or none;
a session the store already has is skipped), so an interrupted migration simply continues on
the next open, and two processes opening the same old workspace cannot both migrate a session.
The old files are left in place (read, never changed); ``index.sqlite`` is not needed any more.

Owners: a session's agent comes from its ``meta.json``; without one the owner is unknown and
the session is given to ``unknown-owner`` (nobody's), never to ``default``. Memory facts belong
to the agent of the session their source message came from (``default`` when unknown).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..core.paths import check_session_id
from ..core.records import OffloadEntry
from ..core.wire import loads_message
from ..errors import ContextFoldError, StorageError, UnsafeIdError
from ..evidence.keys import Ords, pointer_key
from ..evidence.model import CompactBlock, EvidenceFormatError
from ..evidence.store import search_docs
from ..recovery.memory import NAMESPACE as MEMORY_NS
from ..recovery.memory import fact_doc, fact_key, parse_topic_file
from ..recovery.memory_extract import fact_hash
from ..recovery.sessions.log import LogEntry, message_event, search_doc
from ..storage.base import ConcurrentWriteError, NewEvent, SearchDoc, Store
from ..storage.sqlite import SQLiteStore
from ..storage.util import utc_now

UNKNOWN_OWNER = "unknown-owner"
MARKER_NS = "migration"
MARKER_KEY = "legacy-files"


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    """JSON objects of a JSONL file; damaged lines (a torn last write) are skipped."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc}") from exc
    for line in raw.splitlines():
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict):
            yield data


def _json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def legacy_sessions(root: Path) -> list[Path]:
    folder = root / "sessions"
    if not folder.is_dir():
        return []
    out = []
    for child in sorted(folder.iterdir()):
        try:
            check_session_id(child.name)
        except UnsafeIdError:
            continue
        if (child / "log.jsonl").is_file() or (child / "meta.json").is_file():
            out.append(child)
    return out


def _migrate_session(store: Store, folder: Path, owners: dict[str, str]) -> bool:
    """One session in one transaction; False when the store already had it."""
    sid = folder.name
    if store.head(sid) > 0:
        for event in store.read(sid, kinds=["message"]):
            owners[str(event.data.get("uuid"))] = store.session(sid).agent_id  # type: ignore[union-attr]
        return False
    meta = _json(folder / "meta.json") or {}
    owner = str(meta.get("agent_id") or UNKNOWN_OWNER)
    events: list[NewEvent] = []
    docs: list[SearchDoc] = []
    _migrate_messages(folder, sid, owner, owners, events, docs)
    _migrate_offloads(store, folder, events)
    whole = _migrate_evidence(store, folder, sid, owner, events, docs)
    for line in _lines(folder / "records.jsonl"):
        events.append(NewEvent(kind="compaction", data={"record": line}))
    state = _json(folder / "state.json")
    if state is not None:
        events.append(NewEvent(kind="state", data=state))
    session_state = _json(folder / "session_state.json")
    if session_state is not None:
        events.append(NewEvent(kind="session_state", data=session_state))
    if not events:
        return False
    title = str(meta.get("title") or "")
    try:
        with store.transaction() as txn:
            txn.append(sid, events, expected_seq=0, agent_id=owner, title=title or None)
            txn.index(docs)
            for pid, pointer in whole.items():
                txn.put_doc("evidence", pointer_key(sid, pid), {"pointer": pointer})
            if state is not None and isinstance(state.get("calibration"), dict):
                txn.put_doc("calibration", f"{sid}/calibration", state["calibration"])
    except ConcurrentWriteError:  # another process migrated it first
        return False
    return True


def _migrate_messages(
    folder: Path,
    sid: str,
    owner: str,
    owners: dict[str, str],
    events: list[NewEvent],
    docs: list[SearchDoc],
) -> None:
    """The session's messages as message events and search documents."""
    pos = 0
    for line in _lines(folder / "log.jsonl"):
        try:
            msg = loads_message(line, index=pos)
        except ContextFoldError:
            continue
        events.append(NewEvent(kind="message", data=message_event(msg, pos, None)))
        entry = LogEntry(seq=pos, uuid=msg.uuid, ts=str(line.get("ts") or ""), message=msg)
        docs.append(search_doc(sid, owner, entry, len(events) - 1))
        owners[msg.uuid] = owner
        pos += 1


def _migrate_offloads(store: Store, folder: Path, events: list[NewEvent]) -> None:
    """The offloaded tool results: their bytes as blobs, their entries as offload events."""
    blobs = store.blobs
    for line in _lines(folder / "tool_results" / "index.jsonl"):
        try:
            entry_o = OffloadEntry.from_dict(line)
        except (TypeError, ValueError):
            continue
        name = Path(entry_o.path).name
        with contextlib.suppress(OSError):
            blobs.put((folder / "tool_results" / name).read_bytes())
        events.append(
            NewEvent(kind="offload", data={"entry": entry_o.to_dict(), "store": "default"})
        )


def _migrate_evidence(
    store: Store,
    folder: Path,
    sid: str,
    owner: str,
    events: list[NewEvent],
    docs: list[SearchDoc],
) -> dict[str, Any]:
    """The evidence bodies as blobs and the compact blocks as evidence events with their
    search documents; returns each pointer by id (a document each, for the hits)."""
    blobs = store.blobs
    evidence = folder / "evidence"
    if evidence.is_dir():
        for body in sorted(evidence.glob("*/*.txt")):
            with contextlib.suppress(OSError):
                blobs.put(body.read_bytes())

    def text_of(p: Any) -> str:
        try:
            return blobs.get(p.sha256).decode("utf-8", "surrogatepass")
        except (StorageError, ValueError):
            return str(p.preview)

    ords = Ords()  # one numbering for the whole session (the first copy of a pointer wins)
    whole: dict[str, Any] = {}
    for line in _lines(folder / "compact-blocks.jsonl"):
        try:
            block = CompactBlock.from_dict(line)
        except (EvidenceFormatError, TypeError, ValueError):
            continue
        placed = ords.place(block)
        docs.extend(search_docs(sid, owner, block, text_of, ords=placed, block_seq=len(events)))
        whole.update((p.id, p.to_dict()) for p in block.evidence if p.id in placed)
        events.append(NewEvent(kind="evidence", data={"block": block.to_dict()}))
    return whole


def _migrate_memory(store: Store, root: Path, owners: dict[str, str]) -> int:
    folder = root / "memory"
    if not folder.is_dir():
        return 0
    stamp = utc_now()
    n = 0
    with store.transaction() as txn:
        docs = []
        for path in sorted(folder.glob("*.md")):
            if path.name == "MEMORY.md":
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except OSError as exc:
                raise StorageError(f"cannot read {path}: {exc}") from exc
            title = next(
                (ln[2:].strip() for ln in text.splitlines() if ln.startswith("# ")), path.stem
            )
            for kind, fact, _h in parse_topic_file(text):
                src = ""
                for line in text.splitlines():
                    if fact in line and " src:" in line:
                        src = line.split(" src:", 1)[1].split()[0]
                        break
                scope = owners.get(src, "default")
                h = fact_hash(fact)
                value: dict[str, str | int] = {
                    "kind": kind,
                    "text": fact,
                    "title": title,
                    "file": path.name,
                    "source": src,
                    "ts": stamp,
                    "n": n,
                }
                txn.put_doc(MEMORY_NS, fact_key(scope, h), value)
                docs.append(fact_doc(scope, h, value))
                n += 1
        txn.index(docs)
    return n


def migrate_workspace(store: SQLiteStore) -> dict[str, int]:
    """Migrate the old files under the store's folder (idempotent); returns counts."""
    root = store.root
    owners: dict[str, str] = {}
    moved = 0
    folders = legacy_sessions(root)
    for folder in folders:
        if _migrate_session(store, folder, owners):
            moved += 1
    facts = _migrate_memory(store, root, owners)
    with store.transaction() as txn:
        txn.put_doc(
            MARKER_NS,
            MARKER_KEY,
            {"sessions": [f.name for f in folders], "facts": facts, "at": utc_now()},
        )
    return {"sessions": moved, "seen": len(folders), "facts": facts}


def migrate_on_open(store: SQLiteStore) -> None:
    """Migrate an old workspace the first time it is opened (cheap when there is nothing)."""
    root = store.root
    if not (root / "sessions").is_dir() and not (root / "memory").is_dir():
        return
    if store.read_only or store.get_doc(MARKER_NS, MARKER_KEY) is not None:
        return
    migrate_workspace(store)


__all__ = ["UNKNOWN_OWNER", "legacy_sessions", "migrate_on_open", "migrate_workspace"]
