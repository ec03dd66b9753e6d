"""Long-term memory: flush facts before compaction (seed 002, section 3.1).

Before messages leave the view, facts (requirements, configuration, file changes, conclusions,
constraints) are extracted and written to ``<ws>/memory/MEMORY.md`` (an index, one line per
fact with a link to its topic file) and ``<ws>/memory/<topic>.md``. Writing is incremental and
never duplicates a fact: each fact line carries a hash of its normalized text, and the set of
known hashes is recovered by parsing the topic files, so the Markdown files are the only state.

Extraction is extractive (deterministic, no LLM) by default; :class:`LLMFactExtractor` asks a
chat model for JSON lines and falls back to the extractive one when that fails.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import StorageError, ToolArgumentsError, UnsafeIdError
from .memory_extract import FACT_PROMPT as FACT_PROMPT
from .memory_extract import (
    KINDS,
    TOPIC_OF_KIND,
    ExtractiveFactExtractor,
    Fact,
    FactExtractor,
    LLMFactExtractor,
    clean_fact,
    fact_hash,
    parse_fact_lines,
)
from .memory_extract import MAX_FACT_CHARS as MAX_FACT_CHARS
from .memory_extract import ChatModelLike as ChatModelLike
from .memory_extract import normalize as normalize
from .paths import Workspace, confined, safe_name
from .tools import Tool

INDEX_NAME = "MEMORY.md"


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryHit:
    topic: str
    kind: str
    text: str
    score: float
    #: The topic file, relative to the memory folder (e.g. ``files.md``).
    path: str


# --------------------------------------------------------------------------- store

_FACT_LINE = re.compile(
    r"^- \((?P<kind>[a-z_]+)\) (?P<text>.*?) <!-- cf:(?P<h>[0-9a-f]+)(?: [^>]*)? -->$"
)
_TOKEN = re.compile(r"[a-z0-9_]+|[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


def _terms(text: str) -> list[str]:
    toks = _TOKEN.findall(text.lower())
    out = [t for t in toks if len(t) > 1 or not t.isascii()]
    # CJK bigrams make multi-character words rank above scattered single characters
    cjk = [t for t in toks if not t.isascii()]
    out.extend(a + b for a, b in itertools.pairwise(cjk))
    return out


class MemoryStore:
    """``<ws>/memory/``: MEMORY.md (index) plus one Markdown file per topic."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self.dir = workspace.memory_dir
        self._lock = threading.Lock()
        self._hashes: set[str] | None = None

    @property
    def index_path(self) -> Path:
        return self.dir / INDEX_NAME

    def topic_file(self, topic: str) -> str:
        name = safe_name(topic.strip().lower().replace(" ", "-") or "misc", what="topic")
        return "topics.md" if name.upper() == "MEMORY" else f"{name}.md"

    def _load_facts(self) -> list[tuple[str, str, str, str]]:
        """(topic file, kind, text, hash) of every stored fact."""
        out: list[tuple[str, str, str, str]] = []
        if not self.dir.is_dir():
            return out
        for path in sorted(self.dir.glob("*.md")):
            if path.name == INDEX_NAME:
                continue
            try:
                lines = path.read_text(encoding="utf-8").splitlines()
            except OSError as exc:
                raise StorageError(f"cannot read {path}: {exc}") from exc
            for line in lines:
                m = _FACT_LINE.match(line)
                if m:
                    out.append((path.name, m.group("kind"), m.group("text"), m.group("h")))
        return out

    def flush(self, facts: Sequence[Fact]) -> int:
        """Write the facts not stored yet; returns how many were new."""
        with self._lock:
            if self._hashes is None:
                self._hashes = {h for *_, h in self._load_facts()}
            by_file: dict[str, list[str]] = {}
            titles: dict[str, str] = {}
            index_lines: list[str] = []
            for fact in facts:
                text = clean_fact(fact.text)
                if not text:
                    continue
                h = fact_hash(text)
                if h in self._hashes:
                    continue
                self._hashes.add(h)
                kind = fact.kind if fact.kind in KINDS else "conclusion"
                fname = self.topic_file(fact.topic or TOPIC_OF_KIND[kind])
                titles.setdefault(fname, fact.topic or TOPIC_OF_KIND[kind])
                src = f" src:{safe_name(fact.source_uuid)}" if fact.source_uuid else ""
                by_file.setdefault(fname, []).append(f"- ({kind}) {text} <!-- cf:{h}{src} -->")
                index_lines.append(f"- [{titles[fname]}]({fname}) ({kind}) {text}")
            if not index_lines:
                return 0
            try:
                self.dir.mkdir(parents=True, exist_ok=True)
                for fname, lines in by_file.items():
                    path = self.dir / fname
                    head = "" if path.exists() else f"# {titles[fname]}\n\n"
                    with path.open("a", encoding="utf-8") as fh:
                        fh.write(head + "\n".join(lines) + "\n")
                head = (
                    ""
                    if self.index_path.exists()
                    else "# Memory\n\nOne line per fact; details in the topic files.\n\n"
                )
                with self.index_path.open("a", encoding="utf-8") as fh:
                    fh.write(head + "\n".join(index_lines) + "\n")
            except OSError as exc:
                self._hashes = None  # re-read the files next time
                raise StorageError(f"cannot write memory in {self.dir}: {exc}") from exc
            return len(index_lines)

    def search(self, query: str, limit: int = 10) -> list[MemoryHit]:
        """Facts ranked by a BM25-like score over their words (CJK characters and bigrams)."""
        q = set(_terms(query))
        if not q or limit <= 0:
            return []
        facts = self._load_facts()
        docs = [_terms(text) for _, _, text, _ in facts]
        n = len(docs)
        if not n:
            return []
        avg = sum(len(d) for d in docs) / n or 1.0
        df: Counter[str] = Counter()
        for d in docs:
            df.update(set(d) & q)
        scored: list[tuple[float, int]] = []
        for i, d in enumerate(docs):
            tf = Counter(t for t in d if t in q)
            if not tf:
                continue
            score = 0.0
            for term, f in tf.items():
                idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                score += idf * f * 2.2 / (f + 1.2 * (0.25 + 0.75 * len(d) / avg))
            scored.append((score, i))
        scored.sort(key=lambda x: (-x[0], x[1]))
        hits = []
        for score, i in scored[:limit]:
            fname, kind, text, _ = facts[i]
            hits.append(
                MemoryHit(topic=fname[:-3], kind=kind, text=text, score=round(score, 4), path=fname)
            )
        return hits

    def topics(self) -> list[str]:
        if not self.dir.is_dir():
            return []
        return sorted(p.name for p in self.dir.glob("*.md") if p.name != INDEX_NAME)

    def get(self, topic_or_path: str | None = None) -> str:
        """MEMORY.md (default) or a topic file, by topic name or file name; confined to memory/."""
        raw = (topic_or_path or "").strip()
        if raw in ("", INDEX_NAME, "MEMORY", "index"):
            name = INDEX_NAME
        elif "/" in raw or "\\" in raw or ".." in raw or "\x00" in raw:
            target = self.dir / raw
            confined(self.dir, target)  # raises UnsafeIdError for anything outside
            if target.parent.resolve() != self.dir.resolve():
                raise UnsafeIdError(f"memory path {raw!r} must name a file in {self.dir}")
            name = target.name
        elif raw.endswith(".md"):
            name = raw if safe_name(raw, what="memory file") == raw else self.topic_file(raw[:-3])
        else:
            name = self.topic_file(raw)
        path = self.dir / name
        confined(self.dir, path)
        try:
            return path.read_text(encoding="utf-8")
        except FileNotFoundError:
            if name == INDEX_NAME:
                return "# Memory\n\n(no facts stored yet)\n"
            known = ", ".join(t[:-3] for t in self.topics()) or "none"
            raise ToolArgumentsError(f"no memory topic {raw!r}; topics: {known}") from None
        except OSError as exc:
            raise StorageError(f"cannot read {path}: {exc}") from exc


