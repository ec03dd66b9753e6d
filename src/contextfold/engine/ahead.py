"""Compaction prepared ahead: between an answer and the next request (while the agent runs the
tool it asked for) the view is compacted when the next turn is expected to need it, so that
request finds its view ready instead of paying for the compaction on its way to the model.

The decision is the one :meth:`ContextManager.prepare` makes, taken on the view as it is now
plus ``lookahead`` tokens (what the next turn is expected to add). A compaction never changes
the history, only the view; when the next request turns out not to be the expected continuation
(a longer tool result than foreseen, a rewrite) its ``prepare()`` decides again on what it
has, as it always does."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..compaction.common import effective_trigger_tokens
from ..core.records import Tier

if TYPE_CHECKING:
    from ..compaction.progressive import ProgressiveCompactor
    from ..core.config import ContextConfig

#: the tiers worth preparing ahead: an emergency (a view over the window) is left to the
#: request, which knows what the next turn really added
AHEAD_TIERS = frozenset({Tier.WARN, Tier.SOFT, Tier.FULL})


def due(comp: ProgressiveCompactor, config: ContextConfig, extra: int) -> bool:
    """Whether ``prepare()`` would compact a view that had ``extra`` more tokens (the fixed
    extras and the lookahead): a summary trigger that fires, or a Warn/Soft/Full tier."""
    comp.measure_fixed(extra)
    tokens = comp.view_tokens(extra)
    if tokens > comp.window:
        return False
    trig = config.summary
    if trig is not None:
        count = len(comp.view.view_messages())
        limit = effective_trigger_tokens(trig, comp.window)
        if (trig.trigger_messages and count >= trig.trigger_messages) or (
            limit and tokens >= limit
        ):
            return True
    if config.tiers is None:
        return False
    return comp.tier_for(tokens) in AHEAD_TIERS


class Lookahead:
    """What the next turn of a conversation is expected to add, in tokens: the largest growth
    among its latest turns. (The average foresaw too little too often in the benchmark: a
    third of the compactions then ran on a request's path instead of a sixth; the largest
    compacts a little earlier, as the lookahead counts as fixed while compacting.)"""

    def __init__(self, keep: int = 4) -> None:
        self._keep = keep
        self._growth: list[int] = []
        self._last = -1

    def note(self, history_tokens: int) -> None:
        """The conversation's tokens at a request (growth is measured between requests)."""
        if self._last >= 0 and history_tokens > self._last:
            self._growth.append(history_tokens - self._last)
            del self._growth[: -self._keep]
        self._last = history_tokens

    @property
    def tokens(self) -> int:
        return max(self._growth, default=0)


__all__ = ["AHEAD_TIERS", "Lookahead", "due"]
