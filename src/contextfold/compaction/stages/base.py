"""The stage protocol: one step of a compaction run.

A compaction run (one :class:`~contextfold.core.records.CompactionRecord`) is a list of stages
applied in order to a :class:`CompactionRun`. Each stage reads the run (the tier decided so
far, whether it was forced, the view through :attr:`CompactionRun.compactor`), changes the
view or not, and returns what it changed (:class:`Changes`). A stage may end the run early
(:meth:`CompactionRun.finish`) or call it off (:meth:`CompactionRun.skip`: no record at all).
Stages never raise into the agent loop: a failure is appended to :attr:`CompactionRun.errors`
and the view is left as it was (fail-open).

Write your own by implementing :class:`Stage` (a ``name`` and ``apply``) and pass the list to
``ContextManager(stages=[...])``, e.g. ``[*progressive_stages(), MyStage()]``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ...core.anchors import Anchor
from ...core.records import OffloadEntry, Tier
from ..common import _Run

if TYPE_CHECKING:  # the compactor is the toolkit a run works with (same folder)
    from ..progressive import ProgressiveCompactor


@dataclass(frozen=True, kw_only=True, slots=True)
class Changes:
    """What one stage changed in the view."""

    offloaded: int = 0
    summarized: int = 0
    errors: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.offloaded or self.summarized)

    def __add__(self, other: Changes) -> Changes:
        return Changes(
            offloaded=self.offloaded + other.offloaded,
            summarized=self.summarized + other.summarized,
            errors=self.errors + other.errors,
        )


class CompactionRun:
    """One run of a compaction pipeline: what the stages share until the record is made."""

    def __init__(
        self,
        compactor: ProgressiveCompactor,
        *,
        extra_tokens: int = 0,
        force: Tier | None = None,
        reason: str = "",
    ) -> None:
        #: the compactor whose view, offload store, summarizer and measures the stages use
        self.compactor = compactor
        #: tokens added to the view by the call (tool schemas, the reserve for the answer)
        self.extra_tokens = extra_tokens
        #: the tier the caller forced (manual /compact, the safety net), or None
        self.force = force
        self.scratch = _Run(
            tier=force or Tier.NONE,
            tokens_before=compactor.view_tokens(extra_tokens),
            msgs_before=len(compactor.view.view_messages()),
            started=time.perf_counter(),
            reason=reason,
            forced=force is not None,
        )
        #: stale outputs the first stale stage offloaded (then a Warn run may be only that)
        self.stale = 0
        #: whether the stale offload is all this run does (the tier was None before it)
        self.stale_only = False
        #: pinned messages shortened by the pinned stage
        self.shortened = 0
        #: set by :meth:`finish`: store the record whether or not the view changed
        self.persist: bool | None = None
        self.finished = False
        self.skipped = False

    # ---- what the stages read and set
    @property
    def tier(self) -> Tier:
        return self.scratch.tier

    @tier.setter
    def tier(self, tier: Tier) -> None:
        self.scratch.tier = tier

    @property
    def forced(self) -> bool:
        return self.scratch.forced

    @property
    def reason(self) -> str:
        return self.scratch.reason

    @reason.setter
    def reason(self, text: str) -> None:
        self.scratch.reason = text

    @property
    def strategy(self) -> str:
        return self.scratch.strategy

    @strategy.setter
    def strategy(self, name: str) -> None:
        self.scratch.strategy = name

    @property
    def notes(self) -> list[str]:
        return self.scratch.notes

    @property
    def errors(self) -> list[str]:
        return self.scratch.errors

    @property
    def offloaded(self) -> list[OffloadEntry]:
        return self.scratch.offloaded

    @property
    def anchors(self) -> tuple[Anchor, ...]:
        return self.scratch.anchors

    def view_tokens(self) -> int:
        """The view's tokens now (calibrated), with the call's extra tokens."""
        return self.compactor.view_tokens(self.extra_tokens)

    def finish(self, *, persist: bool | None = None) -> None:
        """End the run after this stage (the record is made from what was done)."""
        self.finished = True
        if persist is not None:
            self.persist = persist

    def skip(self) -> None:
        """Call the run off: no record (e.g. a trigger that did not fire)."""
        self.skipped = True
        self.finished = True

    # ---- what changed
    def mark(self) -> tuple[int, int, int]:
        s = self.scratch
        return len(s.offloaded), s.summarized, len(s.errors)

    def changes_since(self, mark: tuple[int, int, int]) -> Changes:
        offloaded, summarized, errors = self.mark()
        return Changes(
            offloaded=offloaded - mark[0],
            summarized=summarized - mark[1],
            errors=errors - mark[2],
        )


@runtime_checkable
class Stage(Protocol):
    """One step of a compaction run."""

    #: a short name (telemetry, the record's notes)
    name: str

    def apply(self, run: CompactionRun) -> Changes:
        """Change the run's view (or not) and say what changed."""
        ...


__all__ = ["Changes", "CompactionRun", "Stage"]
