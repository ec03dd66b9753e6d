"""Shared pieces of the view compactors: tier choice, state, the per-run scratch record,
and the four-section compaction message."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone

from ..core.anchors import Anchor, AnchorType
from ..core.config import SummaryTriggerConfig, TierConfig
from ..core.messages import Message
from ..core.records import OffloadEntry, Tier
from .offload import OffloadPolicy

EMERGENCY_POLICY = OffloadPolicy(name="emergency", threshold=1_000)
COMPACTION_KIND = "compaction"


def determine_tier(ratio: float, cfg: TierConfig) -> Tier:
    """The tier of a window ratio (None / Warn / Soft / Full / Emergency)."""
    if ratio >= cfg.emergency_threshold:
        return Tier.EMERGENCY
    if ratio >= cfg.full_threshold:
        return Tier.FULL
    if ratio >= cfg.soft_threshold:
        return Tier.SOFT
    if ratio >= cfg.warn_threshold:
        return Tier.WARN
    return Tier.NONE


@dataclass(kw_only=True)
class CompactorState:
    """What survives a restart besides the history (the last summary and anchors)."""

    last_summary: str = ""
    last_anchors: tuple[Anchor, ...] = ()
    compaction_text: str = ""
    boundary_uuid: str | None = None
    compactions: int = 0
    offload_policies: dict[str, str] = field(default_factory=dict)
    #: ARTIFACTS of the four-section summaries, merged across rounds.
    last_artifacts: tuple[str, ...] = ()


#: Called before messages leave the view (memory flush); fail-open.
BeforeSummarize = Callable[[Sequence[Message]], None]
#: Called after a range left the view; returns "recall" lines for the compaction message.
IndexRange = Callable[
    [Sequence[Message], Sequence[OffloadEntry], Sequence[Anchor], str, Tier], list[str]
]


def effective_trigger_tokens(trig: SummaryTriggerConfig, window: int) -> int:
    """triggerTokens, capped at 75% of a smaller window so the trigger fires before overflow."""
    if not trig.trigger_tokens:
        return 0
    return min(trig.trigger_tokens, int(window * 0.75)) if window > 0 else trig.trigger_tokens


def render_sections_message(
    anchors: Sequence[Anchor],
    summary: str,
    artifacts: Sequence[str],
    *,
    offloaded: Sequence[tuple[str, str]] = (),
    active_tasks: Sequence[str] = (),
    recall: Sequence[str] = (),
    note: str | None = None,
) -> str:
    """The four-section compaction message (SESSION INTENT / SUMMARY / ARTIFACTS /
    NEXT STEPS), with the same optional sections as the anchors format."""
    by_type = {a.type: a for a in anchors}

    def body(kind: AnchorType) -> str:
        a = by_type.get(kind)
        return a.content.strip() if a is not None and not a.is_empty else "N/A"

    parts = [
        "[Context Compaction]",
        "## SESSION INTENT\n" + body(AnchorType.USER_INTENT),
        "## SUMMARY\n" + (summary.strip() or "N/A"),
        "## ARTIFACTS\n" + ("\n".join(f"- {a}" for a in artifacts) if artifacts else "N/A"),
        "## NEXT STEPS\n" + body(AnchorType.NEXT_STEP),
    ]
    if offloaded:
        parts.append("## Offloaded References\n" + "\n".join(f"- {p} - {d}" for p, d in offloaded))
    if active_tasks:
        parts.append("## Active Tasks\n" + "\n".join(active_tasks))
    if recall:
        parts.append(
            "## Recallable Evidence\n"
            + "\n".join(f"- {r}" for r in recall)
            + "\nCall the `recall` tool with a query or an evidence id to get the exact text."
        )
    if note:
        parts.append("---\n" + note)
    return "\n\n".join(parts)


def calls_json(msg: Message) -> str:
    """The tool calls of a message as JSON (what an arguments offload stores)."""
    return json.dumps(
        [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in msg.tool_calls],
        ensure_ascii=False,
    )


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


@dataclass(kw_only=True)
class _Run:
    tier: Tier
    tokens_before: int
    msgs_before: int
    started: float
    reason: str
    forced: bool = False
    strategy: str = "progressive"
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    offloaded: list[OffloadEntry] = field(default_factory=list)
    #: previews of outputs offloaded before that a stale batch shortened
    briefed: int = 0
    summarized: int = 0
    summary_text: str = ""
    anchors: tuple[Anchor, ...] = ()
    summarizer_name: str = ""
    summarizer_in: int = 0
    summarizer_out: int = 0


_EARLIER = re.compile(r"^\(\+(\d+) earlier")
_LIST_TYPES = (AnchorType.EXECUTION_PROGRESS, AnchorType.KEY_DECISION, AnchorType.TRIED_SOLUTION)


def bound_anchors(anchors: Sequence[Anchor], max_items: int) -> tuple[Anchor, ...]:
    """Keep the newest ``max_items`` items of each list anchor, folding the rest into one
    "(+N earlier items ...)" line (they stay in the earlier CompactionRecords)."""
    out: list[Anchor] = []
    for a in anchors:
        if a.type not in _LIST_TYPES or a.is_empty:
            out.append(a)
            continue
        earlier = 0
        items: list[str] = []
        for item in a.items():
            m = _EARLIER.match(item)
            if m:
                earlier += int(m.group(1))
            else:
                items.append(item)
        if len(items) > max_items:
            earlier += len(items) - max_items
            items = items[len(items) - max_items :]
        if earlier:
            items.insert(0, f"(+{earlier} earlier items, kept in the compaction records)")
        out.append(Anchor(type=a.type, content="\n".join(f"- {i}" for i in items)))
    return tuple(out)


def clip_text(text: str, max_chars: int) -> str:
    """Head and tail of ``text`` within ``max_chars`` characters."""
    if len(text) <= max_chars:
        return text
    keep = max(0, max_chars - 40)
    head = keep * 2 // 3
    return (
        text[:head]
        + f"\n... [{len(text) - keep} characters cut] ...\n"
        + text[len(text) - (keep - head) :]
    )
