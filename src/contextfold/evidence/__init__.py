"""Recoverable compaction: evidence that left the view can be found and restored.

* :mod:`.model`: CompactBlock, CompactSummaryItem, EvidencePointer (JSON, schema version 2)
* :mod:`.classify`: content types and anchors of a text
* :mod:`.fields`: what a tool call was about (paths, patterns, URLs, action, line range), for
  shell and file tools alike; the named fields a search backend indexes
* :mod:`.rank`: reading a recall question (paths, ordinals in English and Chinese) and ordering
  the candidates (match level, ordinal, recency), as pure functions
* :mod:`.store`: content-addressed bodies, the blocks (evidence events), restore with sha256
  check
* :mod:`.keys`: the exact keys of each evidence document and what ranking reads of it, stored
  with the block next to the BM25 index; :mod:`.lookups`: the per-session index state, the
  one-time backfill of sessions written before keys existed
* :mod:`.search`, :mod:`.question`: candidate retrieval (the store's BM25 and exact lookups of
  what a question names, nothing built on open) and ranking
* :mod:`.semantic`, :mod:`.embed`: optional semantic retrieval (the ``semantic`` extra): a
  vector per output written with its block, the kind of output read from a question's
  meaning when its words do not say it; nothing imported without the extra
* :mod:`.intents`: which user messages ask for old evidence (English and Chinese)
* :mod:`.inject`: the ``<system-reminder>`` block, within a token budget, safely quoted
* :mod:`.tools`: the ``recall`` agent tool
"""

from .classify import CONTENT_TYPES, classify, extract_anchors, normalize_command
from .fields import OWN_TOOLS, CallFields, call_fields, evidence_fields, is_own_tool
from .inject import build_injection
from .intents import Intent, detect_intent
from .model import (
    SCHEMA_VERSION,
    CompactBlock,
    CompactSummaryItem,
    EvidenceFormatError,
    EvidencePointer,
)
from .rank import CallLog, parse_ordinal, parse_query, rerank
from .search import EvidenceSearch, Hit, tokenize
from .store import EvidenceStore, OffloadInfo, RestoredText
from .tools import recall_tool

__all__ = [
    "CONTENT_TYPES",
    "OWN_TOOLS",
    "SCHEMA_VERSION",
    "CallFields",
    "CallLog",
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
    "call_fields",
    "classify",
    "detect_intent",
    "evidence_fields",
    "extract_anchors",
    "is_own_tool",
    "normalize_command",
    "parse_ordinal",
    "parse_query",
    "recall_tool",
    "rerank",
    "tokenize",
]
