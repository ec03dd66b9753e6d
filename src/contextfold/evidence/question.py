"""Answering one recall question from the store: BM25 and the exact lookups it names, in a few
round trips, then :func:`.rank.rerank` over the documents found (see :mod:`.search`)."""

from __future__ import annotations

import dataclasses
import heapq
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .classify import normalize_command
from .fields import path_suffixes, pattern_key
from .keys import cmd_key, fits, longest_token, rank_pointer
from .lookups import KeySource
from .model import EvidencePointer
from .rank import (
    CallLog,
    Candidate,
    lines_match,
    parse_query,
    primary_exception,
    rerank,
    strip_ordinals,
)
from .text import FILLER, GENERIC, STOPWORDS, snippet, tokenize
from .understand import KIND_WORDS, kind_matches, subject_matches

if TYPE_CHECKING:
    from .search import EvidenceSearch

#: Documents taken from BM25 alone into re-ranking.
BM25_CANDIDATES = 60
#: BM25 rows fetched from the store for a query (re-ranking may drop some).
BM25_FETCH = 200
#: Words of a tool name that contains blanks, at most (tool names are looked up exactly).
TOOL_WORDS = 4

_SPAN = re.compile(r"`([^`]{6,})`")
_QUOTED = re.compile(r"`([^`\n]+)`|\"([^\"\n]{3,})\"|'([^'\n]{3,})'")
_WORDS = re.compile(r"[A-Za-z_][\w\-]*")


@dataclass(frozen=True, kw_only=True, slots=True)
class Hit:
    pointer: EvidencePointer
    score: float
    text_preview: str


class _Doc:
    """One document met by a question: what ranking reads of its pointer (``rank``, from the
    stored metadata; None for a tool output taken only to count an ordinal, known by a bare
    pointer until it is among the hits) and its place in the session's evidence. The pointer
    object is made when ranking asks for it (most documents met only count for recency)."""

    __slots__ = ("_pointer", "failed", "meta", "ord", "rank")

    def __init__(
        self,
        ord: int,
        *,
        meta: Mapping[str, Any] | None = None,
        rank: Mapping[str, Any] | None = None,
        failed: bool = False,
        pointer: EvidencePointer | None = None,
    ) -> None:
        self.ord = ord
        self.meta = meta
        self.rank = rank
        self.failed = failed
        self._pointer = pointer

    @property
    def pointer(self) -> EvidencePointer:
        if self._pointer is None:
            rank = self.rank or {}
            self._pointer = rank_pointer(rank) or EvidencePointer(
                id=str(rank.get("id")), created_at=self.created
            )
        return self._pointer

    @property
    def created(self) -> int:
        created = self.rank.get("createdAt") if self.rank is not None else None
        return created if type(created) is int else 0

    @property
    def call(self) -> str:
        """The tool call it answers (its own id for a message): what positions are of."""
        if self.rank is None:
            return self.pointer.tool_use_id or self.pointer.id
        use, own = self.rank.get("toolUseId"), self.rank.get("id")
        return use if isinstance(use, str) and use else str(own)

    @property
    def command(self) -> str:
        if self.rank is None:
            return self.pointer.command or ""
        command = self.rank.get("command")
        return command if isinstance(command, str) else ""


def _doc(meta: Mapping[str, Any] | None) -> _Doc | None:
    rank = meta.get("rank") if meta is not None else None
    if meta is None or not isinstance(rank, Mapping) or not isinstance(rank.get("id"), str):
        return None
    ord_, fail = meta.get("ord"), meta.get("failed")
    if type(ord_) is not int or not isinstance(fail, bool):
        return None
    return _Doc(ord_, meta=meta, rank=rank, failed=fail)


def ord_of(meta: Mapping[str, Any]) -> int:
    ord_ = meta.get("ord")
    return ord_ if type(ord_) is int else -1


