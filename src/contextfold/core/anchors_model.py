"""The five anchors of a structured summary (the data of :mod:`contextfold.core.anchors`)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class AnchorType(str, Enum):
    USER_INTENT = "user_intent"
    EXECUTION_PROGRESS = "execution_progress"
    KEY_DECISION = "key_decision"
    TRIED_SOLUTION = "tried_solution"
    NEXT_STEP = "next_step"


ALL_ANCHOR_TYPES: tuple[AnchorType, ...] = tuple(AnchorType)

ANCHOR_HEADERS: dict[AnchorType, str] = {
    AnchorType.USER_INTENT: "User Intent",
    AnchorType.EXECUTION_PROGRESS: "Execution Progress",
    AnchorType.KEY_DECISION: "Key Decisions",
    AnchorType.TRIED_SOLUTION: "Tried Solutions",
    AnchorType.NEXT_STEP: "Next Steps",
}

NA = "N/A"


@dataclass(frozen=True, kw_only=True, slots=True)
class Anchor:
    type: AnchorType
    #: The section body: one item per line ("- item"), or "N/A".
    content: str = NA

    @property
    def is_empty(self) -> bool:
        return self.content.strip() in ("", NA, "- N/A")

    def items(self) -> list[str]:
        """The section's items, without bullets; empty for N/A."""
        if self.is_empty:
            return []
        out = []
        for line in self.content.splitlines():
            s = line.strip()
            if s.startswith(("- ", "* ")):
                s = s[2:].strip()
            if s and s not in (NA, "- N/A"):
                out.append(s)
        return out
