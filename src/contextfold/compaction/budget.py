"""TokenBudgetCompactor: the no-LLM fallback, and orphan repair.

Works on a plain message list: keeps the leading system messages, the first and the newest user
message, and as many of the newest messages as fit the budget, cutting only where no tool call
is separated from its result. :func:`repair_orphaned_tool_pairs` makes any list valid for a
provider: results without their call and calls without their result are removed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from ..core.messages import Message


def repair_orphaned_tool_pairs(msgs: Sequence[Message]) -> list[Message]:
    """Drop tool results whose call is absent and strip calls whose result is absent."""
    calls: dict[str, int] = {}
    for i, m in enumerate(msgs):
        for c in m.tool_calls:
            calls[c.id] = i
    # a result is valid if its call appears earlier, in the nearest assistant before it
    answered: set[str] = set()
    keep: list[bool] = [True] * len(msgs)
    owner: int | None = None
    for i, m in enumerate(msgs):
        if m.role == "tool":
            cid = m.tool_call_id or ""
            if owner is None or calls.get(cid) != owner or cid in answered:
                keep[i] = False
            else:
                answered.add(cid)
        else:
            owner = i if m.tool_calls else None
    out: list[Message] = []
    for i, m in enumerate(msgs):
        if not keep[i]:
            continue
        if m.tool_calls and any(c.id not in answered for c in m.tool_calls):
            kept = tuple(c for c in m.tool_calls if c.id in answered)
            if not kept and not m.text.strip():
                continue  # nothing left of that turn: an empty assistant message is invalid
            m = replace(m, tool_calls=kept)
        out.append(m)
    return out


class TokenBudgetCompactor:
    """Keep the newest messages within ``max_tokens`` (plus the pinned ones)."""

    def __init__(self, max_tokens: int, count: Callable[[Message], int]) -> None:
        self.max_tokens = max_tokens
        self._count = count

    def compact(self, msgs: Sequence[Message]) -> list[Message]:
        msgs = repair_orphaned_tool_pairs(msgs)
        prefix = 0
        while prefix < len(msgs) and msgs[prefix].role in ("system", "developer"):
            prefix += 1
        users = [i for i in range(prefix, len(msgs)) if msgs[i].role == "user"]
        pinned = {users[0], users[-1]} if users else set()
        budget = self.max_tokens - sum(self._count(m) for m in msgs[:prefix])
        budget -= sum(self._count(msgs[i]) for i in pinned)
        start = len(msgs)
        used = 0
        i = len(msgs) - 1
        while i >= prefix:
            # walk back one atom: tool results plus their assistant message
            j = i
            while j > prefix and msgs[j].role == "tool":
                j -= 1
            cost = sum(self._count(msgs[k]) for k in range(j, i + 1) if k not in pinned)
            if used + cost > budget and start < len(msgs):
                break
            if used + cost > budget:
                break
            used += cost
            start = j
            i = j - 1
        head = list(msgs[:prefix]) + [msgs[k] for k in sorted(pinned) if k < start]
        return head + list(msgs[start:])

    def compact_force(self, msgs: Sequence[Message]) -> list[Message]:
        return self.compact(msgs)
