"""Repairing a Gemini request the API would refuse: Gemini CLI's ``--resume`` sends every
tool result twice (:func:`drop_repeated_responses`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..jsontypes import JSON
from .gemini import _canonical, field


def _count(content: JSON, kind: str) -> int:
    parts = content.get("parts") if isinstance(content, Mapping) else None
    if not isinstance(parts, list):
        return 0
    return sum(1 for p in parts if isinstance(p, Mapping) and field(p, kind) is not None)


def _may_repeat(contents: list[JSON]) -> bool:
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


#: how Gemini CLI shows a tool output it masked (saved to a file of its own, a random name)
MASKED = "<tool_output_masked>"


def _masked(fr: Mapping[str, JSON]) -> bool:
    response = field(fr, "response")
    output = response.get("output") if isinstance(response, Mapping) else None
    return isinstance(output, str) and output.startswith(MASKED)


@dataclass(slots=True)
class _First:
    """The first response kept of a call: the kept parts it is in, its index there, and
    whether it is masked."""

    kept: list[JSON]
    index: int
    masked: bool


class _Turn:
    """The responses of one user turn (or the run of them after one model turn) kept so far."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        #: (call id, name) -> its first response kept
        self.by_call: dict[tuple[str, str], _First] = {}

    def keep(self, part: JSON, kept: list[JSON]) -> bool:
        """Add ``part`` to ``kept`` unless it repeats a response kept before; False: dropped."""
        fr = field(part, "functionResponse") if isinstance(part, Mapping) else None
        if not isinstance(fr, Mapping):
            kept.append(part)
            return True
        key = _canonical(fr)
        if key in self.seen:
            return False
        self.seen.add(key)
        call = (str(field(fr, "id") or ""), str(field(fr, "name") or ""))
        first = self.by_call.get(call) if call[0] else None
        masked = _masked(fr)
        if first is not None and (masked or first.masked):
            # the same result, masked by Gemini CLI under another file name: the unmasked
            # copy (or the first masked one) stays
            if first.masked and not masked and first.kept is kept:
                kept[first.index] = part
                first.masked = False
            return False
        self.by_call[call] = _First(kept, len(kept), masked)
        kept.append(part)
        return True


def drop_repeated_responses(contents: list[JSON]) -> tuple[list[JSON], int]:
    """The contents without ``functionResponse`` parts that repeat a response given earlier
    to the same model turn; and how many were dropped.

    Gemini CLI's ``--resume`` sends every tool result twice (once rebuilt from its record of
    the call, once from the recorded user turn), and Gemini answers such a request with a 400.
    The gateway repairs it: a repeat carries nothing the first copy does not (same call id,
    name and response), so dropping it loses nothing and the conversation goes on. Gemini
    CLI masks large old outputs (``<tool_output_masked>``, the output saved to a file with a
    random name), and each of the two copies gets its own file name: two responses of the
    same call id and name of which one is masked are the same result too, and the unmasked
    one is kept. A second, *different* answer to the same call (neither masked) is not
    repaired: it is passed on, and the request gets Gemini's own 400.
    """
    if not _may_repeat(contents):
        return contents, 0
    out: list[JSON] = []
    turn = _Turn()
    dropped = 0
    for content in contents:
        parts = content.get("parts") if isinstance(content, Mapping) else None
        if not isinstance(content, Mapping) or not isinstance(parts, list):
            out.append(content)
            continue
        if content.get("role") == "model":
            turn = _Turn()
            out.append(content)
            continue
        kept: list[JSON] = []
        for part in parts:
            if not turn.keep(part, kept):
                dropped += 1
        if len(kept) == len(parts) and all(a is b for a, b in zip(kept, parts, strict=True)):
            out.append(content)
        elif kept:
            out.append({**content, "parts": kept})
    return out, dropped


__all__ = ["MASKED", "drop_repeated_responses"]
