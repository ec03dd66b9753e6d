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


#: The lookahead is this many times the largest growth of the latest turns.
MARGIN = 1.5


class Lookahead:
    """What the next turn of a conversation is expected to add, in tokens: ``margin`` times
    the largest growth among its latest ``keep`` turns.

    The average foresaw too little too often in the gateway's load benchmark: a third of the
    compactions then ran on a request's path. With the largest growth alone it was about one
    in eight: with tool results of 2-10 KB, one turn in five grows more than the largest of
    the four before it. With 1.5 times that, it was 1 to 3 in 100, and the replayed
    trajectories compacted ahead cost the same (``python -m benchmarks.cost_curve``: a
    compaction ahead counts the lookahead as fixed, so it leaves the view a little smaller)."""

    def __init__(self, keep: int = 4, margin: float = MARGIN) -> None:
        self._keep = keep
        self._margin = margin
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
        return int(self._margin * max(self._growth, default=0))


__all__ = ["AHEAD_TIERS", "MARGIN", "Lookahead", "due"]
