"""Human-readable files from any store: ``contextfold export`` and ``contextfold migrate``.

``export SESSION -o FOLDER`` writes, from any backend::

    FOLDER/log.jsonl              the raw log (one message a line: seq, uuid, ts, message, metadata)
    FOLDER/records.jsonl          one CompactionRecord a line
    FOLDER/compact-blocks.jsonl   one CompactBlock a line
    FOLDER/tool_results/<id>.txt  the offloaded results, byte-exact
    FOLDER/evidence/ab/<sha>.txt  the evidence bodies, byte-exact
    FOLDER/session_state.json     plan mode, todos, tasks (when set)
    FOLDER/memory/MEMORY.md       the owner's memory (and one file per topic)

``migrate DIR`` moves a workspace written by an earlier release into its store (it also happens
on first open).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..core.paths import check_session_id
from ..core.records import CompactionRecord, OffloadEntry
from ..errors import ConfigError, StorageError
from ..evidence.model import CompactBlock, EvidenceFormatError
from ..jsontypes import to_int
from ..recovery.sessions.log import entry_of
from ..storage import SQLiteStore, Store, open_store


def open_cli_store(workspace: str | None, store: str | None) -> Store:
    if workspace and store:
        raise ConfigError("give either --workspace or --store, not both")
    if store:
        return open_store(store)
    from .migrate import migrate_on_open

    opened = SQLiteStore(Path(workspace or "./.contextfold"))
    migrate_on_open(opened)
    return opened


def records_of(store: Store, session_id: str) -> list[CompactionRecord]:
    check_session_id(session_id)
    out = []
    for ev in store.read(session_id, kinds=["compaction"]):
        try:
            out.append(CompactionRecord.from_dict(ev.data["record"]))
        except (KeyError, TypeError, ValueError):
            continue
    return out


def blocks_of(store: Store, session_id: str) -> list[CompactBlock]:
    check_session_id(session_id)
    out = []
    for ev in store.read(session_id, kinds=["evidence"]):
        try:
            out.append(CompactBlock.from_dict(ev.data["block"]))
        except (KeyError, EvidenceFormatError, TypeError, ValueError):
            continue
    return out


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as exc:
        raise StorageError(f"cannot write {path}: {exc}") from exc


def _jsonl(rows: Iterable[Any]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")


def _evidence_body(
    store: Store, sha: str | None, uuid: str | None, texts: dict[str, str]
) -> bytes | None:
    """An evidence body by its sha256: its blob, or the message of the log it is exactly."""
    if not sha:
        return None
    if store.blobs.has(sha):
        return store.blobs.get(sha)
    data = texts.get(uuid or "", "").encode("utf-8", "surrogatepass")
    return data if uuid in texts and hashlib.sha256(data).hexdigest() == sha else None


def export_session(store: Store, session_id: str, out: Path) -> dict[str, int]:
    """Write the session's human-readable files under ``out``; returns counts."""
    check_session_id(session_id)
    info = store.session(session_id)
    if info is None:
        raise ConfigError(f"no session {session_id!r} in {store.url}")
    log = []
    texts: dict[str, str] = {}  # message uuid -> text (evidence bodies the log holds)
    offloads: list[OffloadEntry] = []
    for ev in store.read(session_id, kinds=["message", "offload"]):
        if ev.kind == "offload":
            try:
                offloads.append(OffloadEntry.from_dict(ev.data["entry"]))
            except (KeyError, TypeError, ValueError):
                continue
            continue
        e = entry_of(ev)
        texts[e.uuid] = e.message.text
        log.append(
            {
                "seq": e.seq,
                "uuid": e.uuid,
                "ts": ev.ts,
                "message": ev.data.get("message"),
                "metadata": ev.data.get("metadata") or {},
            }
        )
    _write(out / "log.jsonl", _jsonl(log))
    # the caller's own rewrites: which logged messages left its conversation, when and why
    rewrites = [dict(ev.data) for ev in store.read(session_id, kinds=["rewrite"])]
    if rewrites:
        _write(out / "rewrites.jsonl", _jsonl(rewrites))
    records = records_of(store, session_id)
    _write(out / "records.jsonl", _jsonl(r.to_dict() for r in records))
    blocks = blocks_of(store, session_id)
    _write(out / "compact-blocks.jsonl", _jsonl(b.to_dict() for b in blocks))
    files = 0
    for entry in offloads:
        data = store.blobs.get(entry.sha256)
        _write(out / "tool_results" / Path(entry.path).name, data)
        files += 1
    for block in blocks:
        for p in block.evidence:
            body = _evidence_body(store, p.sha256, p.message_uuid, texts)
            if body is not None and p.sha256:
                _write(out / "evidence" / p.sha256[:2] / f"{p.sha256}.txt", body)
                files += 1
    state = store.read_last(session_id, 1, kinds=["session_state"])
    if state:
        _write(out / "session_state.json", json.dumps(state[0].data, indent=1).encode())
    _write(
        out / "meta.json",
        json.dumps(
            {
                "session_id": info.session_id,
                "agent_id": info.agent_id,
                "created_at": info.created_at,
                "updated_at": info.updated_at,
                "title": info.title,
                "message_count": info.messages,
            },
            ensure_ascii=False,
            indent=1,
        ).encode(),
    )
    facts = _export_memory(store, info.agent_id, out / "memory")
    return {
        "messages": len(log),
        "rewrites": len(rewrites),
        "records": len(records),
        "blocks": len(blocks),
        "files": files,
        "facts": facts,
    }


def _export_memory(store: Store, agent_id: str, out: Path) -> int:
    from ..recovery.memory import INDEX_NAME, NAMESPACE, SHARED_SCOPE, fact_key

    facts = [
        f
        for scope in (agent_id, SHARED_SCOPE)
        for f in store.docs(NAMESPACE, prefix=fact_key(scope, "")).values()
    ]
    if not facts:
        return 0
    facts.sort(key=lambda f: (str(f.get("ts", "")), to_int(f.get("n", 0))))
    index = ["# Memory", "", "One line per fact; details in the topic files.", ""]
    topics: dict[str, list[str]] = {}
    from ..recovery.memory_extract import fact_hash

    for f in facts:
        index.append(f"- [{f.get('title')}]({f.get('file')}) ({f.get('kind')}) {f.get('text')}")
        topics.setdefault(str(f.get("file")), [f"# {f.get('title')}", ""]).append(
            f"- ({f.get('kind')}) {f.get('text')} <!-- cf:{fact_hash(str(f.get('text')))} -->"
        )
    _write(out / INDEX_NAME, ("\n".join(index) + "\n").encode("utf-8"))
    for name, lines in topics.items():
        if name and "/" not in name and not name.startswith("."):
            _write(out / name, ("\n".join(lines) + "\n").encode("utf-8"))
    return len(facts)


__all__ = ["blocks_of", "export_session", "open_cli_store", "records_of"]
