"""Repairing a Gemini request the API would refuse: Gemini CLI's ``--resume`` sends every
tool result twice (:func:`drop_repeated_responses`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .gemini import _canonical, field


def _count(content: Any, kind: str) -> int:
    parts = content.get("parts") if isinstance(content, Mapping) else None
    if not isinstance(parts, list):
        return 0
    return sum(1 for p in parts if isinstance(p, Mapping) and field(p, kind) is not None)


def _may_repeat(contents: list[Any]) -> bool:
    """Whether some model turn is followed by more responses than it has calls (cheap: no
    response is serialized)."""
    calls = answers = 0
    for content in contents:
        if isinstance(content, Mapping) and content.get("role") == "model":
            if answers > calls:
                return True
            calls, answers = _count(content, "functionCall"), 0
        else:
            answers += _count(content, "functionResponse")
    return answers > calls


def drop_repeated_responses(contents: list[Any]) -> tuple[list[Any], int]:
    """The contents without ``functionResponse`` parts that repeat, exactly, a response given
    earlier to the same model turn; and how many were dropped.

    Gemini CLI's ``--resume`` sends every tool result twice (once rebuilt from its record of
    the call, once from the recorded user turn), and Gemini answers such a request with a 400.
    The gateway repairs it: a repeat carries nothing the first copy does not (same call id,
    name and response), so dropping it loses nothing and the conversation goes on. A second,
    *different* answer to the same call is not repaired: it is passed on, and the request gets
    Gemini's own 400.
    """
    if not _may_repeat(contents):
        return contents, 0
    out: list[Any] = []
    seen: set[str] = set()
    dropped = 0
    for content in contents:
        if not isinstance(content, Mapping) or not isinstance(content.get("parts"), list):
            out.append(content)
            continue
        if content.get("role") == "model":
            seen = set()
            out.append(content)
            continue
        kept = []
        for part in content["parts"]:
            fr = field(part, "functionResponse") if isinstance(part, Mapping) else None
            if isinstance(fr, Mapping):
                key = _canonical(fr)
                if key in seen:
                    dropped += 1
                    continue
                seen.add(key)
            kept.append(part)
        if len(kept) == len(content["parts"]):
            out.append(content)
        elif kept:
            out.append({**content, "parts": kept})
    return out, dropped


__all__ = ["drop_repeated_responses"]
