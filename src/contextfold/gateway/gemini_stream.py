"""Gemini ``streamGenerateContent`` chunks -> the model's whole answer, and the chunk
rewriting the gateway needs when it answered its own tools."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .gemini import field


def _is_text(part: Mapping[str, Any]) -> bool:
    return (
        isinstance(part.get("text"), str)
        and field(part, "functionCall") is None
        and field(part, "functionResponse") is None
    )


def merge_parts(parts: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Streamed parts as one turn: neighbouring text parts of one kind (thought or not) joined,
    as Gemini CLI keeps them in its history; the other fields of a joined part (a
    ``thoughtSignature``) kept."""
    out: list[dict[str, Any]] = []
    for part in parts:
        prev = out[-1] if out else None
        if (
            prev is not None
            and _is_text(prev)
            and _is_text(part)
            and bool(prev.get("thought")) == bool(part.get("thought"))
        ):
            joined = {**prev, **{k: v for k, v in part.items() if k not in prev}}
            joined["text"] = str(prev["text"]) + str(part["text"])
            out[-1] = joined
        else:
            out.append(dict(part))
    return out


class GeminiAssembler:
    """``GenerateContentResponse`` chunks -> candidate 0's content, finish reason, usage."""

    def __init__(self) -> None:
        self.parts: list[Mapping[str, Any]] = []
        self.finish_reason: str | None = None
        self.usage: Mapping[str, Any] | None = None
        self.error: Any = None
        self.response_id: str | None = None

    def add(self, obj: Any) -> None:
        if not isinstance(obj, Mapping):
            return
        if "error" in obj:
            self.error = obj["error"]
        rid = field(obj, "responseId")
        if self.response_id is None and isinstance(rid, str):
            self.response_id = rid
        usage = field(obj, "usageMetadata")
        if isinstance(usage, Mapping):
            self.usage = usage
        for cand in obj.get("candidates") or []:
            if not isinstance(cand, Mapping) or cand.get("index", 0) != 0:
                continue
            reason = field(cand, "finishReason")
            if isinstance(reason, str) and reason:
                self.finish_reason = reason
            content = cand.get("content")
            parts = content.get("parts") if isinstance(content, Mapping) else None
            for part in parts or []:
                if isinstance(part, Mapping):
                    self.parts.append(part)

    def content(self) -> dict[str, Any]:
        return {"role": "model", "parts": merge_parts(self.parts)}

    def call_names(self) -> list[str]:
        """The names of the function calls, in order."""
        out = []
        for part in self.parts:
            fc = field(part, "functionCall")
            if isinstance(fc, Mapping):
                out.append(str(fc.get("name", "")))
        return out


def has_calls(obj: Any) -> bool:
    """Whether a chunk carries a function call."""
    if not isinstance(obj, Mapping):
        return False
    for cand in obj.get("candidates") or []:
        content = cand.get("content") if isinstance(cand, Mapping) else None
        for part in (content or {}).get("parts") or []:
            if isinstance(part, Mapping) and field(part, "functionCall") is not None:
                return True
    return False


def without_calls(obj: Any, ours: tuple[str, ...]) -> Any:
    """A chunk with the gateway's own function calls taken out (Gemini's ``finishReason`` is
    ``STOP`` with calls too: nothing else changes); None when nothing is left of it."""
    if not isinstance(obj, Mapping):
        return obj
    out = dict(obj)
    cands = []
    for cand in obj.get("candidates") or []:
        if not isinstance(cand, Mapping):
            cands.append(cand)
            continue
        cand = dict(cand)
        content = cand.get("content")
        if isinstance(content, Mapping) and isinstance(content.get("parts"), list):
            parts = [
                p
                for p in content["parts"]
                if not (
                    isinstance(p, Mapping)
                    and isinstance(field(p, "functionCall"), Mapping)
                    and field(p, "functionCall").get("name") in ours
                )
            ]
            if not parts and not field(cand, "finishReason"):
                continue
            cand["content"] = {**content, "parts": parts}
        cands.append(cand)
    if not cands and obj.get("candidates"):
        return None  # its usage comes again on the last chunk
    out["candidates"] = cands
    return out


__all__ = ["GeminiAssembler", "has_calls", "merge_parts", "without_calls"]
