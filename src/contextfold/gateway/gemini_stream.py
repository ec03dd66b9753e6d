"""Gemini ``streamGenerateContent`` chunks -> the model's whole answer, and the chunk
rewriting the gateway needs when it answered its own tools."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..jsontypes import JSON, JSONObject, as_list
from .gemini import field


def _is_text(part: Mapping[str, JSON]) -> bool:
    return (
        isinstance(part.get("text"), str)
        and field(part, "functionCall") is None
        and field(part, "functionResponse") is None
    )


def merge_parts(parts: Sequence[Mapping[str, JSON]]) -> list[JSON]:
    """Streamed parts as one turn: neighbouring text parts of one kind (thought or not) joined,
    as Gemini CLI keeps them in its history; the other fields of a joined part (a
    ``thoughtSignature``) kept."""
    out: list[JSON] = []
    prev: JSONObject | None = None  # out[-1]
    for part in parts:
        if (
            prev is not None
            and _is_text(prev)
            and _is_text(part)
            and bool(prev.get("thought")) == bool(part.get("thought"))
        ):
            joined = {**prev, **{k: v for k, v in part.items() if k not in prev}}
            joined["text"] = str(prev["text"]) + str(part["text"])
            prev = out[-1] = joined
        else:
            prev = dict(part)
            out.append(prev)
    return out


class GeminiAssembler:
    """``GenerateContentResponse`` chunks -> candidate 0's content, finish reason, usage."""

    def __init__(self) -> None:
        self.parts: list[JSONObject] = []
        self.finish_reason: str | None = None
        self.usage: JSONObject | None = None
        self.error: JSON = None
        self.response_id: str | None = None

    def add(self, obj: JSON) -> None:
        if not isinstance(obj, dict):
            return
        if "error" in obj:
            self.error = obj["error"]
        rid = field(obj, "responseId")
        if self.response_id is None and isinstance(rid, str):
            self.response_id = rid
        usage = field(obj, "usageMetadata")
        if isinstance(usage, dict):
            self.usage = usage
        for cand in as_list(obj.get("candidates")):
            if not isinstance(cand, dict) or cand.get("index", 0) != 0:
                continue
            reason = field(cand, "finishReason")
            if isinstance(reason, str) and reason:
                self.finish_reason = reason
            content = cand.get("content")
            parts = content.get("parts") if isinstance(content, dict) else None
            for part in as_list(parts):
                if isinstance(part, dict):
                    self.parts.append(part)

    def content(self) -> JSONObject:
        return {"role": "model", "parts": merge_parts(self.parts)}

    def call_names(self) -> list[str]:
        """The names of the function calls, in order."""
        out = []
        for part in self.parts:
            fc = field(part, "functionCall")
            if isinstance(fc, Mapping):
                out.append(str(fc.get("name", "")))
        return out


def has_calls(obj: JSON) -> bool:
    """Whether a chunk carries a function call."""
    if not isinstance(obj, dict):
        return False
    for cand in as_list(obj.get("candidates")):
        content = cand.get("content") if isinstance(cand, dict) else None
        parts = content.get("parts") if isinstance(content, dict) else None
        for part in as_list(parts):
            if isinstance(part, dict) and field(part, "functionCall") is not None:
                return True
    return False


def _ours(part: JSON, ours: tuple[str, ...]) -> bool:
    fc = field(part, "functionCall") if isinstance(part, dict) else None
    return isinstance(fc, dict) and fc.get("name") in ours


def without_calls(obj: Mapping[str, JSON], ours: tuple[str, ...]) -> JSONObject | None:
    """A chunk (an object) with the gateway's own function calls taken out (Gemini's
    ``finishReason`` is ``STOP`` with calls too: nothing else changes); None when nothing is
    left of it."""
    out = dict(obj)
    cands: list[JSON] = []
    for item in as_list(obj.get("candidates")):
        if not isinstance(item, dict):
            cands.append(item)
            continue
        cand = dict(item)
        content = cand.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        if isinstance(content, dict) and isinstance(parts, list):
            parts = [p for p in parts if not _ours(p, ours)]
            if not parts and not field(cand, "finishReason"):
                continue
            cand["content"] = {**content, "parts": parts}
        cands.append(cand)
    if not cands and obj.get("candidates"):
        return None  # its usage comes again on the last chunk
    out["candidates"] = cands
    return out


__all__ = ["GeminiAssembler", "has_calls", "merge_parts", "without_calls"]