def memory_tools(store: MemoryStore) -> list[Tool]:
    """``memory_search`` {query, limit?} and ``memory_get`` {topic?}."""

    def memory_search(args: Mapping[str, Any]) -> str:
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ToolArgumentsError("memory_search: 'query' must be a non-empty string")
        limit = args.get("limit", 10)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ToolArgumentsError("memory_search: 'limit' must be an integer >= 1")
        hits = store.search(query, min(limit, 50))
        if not hits:
            return f"No memory matches {json.dumps(query, ensure_ascii=False)}."
        lines = [f"{len(hits)} fact(s), best first:"]
        lines.extend(f"- [{h.topic}] ({h.kind}) {h.text}" for h in hits)
        lines.append('Read a whole topic with memory_get {"topic": ...}.')
        return "\n".join(lines)

    def memory_get(args: Mapping[str, Any]) -> str:
        topic = args.get("topic")
        if topic is not None and not isinstance(topic, str):
            raise ToolArgumentsError("memory_get: 'topic' must be a string")
        try:
            return store.get(topic)
        except UnsafeIdError as exc:
            raise ToolArgumentsError(f"memory_get: {exc}") from None

    return [
        Tool(
            name="memory_search",
            description="Search long-term memory (facts kept from compacted conversation).",
            parameters={
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "Words to look for."},
                    "limit": {"type": "integer", "minimum": 1, "description": "Max facts (10)."},
                },
                "required": ["query"],
            },
            handler=memory_search,
        ),
        Tool(
            name="memory_get",
            description="Read MEMORY.md (the index, default) or one topic file of memory.",
            parameters={
                "type": "object",
                "properties": {
                    "topic": {"type": "string", "description": "Topic name or file (optional)."}
                },
                "required": [],
            },
            handler=memory_get,
        ),
    ]


__all__ = [
    "ExtractiveFactExtractor",
    "Fact",
    "FactExtractor",
    "LLMFactExtractor",
    "MemoryHit",
    "MemoryStore",
    "memory_tools",
    "parse_fact_lines",
]
