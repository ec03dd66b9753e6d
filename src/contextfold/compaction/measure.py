"""What the tiers are computed on: the part of the window compaction can change.

A view is the fixed prefix (the leading system messages, the tool schemas, the answer's
reserve), which no compaction shortens, plus the messages. The tier ratios, the working window
and the target apply to what the window leaves after that prefix, so an agent with a large
system prompt and many tools (Claude Code sends about 26K tokens of them) compacts as rarely as
one without.
"""

from __future__ import annotations

from collections.abc import Callable

from ..core.config import TierConfig
from ..core.records import Tier
from ..core.view import HistoryView
from .common import determine_tier

_ORDER = (Tier.NONE, Tier.WARN, Tier.SOFT, Tier.FULL, Tier.EMERGENCY)


class Measure:
    """Measuring for :class:`~.progressive.ProgressiveCompactor` (a mixin over its view,
    window, configuration and calibration)."""

    view: HistoryView
    window: int
    cfg: TierConfig
    #: calibration of the messages after the fixed prefix, and of the leading system
    #: messages (None: the same as ``scale``); both take uncalibrated tokens
    scale: Callable[[int], int]
    scale_fixed: Callable[[int], int] | None = None
    #: Tokens of the fixed prefix at the latest run (see :meth:`measure_fixed`).
    fixed: int = 0

    def scaled(self, raw: int) -> int:
        """Calibrated tokens of a view of ``raw`` uncalibrated tokens that starts with this
        view's leading system messages (they are calibrated apart, with the tool schemas)."""
        v = self.view
        prefix = v.range_tokens(0, v.prefix_len) if v.prefix_len else 0
        if self.scale_fixed is None or not prefix:
            return self.scale(raw)
        return self.scale(max(0, raw - prefix)) + self.scale_fixed(prefix)

    def view_tokens(self, extra: int = 0) -> int:
        return self.scaled(self.view.view_tokens()) + extra

    def fixed_tokens(self, extra: int = 0) -> int:
        """The fixed prefix no compaction can shorten: the leading system messages (as shown)
        plus ``extra`` (tool schemas, the answer's reserve)."""
        v = self.view
        prefix = v.range_tokens(0, v.prefix_len)
        return (self.scale_fixed or self.scale)(prefix) + extra

    def measure_fixed(self, extra: int = 0) -> None:
        """Remember the fixed prefix of this run: the tiers, the working window and the target
        are computed on what the window leaves after it (:attr:`room`)."""
        self.fixed = self.fixed_tokens(extra)

    @property
    def room(self) -> int:
        """The part of the window compaction can change: the window minus the fixed prefix
        (system prompt, tool schemas, reserve), at least a tenth of the window; the whole
        window with ``ratio_of="window"``."""
        if self.cfg.ratio_of == "window":
            return max(self.window, 1)
        return max(self.window // 10, self.window - self.fixed, 1)

    def tier_for(self, tokens: int) -> Tier:
        """The tier of a view of ``tokens`` (fixed prefix included): the ratios are of the
        part of the window compaction can change, so a large system prompt and many tool
        schemas do not make every turn compact."""
        if self.window <= 0:
            return Tier.NONE
        if self.cfg.ratio_of == "window":
            return determine_tier(tokens / self.window, self.cfg)
        movable = max(0, tokens - self.fixed)
        tier = determine_tier(movable / self.room, self.cfg)
        if self.working_window < self.room:
            # a smaller working window compacts earlier, never down to the emergency tier
            working = determine_tier(movable / self.working_window, self.cfg)
            if working is Tier.EMERGENCY:
                working = Tier.FULL
            if _ORDER.index(working) > _ORDER.index(tier):
                tier = working
        if tokens > self.cfg.emergency_threshold * self.window:
            tier = Tier.EMERGENCY  # the window itself bounds every view
        return tier

    @property
    def working_window(self) -> int:
        """The tokens the tiers and the target are computed on: the part of the window
        compaction can change (:attr:`room`), or the configured ``working_window`` when
        smaller (compact earlier to pay less per call)."""
        ww = self.cfg.working_window
        return min(self.room, ww) if ww else self.room

    def _warn_falls_short(self, extra: int) -> bool:
        """True when the Warn offload left the messages above the middle of the target and
        the warn line: it bought too few turns for its cache miss."""
        movable = self.view_tokens(extra) - self.fixed
        middle = (self.cfg.target_ratio + self.cfg.warn_threshold) / 2
        return movable > middle * self.working_window

    @property
    def target_tokens(self) -> int:
        """The view after a Soft/Full/Emergency compaction: the fixed prefix plus
        ``target_ratio`` of the working window."""
        if self.cfg.ratio_of == "window":
            return int(self.cfg.target_ratio * self.window)
        return self.fixed + int(self.cfg.target_ratio * self.working_window)


__all__ = ["Measure"]
