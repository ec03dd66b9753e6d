"""Candidate retrieval over the evidence of a session (seed 004, section 5.3; issue 11).

BM25 over each evidence body plus its hints (command, tool, paths, patterns, URLs, anchors,
content types, all from :func:`.fields.evidence_fields`' sources), and exact lookups for what a
question can name: a command (in backticks or verbatim, also by its first line), a file path in
any form (by path suffix), a URL, a search pattern, a tool, an exception type. The candidates
and what matched go to :func:`.rank.rerank`, which decides the order (match level, ordinal,
recency, the seed's preferences for tool results and failures).

BM25 is the store's persisted index (one row per pointer, written with its block: bodies are
never re-read to build it); the exact lookups are built from the pointers' metadata when the
session's evidence is first searched, then grown as blocks are appended. Bodies are read for
the top hits only.
contextfold's own tool results (recall, read_offloaded, session_*, memory_*) are never indexed.
"""

from __future__ import annotations

import heapq
import re
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .classify import normalize_command
from .fields import CallFields, command_head, is_own_tool, path_suffixes, pattern_key
from .model import CompactBlock, EvidencePointer
from .rank import (
    CallLog,
    Candidate,
    QuerySpec,
    lines_match,
    parse_query,
    path_strength,
    primary_exception,
    rerank,
    strip_ordinals,
)
from .store import NAMESPACE, EvidenceStore
from .text import FILLER, GENERIC, STOPWORDS, snippet, tokenize

#: Documents taken from BM25 alone into re-ranking.
BM25_CANDIDATES = 60
#: BM25 rows fetched from the store for a query (re-ranking may drop some).
BM25_FETCH = 200

_SPAN = re.compile(r"`([^`]{6,})`")
_QUOTED = re.compile(r"`([^`\n]+)`|\"([^\"\n]{3,})\"|'([^'\n]{3,})'")


def _failed(p: EvidencePointer) -> bool:
    """A non-zero exit code; when the output reports none, a stack trace."""
    code = next((a for a in p.anchors if a.startswith("exit_code:")), None)
    if code is not None:
        return code != "exit_code:0"
    return "stack_trace" in p.content_types


@dataclass(frozen=True, kw_only=True, slots=True)
class Hit:
    pointer: EvidencePointer
    score: float
    text_preview: str


