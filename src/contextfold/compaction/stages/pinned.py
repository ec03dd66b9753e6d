"""The pinned stage: pinned messages (system prompt, first and newest user request) over
their share of the window are shortened to head and tail, their full text offloaded."""

from __future__ import annotations

from ..pinned import reduce_pinned
from .base import Changes, CompactionRun


class PinnedStage:
    name = "pinned"

    def apply(self, run: CompactionRun) -> Changes:
        comp = run.compactor
        mark = run.mark()
        ratio = comp.cfg.pinned_max_ratio
        shortened = reduce_pinned(
            comp, None, above=int(ratio * comp.window), budget=comp.pinned_budget, errors=run.errors
        )
        for entry in shortened:
            run.offloaded.append(entry)
            run.notes.append(
                f"pinned message of {entry.chars} characters is over {ratio:.0%} of the window: "
                f"shortened to head and tail, full text in {entry.path}"
            )
        run.shortened += len(shortened)
        comp.measure_fixed(run.extra_tokens)  # the fixed prefix as it is now
        return run.changes_since(mark)


__all__ = ["PinnedStage"]
