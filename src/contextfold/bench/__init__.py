"""Replay benchmark: contextfold strategies side by side with baselines and emulated peers.

``contextfold bench`` (:func:`contextfold.bench.cli.main`) replays OpenAI-format trajectories
turn by turn and measures, with exact o200k tokens, what each strategy costs, what it keeps and
what it loses. See :mod:`contextfold.bench.replay` for the replay loop and
:mod:`contextfold.bench.metrics` for the definitions.
"""

from __future__ import annotations

from .metrics import TokenCounter, edited_files
from .replay import ReplayConfig, run_replay

__all__ = ["ReplayConfig", "TokenCounter", "edited_files", "run_replay"]