class EvidenceSearch:
    """Evidence search of one session: the store's BM25 plus exact lookups by what a question
    names (built from pointer metadata, grown incrementally)."""

    def __init__(
        self, store: EvidenceStore, *, calls: Callable[[], CallLog | None] | None = None
    ) -> None:
        self.store = store
        #: The session's calls in order (ordinals count them); None: the indexed ones only.
        self.calls = calls
        self._log = CallLog()
        self._paths: dict[str, list[int]] = {}
        self._full_paths: dict[str, list[int]] = {}
        self._urls: dict[str, list[int]] = {}
        self._patterns: dict[str, list[int]] = {}
        self._pattern_words: dict[str, set[str]] = {}
        self._tools: dict[str, list[int]] = {}
        #: exception type -> documents that show it; the one each output ends with
        self._exceptions: dict[str, list[int]] = {}
        self._primary: list[str | None] = []
        self._pointers: list[EvidencePointer] = []
        self._by_id: dict[str, int] = {}
        self._commands: dict[str, list[int]] = {}
        self._anchors: dict[str, list[int]] = {}
        self._blocks_seen = 0
        self._max_created = 1
        self._created: array[int] = array("q")
        self._failed: list[bool] = []
        self._pref: array[float] = array("d")
        self._pref_error: array[float] = array("d")
        self._anchor_keys: dict[str, set[str]] = {}
        self._cmd_by_token: dict[str, set[str]] = {}
        self._cmd_by_key: dict[str, set[str]] = {}

    def __len__(self) -> int:
        return len(self._pointers)

    # ----------------------------------------------------------------- building

    def sync(self) -> int:
        """Index blocks appended to the store since the last call; returns how many."""
        blocks = self.store.blocks()
        new = blocks[self._blocks_seen :]
        for block in new:
            self.add_block(block)
        self._blocks_seen = len(blocks)
        return len(new)

    def add_block(self, block: CompactBlock) -> None:
        for pointer in block.evidence:
            self.add(pointer)

    def add(self, pointer: EvidencePointer, text: str | None = None) -> None:
        """Take one pointer into the exact lookups (its words are in the store's index,
        written with its block; ``text`` is not needed)."""
        if pointer.id in self._by_id:  # same evidence indexed again: keep the first, no dupes
            return
        if pointer.role == "tool" and is_own_tool(pointer.tool_name):
            return  # a recall / session / memory result is a view of evidence, not evidence
        doc = len(self._pointers)
        self._pointers.append(pointer)
        self._by_id[pointer.id] = doc
        if pointer.command:
            # the whole command, and its first line (how a heredoc or script is named)
            for norm in dict.fromkeys(
                (normalize_command(pointer.command), command_head(pointer.command))
            ):
                if not norm:
                    continue
                if norm not in self._commands:
                    toks = set(tokenize(norm))
                    for tok in toks:
                        self._cmd_by_token.setdefault(tok, set()).add(norm)
                    if toks:
                        key = max(sorted(toks), key=len)
                        self._cmd_by_key.setdefault(key, set()).add(norm)
                self._commands.setdefault(norm, []).append(doc)
        for anchor in pointer.anchors:
            if not anchor.startswith(("command:", "exit_code:")):
                key = anchor.split(":", 1)[1].lower()
                if len(key) < 4:
                    continue
                docs = self._anchors.setdefault(key, [])
                if not docs:  # findable from any of its words
                    for tok in set(tokenize(key)):
                        self._anchor_keys.setdefault(tok, set()).add(key)
                docs.append(doc)
        for path in pointer.paths:
            sufs = path_suffixes(path)
            for suf in sufs:
                self._paths.setdefault(suf, []).append(doc)
            if sufs:
                self._full_paths.setdefault(sufs[0], []).append(doc)
        for url in pointer.urls:
            self._urls.setdefault(url, []).append(doc)
        for pat in pointer.patterns:
            key = pattern_key(pat)
            if key:
                if key not in self._patterns:  # findable from its longest word
                    word = max(key.split(), key=len)
                    self._pattern_words.setdefault(word, set()).add(key)
                self._patterns.setdefault(key, []).append(doc)
        if pointer.tool_name:
            self._tools.setdefault(pointer.tool_name, []).append(doc)
        self._primary.append(primary_exception(pointer))
        for name in dict.fromkeys(a[10:] for a in pointer.anchors if a.startswith("exception:")):
            self._exceptions.setdefault(name, []).append(doc)
        self._log.add(
            pointer.tool_use_id or pointer.id,
            CallFields(
                tool=pointer.tool_name or "",
                command=pointer.command or "",
                paths=pointer.paths,
                action=pointer.action or "other",
                shell=pointer.shell,
            ),
        )
        self._max_created = max(self._max_created, pointer.created_at)
        self._created.append(pointer.created_at)
        self._failed.append(_failed(pointer))
        self._pref.append(_preference(pointer, False))
        self._pref_error.append(_preference(pointer, True))

    def get(self, evidence_id: str) -> EvidencePointer | None:
        self.sync()
        doc = self._by_id.get(evidence_id)
        return self._pointers[doc] if doc is not None else None

    def pointers(self) -> list[EvidencePointer]:
        self.sync()
        return list(self._pointers)

    # ----------------------------------------------------------------- querying

    def _command_matches(self, query: str) -> tuple[set[int], set[int]]:
        exact: set[int] = set()
        partial: set[int] = set()
        quoted = [
            normalize_command(next(g for g in m.groups() if g)) for m in _QUOTED.finditer(query)
        ]
        quoted = [q for q in quoted if q]
        for q in quoted:
            exact.update(self._commands.get(q, ()))
        named = set(quoted)
        flat_query = " ".join(query.split())
        # a command that appears verbatim in the query has its longest word in the query
        candidates: set[str] = set()
        for tok in set(tokenize(query)):
            candidates.update(self._cmd_by_key.get(tok, ()))
        verbatim = [c for c in candidates if c not in named and len(c) >= 6 and c in flat_query]
        # a whole (multi-line) command in backticks: quotes inside it are part of it
        spans = [normalize_command(m.group(1)) for m in _SPAN.finditer(query)]
        for cmd in verbatim:
            longer = [*verbatim, *(q for q in quoted if q in self._commands)]
            if any(cmd != other and cmd in other for other in longer):
                continue  # "python x.py" inside "python x.py --fast": the longer one is meant
            # quotes inside the command ("sed -n '1,5p' x.py") do not make it a fragment
            whole = all(q in cmd for q in quoted) or any(span.startswith(cmd) for span in spans)
            (exact if whole else partial).update(self._commands[cmd])
        # a quoted fragment of a longer command: every word of it is a word of the command
        for q in quoted:
            if len(q) < 4:
                continue
            sets = sorted((self._cmd_by_token.get(t, set()) for t in set(tokenize(q))), key=len)
            if not sets:
                continue
            for cmd in sets[0].intersection(*sets[1:]):
                if cmd != q and q in cmd:
                    partial.update(self._commands[cmd])
        return exact, partial - exact

    def _bm25(self, terms: Iterable[str], limit: int = BM25_FETCH) -> dict[int, float]:
        """BM25 scores from the store's index (this session's evidence only)."""
        words = list(terms)
        if not words:
            return {}
        session = self.store.session
        hits = session.store.search(
            NAMESPACE, " ".join(words), session_id=session.session_id, limit=limit
        )
        prefix = f"{session.session_id}:"
        out: dict[int, float] = {}
        for h in hits:
            doc = self._by_id.get(h.doc_id[len(prefix) :] if h.doc_id.startswith(prefix) else "")
            if doc is not None:
                out[doc] = h.score
        return out

    def _bm25_of(self, terms: Iterable[str], docs: set[int]) -> dict[int, float]:
        """BM25 of ``terms`` for the given documents only."""
        if not docs:
            return {}
        scores = self._bm25(terms, limit=max(BM25_FETCH, 4 * len(docs)))
        return {d: s for d, s in scores.items() if d in docs}

    def _path_docs(self, spec: QuerySpec) -> set[int]:
        docs: set[int] = set()
        for qp in spec.paths:
            docs.update(self._paths.get(qp, ()))
            for suf in path_suffixes(qp)[1:]:
                docs.update(self._full_paths.get(suf, ()))
        return docs

    def _pattern_docs(self, query: str) -> set[int]:
        flat = f" {pattern_key(query)} "
        keys = {k for w in set(flat.split()) for k in self._pattern_words.get(w, ())}
        return {
            d for key in keys if len(key) >= 2 and f" {key} " in flat for d in self._patterns[key]
        }

    def search(self, query: str, k: int = 5) -> list[Hit]:
        """The ``k`` best pieces of evidence for ``query``, best first."""
        self.sync()
        if not self._pointers or k <= 0:
            return []
        spec = parse_query(query, self._tools)
        clean = strip_ordinals(query)
        terms = [t for t in dict.fromkeys(tokenize(clean)) if t not in STOPWORDS]
        scores = self._bm25([t for t in terms if t not in FILLER])
        exact, partial = self._command_matches(query)
        low_query = query.lower()
        anchor_hits: dict[int, int] = {}
        for term in terms:
            for anchor in self._anchor_keys.get(term, ()):
                if anchor in low_query:
                    for doc in self._anchors[anchor]:
                        anchor_hits[doc] = anchor_hits.get(doc, 0) + 1
        path_docs = self._path_docs(spec)
        url_docs = {d for u in spec.urls for d in self._urls.get(u, ())}
        pattern_docs = self._pattern_docs(query)
        tool_docs = {d for t in spec.tools for d in self._tools.get(t, ())}
        exc = set(spec.exceptions)
        exc_docs = {d for e in exc for d in self._exceptions.get(e, ())}
        pref = self._pref_error if spec.wants_error else self._pref
        created = self._created
        top = self._max_created
        best = heapq.nlargest(
            BM25_CANDIDATES,
            scores,
            key=lambda d: scores[d] * pref[d] * (1.0 + 0.1 * created[d] / top),
        )
        docs = set(best) | exact | partial | path_docs | url_docs | pattern_docs | exc_docs
        docs |= set(anchor_hits)
        if tool_docs and (path_docs or pattern_docs or url_docs):
            docs |= tool_docs & (path_docs | pattern_docs | url_docs)
        if spec.ordinal is not None and not (exact or path_docs or exc_docs):
            docs |= {
                d
                for d, p in enumerate(self._pointers)
                if p.role == "tool" and (self._failed[d] or not spec.wants_failing)
            }
        named = set(tokenize(" ".join(self._pointers[d].command or "" for d in exact | partial)))
        handles = set(tokenize(" ".join((*spec.paths, *spec.exceptions, *spec.tools))))
        extra_terms = [t for t in terms if t not in named and t not in handles]
        strong = exact | partial | path_docs | url_docs | pattern_docs | exc_docs
        extra = self._bm25_of(
            [t for t in extra_terms if t not in GENERIC and t not in FILLER], strong
        )
        log = self.calls() if self.calls is not None else None
        log = log if log is not None and len(log) else self._log
        positions = log.positions
        cands: list[Candidate] = []
        for doc in docs:
            p = self._pointers[doc]
            seq = positions.get(p.tool_use_id or p.id)
            if seq is None:
                seq = self._log.positions.get(p.tool_use_id or p.id, -1)
            cands.append(
                Candidate(
                    pointer=p,
                    seq=seq,
                    bm25=scores.get(doc, 0.0) * (1.0 + 0.1 * created[doc] / top),
                    command=2 if doc in exact else 1 if doc in partial else 0,
                    path=path_strength(spec.paths, p.paths) if doc in path_docs else 0,
                    lines=lines_match(spec.lines, p.lines),
                    tool=doc in tool_docs,
                    pattern=doc in pattern_docs,
                    url=doc in url_docs,
                    anchors=anchor_hits.get(doc, 0),
                    exception=doc in exc_docs,
                    primary=self._primary[doc] in exc,
                    failed=self._failed[doc],
                    pref=pref[doc],
                    extra=extra.get(doc, 0.0),
                )
            )
        ranked = rerank(cands, spec, calls=log)[:k]
        hits: list[Hit] = []
        for c in ranked:
            body = self.store.restore(c.pointer).text
            hits.append(
                Hit(
                    pointer=c.pointer,
                    score=round(c.score, 4),
                    text_preview=snippet(body, terms),
                )
            )
        return hits


def _preference(p: EvidencePointer, wants_error: bool) -> float:
    """The seed's preferences (5.3) as a factor; recency is applied at query time."""
    factor = 1.0
    if p.source_scope == "sub_agent":
        factor *= 1.15
    if p.role == "tool":
        factor *= 1.1
    if set(p.content_types) & {"stack_trace", "error", "test_output"}:
        factor *= 1.2 if wants_error else 1.05
    if wants_error and _failed(p):
        factor *= 1.25
    return factor


__all__ = ["EvidenceSearch", "Hit", "tokenize"]
