"""Recoverable compaction (seed 004): evidence that left the view can be found and restored.

* :mod:`.model`: CompactBlock, CompactSummaryItem, EvidencePointer (JSON, schema version 1)
* :mod:`.classify`: content types and anchors of a text
* :mod:`.store`: content-addressed bodies, ``compact-blocks.jsonl``, restore with sha256 check
* :mod:`.search`: BM25 + the seed's preferences, incremental
* :mod:`.intents`: which user messages ask for old evidence (English and Chinese)
* :mod:`.inject`: the ``<system-reminder>`` block, within a token budget, safely quoted
* :mod:`.tools`: the ``recall`` agent tool
"""

from .classify import CONTENT_TYPES, classify, extract_anchors, normalize_command
from .inject import build_injection
from .intents import Intent, detect_intent
from .model import (
    SCHEMA_VERSION,
    CompactBlock,
    CompactSummaryItem,
    EvidenceFormatError,
    EvidencePointer,
)
from .search import EvidenceSearch, Hit, tokenize
from .store import EvidenceStore, OffloadInfo, RestoredText
from .tools import recall_tool

__all__ = [
    "CONTENT_TYPES",
    "SCHEMA_VERSION",
    "CompactBlock",
    "CompactSummaryItem",
    "EvidenceFormatError",
    "EvidencePointer",
    "EvidenceSearch",
    "EvidenceStore",
    "Hit",
    "Intent",
    "OffloadInfo",
    "RestoredText",
    "build_injection",
    "classify",
    "detect_intent",
    "extract_anchors",
    "normalize_command",
    "recall_tool",
    "tokenize",
]
