"""Records of recoverable compaction.

Three frozen records, each with ``to_dict()`` / ``from_dict()`` for the JSON lines of
``compact-blocks.jsonl``. JSON keys are camelCase names (``messageUuid``,
``toolUseId`` ...); Python attributes are snake_case. Every dict carries ``schema_version``;
``from_dict`` ignores keys it does not know (a later version's file stays readable) and fills
defaults for keys that are missing (an earlier version's file stays readable).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from ..errors import ContextFoldError
from ..jsontypes import JSON, JSONObject  # noqa: F401 (JSON: for get_type_hints)

#: 2 added what a tool call was about (paths, patterns, urls, action, lines, shell); records
#: of version 1 get them derived from their command when read.
SCHEMA_VERSION = 2

SourceScope = Literal["main_agent", "sub_agent"]
SOURCE_SCOPES: frozenset[str] = frozenset({"main_agent", "sub_agent"})


class EvidenceFormatError(ContextFoldError, ValueError):
    """A stored evidence record cannot be read (not an object, wrong field type)."""


@functools.lru_cache(maxsize=256)
def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _as_str(value: object, key: str, default: str) -> str:
    if value is None:
        return default
    if not isinstance(value, str):
        raise EvidenceFormatError(f"field {key!r} must be a string, got {type(value).__name__}")
    return value


def _as_opt_str(value: object, key: str) -> str | None:
    if value is None:
        return None
    return _as_str(value, key, "")


def _as_int(value: object, key: str, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise EvidenceFormatError(f"field {key!r} must be a number, got {type(value).__name__}")
    return int(value)


def _as_float(value: object, key: str, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise EvidenceFormatError(f"field {key!r} must be a number, got {type(value).__name__}")
    return float(value)


def _as_strs(value: object, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise EvidenceFormatError(f"field {key!r} must be a list, got {type(value).__name__}")
    return tuple(str(v) for v in value)


def _mapping(data: object, what: str) -> Mapping[str, object]:
    if not isinstance(data, Mapping):
        raise EvidenceFormatError(f"{what} must be a JSON object, got {type(data).__name__}")
    return data


@dataclass(frozen=True, kw_only=True, slots=True)
class EvidencePointer:
    """Where one piece of evidence (a tool result, a message, a worker's output) can be found.

    ``archived_tool_result_path`` and ``tool_result_path`` are relative to the session folder
    (posix separators); ``sha256`` is the hex digest of the body's UTF-8 bytes. ``created_at``
    is a sequence number within the session (not wall-clock time), so indexing is deterministic.
    """

    id: str
    message_uuid: str | None = None
    tool_use_id: str | None = None
    tool_result_path: str | None = None
    archived_tool_result_path: str | None = None
    source_scope: SourceScope = "main_agent"
    agent_run_id: str | None = None
    parent_message_uuid: str | None = None
    content_types: tuple[str, ...] = ()
    anchors: tuple[str, ...] = ()
    sha256: str | None = None
    chars: int = 0
    preview: str = ""
    command: str | None = None
    tool_name: str | None = None
    #: Role of the source message: "tool" (a tool result), "assistant", "user", or "text"
    #: (a sub-agent's plain-text output).
    role: str = "tool"
    created_at: int = 0
    #: Files the call named (as written there), search patterns, URLs (schema 2).
    paths: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()
    urls: tuple[str, ...] = ()
    #: read | write | edit | search | run | other (schema 2; None: unknown).
    action: str | None = None
    #: The line range a read shows, ``first-last`` (``first-`` when open-ended).
    lines: str | None = None
    #: Whether ``command`` is a shell command line (else a file tool's short form).
    shell: bool = False

    @property
    def is_tool_result(self) -> bool:
        return self.role == "tool"

    def to_dict(self) -> JSONObject:
        out: JSONObject = {"schema_version": SCHEMA_VERSION}
        for name, key in _pointer_keys():
            value = getattr(self, name)
            out[key] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_dict(cls, data: object) -> EvidencePointer:
        d = _mapping(data, "evidence pointer")
        scope = _as_str(d.get("sourceScope"), "sourceScope", "main_agent")
        if scope not in SOURCE_SCOPES:
            raise EvidenceFormatError(f"unknown sourceScope {scope!r}")
        pointer = cls(
            id=_as_str(d.get("id"), "id", ""),
            message_uuid=_as_opt_str(d.get("messageUuid"), "messageUuid"),
            tool_use_id=_as_opt_str(d.get("toolUseId"), "toolUseId"),
            tool_result_path=_as_opt_str(d.get("toolResultPath"), "toolResultPath"),
            archived_tool_result_path=_as_opt_str(
                d.get("archivedToolResultPath"), "archivedToolResultPath"
            ),
            source_scope=scope,  # type: ignore[arg-type]
            agent_run_id=_as_opt_str(d.get("agentRunId"), "agentRunId"),
            parent_message_uuid=_as_opt_str(d.get("parentMessageUuid"), "parentMessageUuid"),
            content_types=_as_strs(d.get("contentTypes"), "contentTypes"),
            anchors=_as_strs(d.get("anchors"), "anchors"),
            sha256=_as_opt_str(d.get("sha256"), "sha256"),
            chars=_as_int(d.get("chars"), "chars", 0),
            preview=_as_str(d.get("preview"), "preview", ""),
            command=_as_opt_str(d.get("command"), "command"),
            tool_name=_as_opt_str(d.get("toolName"), "toolName"),
            role=_as_str(d.get("role"), "role", "tool"),
            created_at=_as_int(d.get("createdAt"), "createdAt", 0),
            paths=_as_strs(d.get("paths"), "paths"),
            patterns=_as_strs(d.get("patterns"), "patterns"),
            urls=_as_strs(d.get("urls"), "urls"),
            action=_as_opt_str(d.get("action"), "action"),
            lines=_as_opt_str(d.get("lines"), "lines"),
            shell=bool(d.get("shell", False)),
        )
        version = d.get("schema_version", 1)
        if isinstance(version, int) and version < 2:
            return _upgrade_v1(pointer)
        return pointer


@functools.cache
def _pointer_keys() -> tuple[tuple[str, str], ...]:
    """(field name, camelCase key) of every EvidencePointer field, in order."""
    return tuple((f.name, _camel(f.name)) for f in dataclasses.fields(EvidencePointer))


def _upgrade_v1(p: EvidencePointer) -> EvidencePointer:
    """A version-1 pointer with what its call was about derived from its command (version 1
    stored a shell command line, or ``name {json arguments}`` for other tools)."""
    if p.role != "tool" or not p.command:
        return p
    from .fields import call_fields, lines_text  # fields imports this module

    name = p.tool_name or "bash"
    prefix = f"{p.tool_name} " if p.tool_name else None
    rest = p.command[len(prefix) :] if prefix and p.command.startswith(prefix + "{") else None
    got = call_fields(name, rest) if rest is not None else call_fields(name, {"command": p.command})
    return dataclasses.replace(
        p,
        paths=got.paths,
        patterns=got.patterns,
        urls=got.urls,
        action=got.action,
        lines=lines_text(got.lines) or None,
        shell=got.shell,
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class CompactSummaryItem:
    """One structured claim of a compaction summary, linked to the evidence it came from.

    ``confidence`` says how well the claim is grounded: 1.0 when a specific hint (a command,
    a test id, an exception type, a file:line) matched evidence, 0.7 when only looser hints
    (a file path) matched, 0.3 when nothing matched.
    """

    kind: str
    text: str
    confidence: float = 0.3
    evidence_ids: tuple[str, ...] = ()
    query_hints: tuple[str, ...] = ()

    def to_dict(self) -> JSONObject:
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": self.kind,
            "text": self.text,
            "confidence": self.confidence,
            "evidenceIds": list(self.evidence_ids),
            "queryHints": list(self.query_hints),
        }

    @classmethod
    def from_dict(cls, data: object) -> CompactSummaryItem:
        d = _mapping(data, "summary item")
        return cls(
            kind=_as_str(d.get("kind"), "kind", ""),
            text=_as_str(d.get("text"), "text", ""),
            confidence=_as_float(d.get("confidence"), "confidence", 0.3),
            evidence_ids=_as_strs(d.get("evidenceIds"), "evidenceIds"),
            query_hints=_as_strs(d.get("queryHints"), "queryHints"),
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class CompactBlock:
    """The result of one compaction (or one sub-agent report): the thin index entry."""

    id: str
    compact_boundary_uuid: str | None = None
    token_before: int = 0
    token_after: int = 0
    natural_summary: str = ""
    summary_items: tuple[CompactSummaryItem, ...] = ()
    evidence: tuple[EvidencePointer, ...] = ()
    tier: str = ""
    strategy: str = ""
    created_at: int = 0

    def to_dict(self) -> JSONObject:
        return {
            "schema_version": SCHEMA_VERSION,
            "id": self.id,
            "compactBoundaryUuid": self.compact_boundary_uuid,
            "tokenBefore": self.token_before,
            "tokenAfter": self.token_after,
            "naturalSummary": self.natural_summary,
            "summaryItems": [item.to_dict() for item in self.summary_items],
            "evidence": [p.to_dict() for p in self.evidence],
            "tier": self.tier,
            "strategy": self.strategy,
            "createdAt": self.created_at,
        }

    @classmethod
    def from_dict(cls, data: object) -> CompactBlock:
        d = _mapping(data, "compact block")
        items = d.get("summaryItems") or []
        evidence = d.get("evidence") or []
        if not isinstance(items, list) or not isinstance(evidence, list):
            raise EvidenceFormatError("summaryItems and evidence must be lists")
        return cls(
            id=_as_str(d.get("id"), "id", ""),
            compact_boundary_uuid=_as_opt_str(d.get("compactBoundaryUuid"), "compactBoundaryUuid"),
            token_before=_as_int(d.get("tokenBefore"), "tokenBefore", 0),
            token_after=_as_int(d.get("tokenAfter"), "tokenAfter", 0),
            natural_summary=_as_str(d.get("naturalSummary"), "naturalSummary", ""),
            summary_items=tuple(CompactSummaryItem.from_dict(i) for i in items),
            evidence=tuple(EvidencePointer.from_dict(p) for p in evidence),
            tier=_as_str(d.get("tier"), "tier", ""),
            strategy=_as_str(d.get("strategy"), "strategy", ""),
            created_at=_as_int(d.get("createdAt"), "createdAt", 0),
        )


__all__ = [
    "SCHEMA_VERSION",
    "CompactBlock",
    "CompactSummaryItem",
    "EvidenceFormatError",
    "EvidencePointer",
    "SourceScope",
]
