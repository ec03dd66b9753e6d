"""CompactionRecord, its store and the two-line compaction notification."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import ConfigError
from ..jsontypes import JSONObject
from .anchors import Anchor, AnchorType

if TYPE_CHECKING:
    from ..storage.session import SessionStore


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
    #: "compaction" (> 4,000 chars at compaction time), "ingest" (> 10,000 chars when
    #: the message arrives), "eviction" (> 80,000 chars, head+tail preview) or
    #: "emergency" (forced, any size, to fit the window).
    policy: str
    tool_name: str | None = None

    def to_dict(self) -> JSONObject:
        # every field is a plain value: a dict of them is what ``asdict`` gives, in a
        # fraction of its time (an emergency compaction writes thousands of entries)
        return {name: getattr(self, name) for name in _OFFLOAD_FIELDS}

    @classmethod
    def from_dict(cls, data: object) -> OffloadEntry:
        """The entry ``to_dict`` gave (as decoded); TypeError when ``data`` is not an object."""
        names = cls.__dataclass_fields__
        return cls(**_fields_of(data, names, "offload entry"))


_OFFLOAD_FIELDS = tuple(f.name for f in fields(OffloadEntry))


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
    #: Beyond the design notes: why this tier ran, which strategy, what the summarizer cost.
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
        """Seconds (the design notes' Duration)."""
        return self.duration_ms / 1000.0

    @property
    def offloaded_bytes(self) -> int:
        return sum(e.bytes for e in self.offloaded)

    def to_dict(self) -> JSONObject:
        data: JSONObject = {k: getattr(self, k) for k in self.__dataclass_fields__}
        data["tier"] = self.tier.value
        data["anchors"] = [{"type": a.type.value, "content": a.content} for a in self.anchors]
        data["offloaded"] = [e.to_dict() for e in self.offloaded]
        data["notes"] = list(self.notes)
        return data

    @classmethod
    def from_dict(cls, data: object) -> CompactionRecord:
        """The record ``to_dict`` gave (as decoded); TypeError, KeyError or ValueError when
        ``data`` is not one."""
        kw = _fields_of(data, cls.__dataclass_fields__, "compaction record")
        kw["tier"] = Tier(kw.get("tier", "none"))
        kw["anchors"] = tuple(
            Anchor(type=AnchorType(a["type"]), content=a.get("content", "N/A"))
            for a in kw.get("anchors", [])
            if a.get("type") in AnchorType._value2member_map_
        )
        kw["offloaded"] = tuple(OffloadEntry.from_dict(e) for e in kw.get("offloaded", []))
        kw["notes"] = tuple(kw.get("notes", ()))
        return cls(**kw)

    def notification(self, locale: str = "en") -> str:
        """The two-line notice (``locale`` ``"en"`` or ``"zh"``)."""
        return format_notification(self, locale=locale)


def _fields_of(data: object, names: Mapping[str, object], what: str) -> dict[str, Any]:
    """The items of ``data`` (a decoded object) that name fields of the dataclass, their values
    as stored (the dataclass takes them as they are, as it always did)."""
    if not isinstance(data, Mapping):
        raise TypeError(f"a stored {what} is not an object")
    return {k: v for k, v in data.items() if k in names}


class RecordStore(Protocol):
    def append(self, record: CompactionRecord) -> None: ...
    def list(self, session_id: str) -> list[CompactionRecord]: ...


class StoreRecordStore:
    """Compaction records as ``compaction`` events of the session's log (one per record,
    in the same unit of work as the compaction's offloads, evidence and state)."""

    def __init__(self, session: SessionStore) -> None:
        self.session = session
        #: Records that could not be read back (damaged events), newest last.
        self.problems: list[str] = []

    def append(self, record: CompactionRecord) -> None:
        self.session.emit("compaction", {"record": record.to_dict()})

    def list(self, session_id: str) -> list[CompactionRecord]:
        out: list[CompactionRecord] = []
        events = self.session.store.read(session_id, kinds=["compaction"])
        for ev in events:
            try:
                out.append(CompactionRecord.from_dict(ev.data["record"]))
            except (KeyError, TypeError, ValueError) as exc:
                self.problems.append(f"event {ev.seq}: skipped unreadable record ({exc})")
        return out


def _k(tokens: int) -> str:
    return f"{tokens / 1000:.1f}K"


def _size(n: int) -> str:
    return f"{n / 1024:.0f}KB" if n >= 1024 else f"{n}B"


def _format_zh(record: CompactionRecord) -> str:
    """The notice in the design notes' Chinese form (tier label, tokens, ratio; details)."""
    if record.tier is Tier.NONE:
        return f"无需压缩：当前 {_k(record.tokens_before)} tokens"
    saved = 0.0
    if record.tokens_before > 0:
        saved = max(0.0, 1.0 - record.tokens_after / record.tokens_before) * 100
    first = (
        f"⚡ 上下文压缩 [{record.tier.label}] {_k(record.tokens_before)}→"
        f"{_k(record.tokens_after)} tokens（{saved:.0f}% 压缩率）"
    )
    if record.tier is Tier.EMERGENCY:
        parts = ["⚠ 紧急截断回退", f"保留尾部 {record.preserved_tail} 条"]
    else:
        parts = []
        real_anchors = [a for a in record.anchors if not a.is_empty]
        if real_anchors:
            parts.append(f"{len(real_anchors)} 锚点")
        if record.offloaded:
            parts.append(f"{len(record.offloaded)} offload({_size(record.offloaded_bytes)})")
        if record.summarized:
            parts.append(f"{record.summarized} 条摘要")
            parts.append(f"保留尾部 {record.preserved_tail} 条")
        else:
            parts.append("无摘要")
    return first + "\n   " + " | ".join(parts)


def format_notification(record: CompactionRecord, *, locale: str = "en") -> str:
    """The two-line compaction notice (one line when nothing was compacted), in English or,
    with ``locale="zh"``, in Chinese."""
    if locale == "zh":
        return _format_zh(record)
    if locale != "en":
        raise ConfigError(f"locale must be 'en' or 'zh', got {locale!r}")
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
        skipped = any(n.startswith("LLM summarizer not used") for n in record.notes)
        parts.append("⚠ emergency truncation fallback" + (" (no LLM summary)" if skipped else ""))
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
        lines = record.error.splitlines()  # the whole first error, its cause included
        more = f" (+{len(lines) - 1} more in the record)" if len(lines) > 1 else ""
        parts.append(f"⚠ {lines[0]}{more}")
    return first + "\n   " + " | ".join(parts)
