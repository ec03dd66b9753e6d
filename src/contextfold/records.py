"""CompactionRecord (seed 000, 5.1), its JSONL store (5.2) and the two-line notification (5.4)."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Protocol

from .anchors import Anchor, AnchorType
from .errors import StorageError


class Tier(str, Enum):
    NONE = "none"
    WARN = "warn"
    SOFT = "soft"
    FULL = "full"
    EMERGENCY = "emergency"

    @property
    def label(self) -> str:
        return self.value.capitalize()


@dataclass(frozen=True, kw_only=True, slots=True)
class OffloadEntry:
    """One tool result (or oversized message) moved out of the view into a file."""

    tool_call_id: str
    message_uuid: str
    #: Path of the file, relative to the workspace root (POSIX separators).
    path: str
    sha256: str
    chars: int
    bytes: int
    lines: int
    #: "compaction" (seed 000, > 4,000 chars at compaction time), "ingest" (> 10,000 chars when
    #: the message arrives), "eviction" (seed 002, > 80,000 chars, head+tail preview) or
    #: "emergency" (forced, any size, to fit the window).
    policy: str
    tool_name: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OffloadEntry:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True, kw_only=True, slots=True)
class CompactionRecord:
    """Everything one compaction did. ``error`` is non-empty when a stage failed open."""

    id: str
    session_id: str
    timestamp: str
    tier: Tier
    tokens_before: int
    tokens_after: int
    msgs_before: int
    msgs_after: int
    anchors: tuple[Anchor, ...] = ()
    offloaded: tuple[OffloadEntry, ...] = ()
    summarized: int = 0
    preserved_tail: int = 0
    summary_text: str = ""
    compression_ratio: float = 1.0
    duration_ms: float = 0.0
    error: str = ""
    #: Beyond the seed: why this tier ran, which strategy, what the summarizer cost.
    reason: str = ""
    strategy: str = "progressive"
    forced: bool = False
    summarizer: str = ""
    summarizer_input_tokens: int = 0
    summarizer_output_tokens: int = 0
    boundary_uuid: str | None = None
    window: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: False when the tier was reached but there was nothing to do (e.g. Warn with no large
    #: result left in the head); such records are returned but not persisted or announced.
    changed: bool = True

    @property
    def duration(self) -> float:
        """Seconds, like the seed's Duration."""
        return self.duration_ms / 1000.0

    @property
    def offloaded_bytes(self) -> int:
        return sum(e.bytes for e in self.offloaded)

    def to_dict(self) -> dict[str, Any]:
        data = {k: getattr(self, k) for k in self.__dataclass_fields__}
        data["tier"] = self.tier.value
        data["anchors"] = [{"type": a.type.value, "content": a.content} for a in self.anchors]
        data["offloaded"] = [e.to_dict() for e in self.offloaded]
        data["notes"] = list(self.notes)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CompactionRecord:
        names = cls.__dataclass_fields__
        kw = {k: v for k, v in data.items() if k in names}
        kw["tier"] = Tier(kw.get("tier", "none"))
        kw["anchors"] = tuple(
            Anchor(type=AnchorType(a["type"]), content=a.get("content", "N/A"))
            for a in kw.get("anchors", [])
            if a.get("type") in AnchorType._value2member_map_
        )
        kw["offloaded"] = tuple(OffloadEntry.from_dict(e) for e in kw.get("offloaded", []))
        kw["notes"] = tuple(kw.get("notes", ()))
        return cls(**kw)

    def notification(self) -> str:
        return format_notification(self)


class RecordStore(Protocol):
    def append(self, record: CompactionRecord) -> None: ...
    def list(self, session_id: str) -> list[CompactionRecord]: ...


class FileRecordStore:
    """Append-only JSONL, one file per session (``sessions/<id>/records.jsonl``).

    ``path_for`` maps a session id to its file. A torn last line (crash mid-write) is skipped
    when reading; a corrupt line elsewhere is skipped and counted in ``problems``.
    """

    def __init__(self, path_for: Any) -> None:
        self._path_for = path_for
        self.problems: list[str] = []

    def append(self, record: CompactionRecord) -> None:
        path: Path = self._path_for(record.session_id)
        line = json.dumps(record.to_dict(), ensure_ascii=False) + "\n"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            _ensure_line_start(path)
            with path.open("a", encoding="utf-8") as fh:
                fh.write(line)
        except OSError as exc:
            raise StorageError(f"cannot append compaction record to {path}: {exc}") from exc

    def list(self, session_id: str) -> list[CompactionRecord]:
        path: Path = self._path_for(session_id)
        return read_records(path, self.problems)


def _ensure_line_start(path: Path) -> None:
    """If a previous writer died mid-line, start the next record on a fresh line."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return
    if size == 0:
        return
    with path.open("rb") as fh:
        fh.seek(size - 1)
        last = fh.read(1)
    if last != b"\n":
        with path.open("ab") as fh:
            fh.write(b"\n")


def read_records(path: Path, problems: list[str] | None = None) -> list[CompactionRecord]:
    if not path.exists():
        return []
    out: list[CompactionRecord] = []
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                out.append(CompactionRecord.from_dict(json.loads(line)))
            except (ValueError, TypeError, KeyError) as exc:
                if problems is not None:
                    problems.append(f"{path}:{lineno}: skipped unreadable record ({exc})")
    return out


def _k(tokens: int) -> str:
    return f"{tokens / 1000:.1f}K"


def _size(n: int) -> str:
    return f"{n / 1024:.0f}KB" if n >= 1024 else f"{n}B"


def format_notification(record: CompactionRecord) -> str:
    """The two-line compaction notice, in English (one line when nothing was compacted)."""
    if record.tier is Tier.NONE:
        window = f" of the {record.window}-token window" if record.window else ""
        return f"No compaction needed: the view is {_k(record.tokens_before)} tokens{window}"
    saved = 0.0
    if record.tokens_before > 0:
        saved = max(0.0, 1.0 - record.tokens_after / record.tokens_before) * 100
    first = (
        f"⚡ Context compacted [{record.tier.label}] {_k(record.tokens_before)}→"
        f"{_k(record.tokens_after)} tokens ({saved:.0f}% saved)"
    )
    parts: list[str] = []
    if record.tier is Tier.EMERGENCY or record.error.startswith("emergency"):
        parts.append("⚠ emergency truncation fallback")
    real_anchors = [a for a in record.anchors if not a.is_empty]
    if real_anchors:
        parts.append(f"{len(real_anchors)} anchors")
    if record.offloaded:
        parts.append(f"{len(record.offloaded)} offloaded({_size(record.offloaded_bytes)})")
    if record.summarized:
        parts.append(f"{record.summarized} messages summarized")
    else:
        parts.append("no summary")
    parts.append(f"tail kept {record.preserved_tail}")
    if record.error and not record.error.startswith("emergency"):
        parts.append(f"⚠ {record.error.splitlines()[0][:80]}")
    return first + "\n   " + " | ".join(parts)


def atomic_write_text(path: Path, text: str) -> None:
    """Write a whole file atomically (temp file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise StorageError(f"cannot write {path}: {exc}") from exc
