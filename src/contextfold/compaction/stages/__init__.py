"""Compaction stages: each step of a compaction run in its own module, and the protocol
(:class:`Stage`) a stage of your own implements."""

from .base import Changes, CompactionRun, Stage
from .emergency import EmergencyStage
from .pinned import PinnedStage
from .stale import StaleOffloadStage
from .summarize import SummarizeStage
from .tiers import TierStage, WarnStage
from .trigger import TriggerStage

__all__ = [
    "Changes",
    "CompactionRun",
    "EmergencyStage",
    "PinnedStage",
    "Stage",
    "StaleOffloadStage",
    "SummarizeStage",
    "TierStage",
    "TriggerStage",
    "WarnStage",
]