def _after(key: str, prefix: str) -> tuple[str, str]:
    """``prefix<word> <rest>`` -> (word, rest)."""
    word, _, rest = key[len(prefix) :].partition(" ")
    return word, rest


class Question:
    """One search: the lookups a question needs, in a few round trips to the store."""

    def __init__(self, search: EvidenceSearch, src: KeySource, query: str, top: int) -> None:
        self.search = search
        self.src = src
        self.query = query
        self.top = top
        self.docs: dict[str, _Doc] = {}
        self.spec = parse_query(query, ())
        clean = strip_ordinals(query)
        self.terms = [t for t in dict.fromkeys(tokenize(clean)) if t not in STOPWORDS]
        quoted = [
            normalize_command(next(g for g in m.groups() if g)) for m in _QUOTED.finditer(query)
        ]
        self.quoted = [q for q in quoted if q]
        self.low = query.lower()
        self.flat_pattern = f" {pattern_key(query)} "
        #: the first BM25 query (its words and hits)
        self.first_terms: list[str] = []
        self.first: dict[str, tuple[float, Mapping[str, Any]]] = {}

    # ------------------------------------------------------------ round 1: what it names

    def _tool_names(self) -> list[str]:
        """Names a tool could have in the question (parse_query keeps the known ones)."""
        words = set(_WORDS.findall(self.query))
        parts = self.query.split(" ")
        for n in range(1, TOOL_WORDS + 1):
            words.update(" ".join(parts[i : i + n]) for i in range(len(parts) - n + 1))
        return [w for w in words if w]

    def _first_keys(self) -> tuple[list[str], list[str]]:
        spec = self.spec
        keys = [f"tools:{w}" for w in self._tool_names()]
        keys += [cmd_key(q) for q in self.quoted]
        prefixes = [f"cmd:{t} " for t in set(tokenize(self.query))]
        for q in self.quoted:
            if len(q) >= 4 and tokenize(q):
                prefixes.append(f"cmdtok:{longest_token(q)} ")
        prefixes += [f"anctok:{t} " for t in self.terms]
        for qp in spec.paths:
            keys.append(f"path:{qp}")
            keys += [f"full:{s}" for s in path_suffixes(qp)[1:]]
        keys += [f"url:{u}" for u in spec.urls]
        prefixes += [f"pat:{w} " for w in set(self.flat_pattern.split())]
        keys += [f"exc:{e}" for e in spec.exceptions]
        return [k for k in keys if fits(k)], [p for p in prefixes if fits(p)]

    def answer(self, k: int) -> list[Hit]:
        spec, query = self.spec, self.query
        self.first_terms = [t for t in self.terms if t not in FILLER]
        scores_meta = self.first = self.search.bm25(self.src, self.first_terms)
        for d, (_, meta) in scores_meta.items():
            got = _doc(meta)
            if got is not None:
                self.docs[d] = got
        scores = {d: s for d, (s, _) in scores_meta.items() if d in self.docs}
        keys, prefixes = self._first_keys()
        rows = self.src.lookup(keys, prefixes)
        by: dict[str, set[str]] = {}  # key -> docs
        for key, d in rows:
            by.setdefault(key, set()).add(d)
        tools = {key[6:] for key in by if key.startswith("tools:")}
        words = set(_WORDS.findall(query))
        spec = self.spec = dataclasses.replace(
            spec,
            tools=tuple(
                t for t in sorted(tools) if t in words or (len(t) > 3 and f" {t} " in f" {query} ")
            ),
        )
        commands: dict[str, set[str]] = {}  # normalized command -> its documents
        filed: dict[str, str] = {}  # normalized command -> the word it is filed under
        words_of: dict[str, set[str]] = {}  # word -> commands / anchors with it ("cmdtok:")
        anchor_words: dict[str, set[str]] = {}
        patterns: dict[str, set[str]] = {}
        for key, ds in by.items():
            if key.startswith("cmd:"):
                word, norm = _after(key, "cmd:")
                commands.setdefault(norm, set()).update(ds)
                filed[norm] = word
            elif key.startswith("cmdtok:"):
                word, norm = _after(key, "cmdtok:")
                words_of.setdefault(word, set()).add(norm)
            elif key.startswith("anctok:"):
                word, value = _after(key, "anctok:")
                anchor_words.setdefault(word, set()).add(value)
            elif key.startswith("pat:"):
                _, pat = _after(key, "pat:")
                patterns.setdefault(pat, set()).update(ds)

        def docs_of(prefix: str, values: Iterable[str]) -> set[str]:
            return {d for v in values for d in by.get(prefix + v, ())}

        exact, partial, more = self._commands(commands, filed, words_of)
        anchors: dict[str, int] = {}  # anchor -> how many of the question's words it has
        for term in self.terms:
            for value in anchor_words.get(term, ()):
                if value in self.low:
                    anchors[value] = anchors.get(value, 0) + 1
        # how many components a named path has in common with the call's (path_strength):
        # all of the question's path when it is a suffix of the call's, else all of the
        # call's path when that is a suffix of the question's
        strength: dict[str, int] = {}
        for qp in spec.paths:
            ways = [(f"path:{qp}", qp), *((f"full:{s}", s) for s in path_suffixes(qp)[1:])]
            for key, path in ways:
                for d in by.get(key, ()):
                    strength[d] = max(strength.get(d, 0), path.count("/") + 1)
        path_docs = set(strength)
        url_docs = docs_of("url:", spec.urls)
        pattern_docs = {
            d
            for pat, ds in patterns.items()
            if len(pat) >= 2 and f" {pat} " in self.flat_pattern
            for d in ds
        }
        exc = set(spec.exceptions)
        exc_docs = docs_of("exc:", spec.exceptions)
        bulk = spec.ordinal is not None and not (exact or path_docs or exc_docs)

        # ------------------------------------------------------ round 2: what those lead to
        keys2 = [cmd_key(c) for c in more] + [f"anc:{a}" for a in anchors]
        prefixes2: list[str] = []
        if bulk:
            prefixes2.append("out:1" if spec.wants_failing else "out:")
            if spec.wants_error:  # errors shown in messages too (observations sent as user text)
                prefixes2.append("err:")
            keys2 += [f"tool:{t}" for t in spec.tools]
        anchor_hits: dict[str, int] = {}
        outputs: dict[str, tuple[int, bool, str]] = {}  # doc -> (ord, failed, call id)
        tool_docs: set[str] = set()
        err_docs: set[str] = set()
        for key, d in self.src.lookup([k for k in keys2 if fits(k)], prefixes2):
            if key.startswith("cmd:"):
                partial.add(d)
            elif key.startswith("anc:"):
                anchor_hits[d] = anchor_hits.get(d, 0) + anchors[key[4:]]
            elif key.startswith("out:"):
                place, _, call = key[5:].partition(" ")
                outputs[d] = (int(place), key[4] == "1", call)
            elif key.startswith("tool:"):
                tool_docs.add(d)
            elif key.startswith("err:"):
                err_docs.add(d)
        partial -= exact

        # ------------------------------------------------------ round 3: the candidates
        best = heapq.nlargest(
            BM25_CANDIDATES,
            scores,
            key=lambda d: scores[d] * self._pref(d) * (1.0 + 0.1 * self._created(d) / self.top),
        )
        strong = exact | partial | path_docs | url_docs | pattern_docs | exc_docs
        wanted = set(best) | strong | set(anchor_hits) | (err_docs - outputs.keys())
        self._fetch(wanted)
        wanted &= self.docs.keys()
        for d, (at, fail, call) in outputs.items():
            if d not in self.docs:  # counted for the ordinal only: what it is comes later
                bare = EvidencePointer(id=d.partition(":")[2], role="tool", tool_use_id=call)
                self.docs[d] = _Doc(at, pointer=bare, failed=fail)
            wanted.add(d)
        commands_named = {self.docs[d].command for d in (exact | partial) & wanted}
        named = set(tokenize(" ".join(commands_named)))  # (the words of each, once)
        named_with_kind = (*spec.paths, *spec.exceptions, *spec.tools, spec.kind_because)
        handles = set(tokenize(" ".join((*named_with_kind, spec.subject)))) | KIND_WORDS
        extra_terms = [t for t in self.terms if t not in named and t not in handles]
        extra = self._bm25_of(
            [t for t in extra_terms if t not in GENERIC and t not in FILLER], strong
        )
        # where each call is in the session: stored with the documents, so the session's
        # call log is read only for an ordinal (it counts every call) or for documents
        # written without it; without the session's calls, the documents' own order
        log: CallLog | None = None
        stored = self.search.calls is not None and spec.ordinal is None
        stored = stored and all("pos" in (self.docs[d].meta or {}) for d in wanted)
        if self.search.calls is not None and not stored:
            log = self.search.calls()
            log = log if log is not None and len(log) else None
        seqs: dict[str, int] = {}
        for d in wanted:
            doc = self.docs[d]
            if stored:
                seq = (doc.meta or {}).get("pos")
            elif log is not None:
                seq = log.positions.get(doc.call)
            else:
                seq = None
            seqs[d] = seq if type(seq) is int else doc.ord
        # without an ordinal or a tool named, only the command named exactly reaches the top
        # level: when it has k outputs or more, the others cannot be among the hits (they
        # count only for recency, through the newest place among all)
        keep = wanted
        if spec.ordinal is None and not spec.tools and len(exact & wanted) >= k:
            keep = exact & wanted
        pref_of = self._pref_error if spec.wants_error else self._pref
        cands: list[Candidate] = []
        for d in sorted(keep, key=lambda d: (self.docs[d].ord, d)):
            doc = self.docs[d]
            p = doc.pointer
            is_stub = doc.rank is None
            cands.append(
                Candidate(
                    pointer=p,
                    seq=seqs[d],
                    bm25=scores.get(d, 0.0) * (1.0 + 0.1 * self._created(d) / self.top),
                    command=2 if d in exact else 1 if d in partial else 0,
                    path=strength.get(d, 0),
                    lines=lines_match(spec.lines, p.lines),
                    tool=(d in tool_docs) if is_stub else p.tool_name in spec.tools,
                    pattern=d in pattern_docs,
                    url=d in url_docs,
                    anchors=anchor_hits.get(d, 0),
                    exception=d in exc_docs,
                    primary=primary_exception(p) in exc,
                    failed=doc.failed,
                    pref=1.0 if is_stub else pref_of(d),
                    extra=extra.get(d, 0.0),
                    kind=not is_stub and kind_matches(spec.kind, p, doc.failed),
                    subject=not is_stub and subject_matches(spec.kind, spec.subject, p),
                )
            )
        if log is None and spec.ordinal is not None:
            log = self.search.internal_log()
        calls = log if spec.ordinal is not None else None
        newest = max(seqs.values(), default=0)
        ranked = rerank(cands, spec, calls=calls, newest=newest)[:k]
        return self._hits(ranked)

    # ------------------------------------------------------------ commands

    def _commands(
        self,
        commands: Mapping[str, set[str]],
        filed: Mapping[str, str],
        words_of: Mapping[str, set[str]],
    ) -> tuple[set[str], set[str], set[str]]:
        """Documents of the commands named exactly and in part, and the commands named in
        part whose documents are still to be looked up."""
        exact: set[str] = set()
        partial: set[str] = set()
        more: set[str] = set()
        quoted = self.quoted
        for q in quoted:
            exact.update(commands.get(q, ()))
        named = set(quoted)
        flat_query = " ".join(self.query.split())
        # a command that appears verbatim in the question has its longest word in it
        qtoks = set(tokenize(self.query))
        candidates = [c for c, w in filed.items() if w and w in qtoks]
        verbatim = [c for c in candidates if c not in named and len(c) >= 6 and c in flat_query]
        # a whole (multi-line) command in backticks: quotes inside it are part of it
        spans = [normalize_command(m.group(1)) for m in _SPAN.finditer(self.query)]
        longer = [*verbatim, *(q for q in quoted if q in commands)]
        for cmd in verbatim:
            if any(cmd != other and cmd in other for other in longer):
                continue  # "python x.py" inside "python x.py --fast": the longer one is meant
            # quotes inside the command ("sed -n '1,5p' x.py") do not make it a fragment
            whole = all(q in cmd for q in quoted) or any(span.startswith(cmd) for span in spans)
            (exact if whole else partial).update(commands[cmd])
        # a quoted fragment of a longer command: every word of it is a word of the command
        for q in quoted:
            toks = set(tokenize(q))
            if len(q) < 4 or not toks:
                continue
            for cmd in words_of.get(longest_token(q), ()):
                if cmd != q and q in cmd and toks <= set(tokenize(cmd)):
                    if cmd in commands:
                        partial.update(commands[cmd])
                    else:
                        more.add(cmd)
        return exact, partial, more

    # ------------------------------------------------------------ documents

    def _fetch(self, wanted: Iterable[str], *, again: bool = False) -> None:
        """Read the metadata of documents not read yet (``again``: also of those given)."""
        missing = sorted(wanted) if again else sorted(d for d in wanted if d not in self.docs)
        for d, meta in self.src.metas(missing).items():
            got = _doc(meta)
            if got is not None:
                self.docs[d] = got

    def _created(self, d: str) -> int:
        return self.docs[d].created

    def _pref(self, d: str) -> float:
        return _preference(self.docs[d], False)

    def _pref_error(self, d: str) -> float:
        return _preference(self.docs[d], True)

    def _bm25_of(self, terms: list[str], docs: set[str]) -> dict[str, float]:
        """BM25 of ``terms`` for the given documents only."""
        if not docs:
            return {}
        limit = max(BM25_FETCH, 4 * len(docs))
        if terms == self.first_terms and limit == BM25_FETCH:  # the same query: asked already
            scores = self.first
        else:
            scores = self.search.bm25(self.src, terms, limit=limit)
        return {d: s for d, (s, _) in scores.items() if d in docs}

    def _hits(self, ranked: list[Candidate]) -> list[Hit]:
        """The hits with their whole pointers (read now: ranking needed only a part)."""
        sid = self.search.store.session.session_id
        ids = [f"{sid}:{c.pointer.id}" for c in ranked]
        missing = [d for d in ids if d in self.docs and self.docs[d].meta is None]
        self._fetch(missing, again=True)
        metas = {d: m for d in ids if (m := self._meta(d)) is not None}
        full = self.src.full(metas) if metas else {}
        hits: list[Hit] = []
        for c, d in zip(ranked, ids, strict=True):
            pointer = full.get(d) or self.search.store.find(c.pointer.id) or c.pointer
            body = self.search.store.restore(pointer).text
            hits.append(
                Hit(
                    pointer=pointer, score=round(c.score, 4), text_preview=snippet(body, self.terms)
                )
            )
        return hits

    def _meta(self, d: str) -> Mapping[str, Any] | None:
        doc = self.docs.get(d)
        return doc.meta if doc is not None else None


def _preference(doc: _Doc, wants_error: bool) -> float:
    """The seed's preferences (5.3) as a factor; recency is applied at query time."""
    rank = doc.rank
    if rank is None:
        return 1.0
    factor = 1.0
    if rank.get("sourceScope") == "sub_agent":
        factor *= 1.15
    if rank.get("role") == "tool":
        factor *= 1.1
    if rank.get("errorish") is True:
        factor *= 1.2 if wants_error else 1.05
    if wants_error and doc.failed:
        factor *= 1.25
    return factor


__all__ = ["BM25_CANDIDATES", "BM25_FETCH", "Hit", "Question"]
