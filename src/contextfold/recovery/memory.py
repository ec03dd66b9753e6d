"""Long-term memory: flush facts before compaction.

Before messages leave the view, facts (requirements, configuration, file changes, conclusions,
constraints) are extracted and stored as documents of the store, scoped by agent, each with a
hash of its normalized text so a fact is never stored twice. ``memory_get`` renders MEMORY.md
(an index, one line per fact) and one Markdown file per topic from them; ``contextfold export``
writes those files.

Extraction is extractive (deterministic, no LLM) by default; :class:`LLMFactExtractor` asks a
chat model for JSON lines and falls back to the extractive one when that fails.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from ..core.paths import safe_name
from ..core.tools import Tool
from ..errors import ConfigError, ToolArgumentsError, UnsafeIdError
from ..jsontypes import JSON, JSONObject
from ..storage.base import SearchDoc
from ..storage.session import SessionStore
from ..storage.util import utc_now
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

INDEX_NAME = "MEMORY.md"


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryHit:
    topic: str
    kind: str
    text: str
    score: float
    #: The topic file, relative to the memory folder (e.g. ``files.md``).
    path: str
    #: The fact's id (for ``edit_fact`` / ``delete_fact``).
    id: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class StoredFact:
    """One fact of memory: ``id`` names it for edit / delete; ``source`` is the uuid of the
    message it came from (None when added by hand)."""

    id: str
    kind: str
    text: str
    topic: str
    file: str
    source: str | None = None


# --------------------------------------------------------------------------- store

NAMESPACE = "memory"
#: Facts in this scope are readable by every agent (written only by owners who opt in).
SHARED_SCOPE = "*shared*"

_FACT_ID = re.compile(r"[0-9a-f]{16}")
_FACT_LINE = re.compile(
    r"^- \((?P<kind>[a-z_]+)\) (?P<text>.*?) <!-- cf:(?P<h>[0-9a-f]+)(?: [^>]*)? -->$"
)


def parse_topic_file(text: str) -> list[tuple[str, str, str]]:
    """(kind, text, hash) of each fact line of a topic file (legacy ``memory/*.md``)."""
    out = []
    for line in text.splitlines():
        m = _FACT_LINE.match(line)
        if m:
            out.append((m.group("kind"), m.group("text"), m.group("h")))
    return out


def fact_key(scope: str, h: str) -> str:
    # "agent:" cannot start a session id, so delete_session never touches memory
    return f"agent:{scope}/{h}"


def fact_doc(scope: str, h: str, value: Mapping[str, JSON]) -> SearchDoc:
    return SearchDoc(
        namespace=NAMESPACE,
        doc_id=fact_key(scope, h),
        scope=scope,
        session_id="",
        fields={"body": str(value.get("text", "")), "topic": str(value.get("title", ""))},
        meta={k: value.get(k) for k in ("kind", "text", "file", "title")},
    )


class MemoryStore:
    """Long-term memory of one agent: facts are documents of the store (namespace
    ``memory``) scoped by agent, found through the store's search index.

    ``read_agents``: other agents whose memory this one may read (``allow_agents``
    semantics; ``"*"`` = all). ``share=True``: new facts go to the shared scope, readable by
    every agent of the store (the owner opts in). MEMORY.md and the topic files are rendered
    from the facts (``memory_get``, ``contextfold export``).
    """

    def __init__(
        self,
        session: SessionStore,
        *,
        read_agents: Sequence[str] = (),
        share: bool = False,
    ) -> None:
        self.session = session
        self.store = session.store
        self.agent_id = session.agent_id
        self.write_scope = SHARED_SCOPE if share else self.agent_id
        self._lock = threading.Lock()
        self._seen: set[str] = set()
        if "*" in read_agents:
            self.scopes: list[str] | None = None
        else:
            self.scopes = list(dict.fromkeys([self.agent_id, *read_agents, SHARED_SCOPE]))

    def topic_file(self, topic: str) -> str:
        name = safe_name(topic.strip().lower().replace(" ", "-") or "misc", what="topic")
        return "topics.md" if name.upper() == "MEMORY" else f"{name}.md"

    def _facts(self) -> list[dict[str, Any]]:
        """Readable facts, oldest first."""
        out: list[dict[str, Any]] = []
        for scope in self.scopes if self.scopes is not None else [""]:
            prefix = f"agent:{scope}/" if scope else "agent:"
            out.extend(self.store.docs(NAMESPACE, prefix=prefix).values())
        out.sort(key=lambda f: (str(f.get("ts", "")), int(f.get("n", 0))))
        return out

    def flush(self, facts: Sequence[Fact]) -> int:
        """Write the facts not stored yet (in the caller's unit of work); how many were new."""
        with self._lock:
            new = 0
            stamp = utc_now()
            docs = []
            for fact in facts:
                text = clean_fact(fact.text)
                if not text:
                    continue
                h = fact_hash(text)
                key = fact_key(self.write_scope, h)
                if key in self._seen or self.store.get_doc(NAMESPACE, key) is not None:
                    continue
                self._seen.add(key)
                kind = fact.kind if fact.kind in KINDS else "conclusion"
                title = fact.topic or TOPIC_OF_KIND[kind]
                value: JSONObject = {
                    "kind": kind,
                    "text": text,
                    "title": title,
                    "file": self.topic_file(title),
                    "source": fact.source_uuid or "",
                    "ts": stamp,
                    "n": new,
                }
                self.session.put_doc(NAMESPACE, key, value)
                docs.append(fact_doc(self.write_scope, h, value))
                new += 1
            if docs:
                self.session.index(docs)
            return new

    # ------------------------------------------------------------------ edit by hand
    def _own(self, fact_id: str) -> tuple[str, dict[str, Any]]:
        if not isinstance(fact_id, str) or not _FACT_ID.fullmatch(fact_id):
            raise ToolArgumentsError(f"fact id must be 16 hex digits, got {fact_id!r}")
        key = fact_key(self.write_scope, fact_id)
        value = self.store.get_doc(NAMESPACE, key)
        if value is None:
            raise ToolArgumentsError(f"no fact {fact_id!r} in this agent's memory")
        return key, dict(value)

    def add(self, text: str, *, kind: str = "conclusion", topic: str | None = None) -> str:
        """Store one fact (in the caller's unit of work); its id. A fact stored before
        (same normalized text) keeps its id."""
        if not isinstance(text, str) or not clean_fact(text):
            raise ToolArgumentsError("a fact needs a non-empty text")
        if kind not in KINDS:
            raise ToolArgumentsError(f"fact kind must be one of {', '.join(KINDS)}, got {kind!r}")
        if topic is not None and (not isinstance(topic, str) or not topic.strip()):
            raise ToolArgumentsError("a fact's topic must be a non-empty string")
        self.flush([Fact(topic=topic or TOPIC_OF_KIND[kind], text=text, kind=kind)])
        return fact_hash(clean_fact(text))

    def edit(
        self, fact_id: str, text: str, *, kind: str | None = None, topic: str | None = None
    ) -> str:
        """Replace a fact's text (and kind / topic), in the caller's unit of work; its id
        (a new one when the text changed)."""
        _key, old = self._own(fact_id)
        kind = kind or str(old.get("kind") or "conclusion")
        if kind not in KINDS:
            raise ToolArgumentsError(f"fact kind must be one of {', '.join(KINDS)}, got {kind!r}")
        title = topic or str(old.get("title") or TOPIC_OF_KIND[kind])
        cleaned = clean_fact(text) if isinstance(text, str) else ""
        if not cleaned:
            raise ToolArgumentsError("a fact needs a non-empty text")
        new_id = fact_hash(cleaned)
        new_key = fact_key(self.write_scope, new_id)
        if new_id != fact_id:
            if self.store.get_doc(NAMESPACE, new_key) is not None:
                raise ToolArgumentsError(f"fact {new_id!r} already says that")
            self.delete(fact_id)
        value: JSONObject = {
            "kind": kind,
            "text": cleaned,
            "title": title,
            "file": self.topic_file(title),
            "source": str(old.get("source") or ""),
            "ts": utc_now(),
            "n": 0,
        }
        with self._lock:
            self._seen.add(new_key)
            self.session.put_doc(NAMESPACE, new_key, value)
            self.session.index([fact_doc(self.write_scope, new_id, value)])
        return new_id

    def delete(self, fact_id: str) -> None:
        """Remove a fact of this agent (in the caller's unit of work)."""
        key, _old = self._own(fact_id)
        with self._lock:
            self._seen.discard(key)
            self.session.put_doc(NAMESPACE, key, None)
            # a search row with no words and no text: found by nothing, shown by nothing
            self.session.index([fact_doc(self.write_scope, fact_id, {})])

    def facts(self) -> list[StoredFact]:
        """Readable facts, oldest first."""
        return [
            StoredFact(
                id=fact_hash(str(f.get("text", ""))),
                kind=str(f.get("kind", "")),
                text=str(f.get("text", "")),
                topic=str(f.get("title", "")),
                file=str(f.get("file", "")),
                source=str(f.get("source") or "") or None,
            )
            for f in self._facts()
        ]

    def search(self, query: str, limit: int = 10) -> list[MemoryHit]:
        """Facts ranked by the store's BM25 over their words."""
        if limit <= 0:
            return []
        hits = self.store.search(NAMESPACE, query, scopes=self.scopes, limit=limit)
        out = []
        for h in hits:
            if not h.meta.get("text"):
                continue  # deleted
            fname = str(h.meta.get("file") or "misc.md")
            out.append(
                MemoryHit(
                    topic=fname[:-3],
                    kind=str(h.meta.get("kind", "")),
                    text=str(h.meta.get("text", "")),
                    score=round(h.score, 4),
                    path=fname,
                    id=h.doc_id.rsplit("/", 1)[-1],
                )
            )
        return out

    def topics(self) -> list[str]:
        return sorted({str(f.get("file")) for f in self._facts() if f.get("file")})

    def render(self, name: str) -> str | None:
        """MEMORY.md or one topic file, rendered from the facts (None: no such topic)."""
        facts = self._facts()
        if name == INDEX_NAME:
            head = "# Memory\n\nOne line per fact; details in the topic files.\n\n"
            if not facts:
                return "# Memory\n\n(no facts stored yet)\n"
            lines = [
                f"- [{f.get('title')}]({f.get('file')}) ({f.get('kind')}) {f.get('text')}"
                for f in facts
            ]
            return head + "\n".join(lines) + "\n"
        mine = [f for f in facts if f.get("file") == name]
        if not mine:
            return None
        lines = [
            f"- ({f.get('kind')}) {f.get('text')} <!-- cf:{fact_hash(str(f.get('text')))} -->"
            for f in mine
        ]
        return f"# {mine[0].get('title')}\n\n" + "\n".join(lines) + "\n"

    def get(self, topic_or_path: str | None = None) -> str:
        """MEMORY.md (default) or a topic, by topic name or file name."""
        raw = (topic_or_path or "").strip()
        if raw in ("", INDEX_NAME, "MEMORY", "index"):
            name = INDEX_NAME
        elif "/" in raw or "\\" in raw or ".." in raw or "\x00" in raw:
            raise UnsafeIdError(f"memory path {raw!r} escapes the memory topics: name a topic")
        elif raw.endswith(".md"):
            name = raw if safe_name(raw, what="memory file") == raw else self.topic_file(raw[:-3])
        else:
            name = self.topic_file(raw)
        text = self.render(name)
        if text is None:
            known = ", ".join(t[:-3] for t in self.topics()) or "none"
            raise ToolArgumentsError(f"no memory topic {raw!r}; topics: {known}")
        return text


def memory_tools(store: MemoryStore) -> list[Tool]:
    """``memory_search`` {query, limit?} and ``memory_get`` {topic?}."""

    def memory_search(args: Mapping[str, object]) -> str:
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
        lines.extend(f"- [{h.topic}] ({h.kind}) {h.text} (id {h.id})" for h in hits)
        lines.append('Read a whole topic with memory_get {"topic": ...}.')
        return "\n".join(lines)

    def memory_get(args: Mapping[str, object]) -> str:
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


def choose_fact_extractor(choice: object, summarizer: object) -> FactExtractor | None:
    """None/"auto"/"extractive": rule-based facts (no LLM call); "llm" (opt-in: one more
    call to the summarizer's model per compaction); "off"; or any object with
    ``extract(messages)``."""
    model = getattr(summarizer, "model", None)
    has_llm = model is not None and callable(getattr(model, "complete", None))
    if choice in (None, "auto"):
        choice = "extractive"
    if choice == "off":
        return None
    if choice == "extractive":
        return ExtractiveFactExtractor()
    if choice == "llm":
        if not has_llm:
            raise ConfigError("fact_extractor='llm' needs an LLM-backed summarizer")
        return LLMFactExtractor(cast(ChatModelLike, model))
    if not callable(getattr(choice, "extract", None)):
        raise ConfigError(
            f"fact_extractor must be 'auto', 'extractive', 'llm', 'off' or "
            f"an object with extract(messages), got {choice!r}"
        )
    return cast(FactExtractor, choice)


__all__ = [
    "ExtractiveFactExtractor",
    "Fact",
    "FactExtractor",
    "LLMFactExtractor",
    "MemoryHit",
    "MemoryStore",
    "StoredFact",
    "choose_fact_extractor",
    "memory_tools",
    "parse_fact_lines",
]
