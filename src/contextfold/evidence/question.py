"""Answering one recall question from the store: BM25 and the exact lookups it names, in a few
round trips, then :func:`.rank.rerank` over the documents found (see :mod:`.search`)."""

from __future__ import annotations

import dataclasses
import heapq
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..jsontypes import JSON
from . import semantic
from .classify import normalize_command
from .explain import explain
from .fields import path_suffixes, pattern_key
from .keys import cmd_key, fits, longest_token
from .lookups import KeySource
from .model import EvidencePointer
from .qdocs import Doc, Found, after, doc_of, file_key, preference
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
from .understand import KIND_WORDS, command_kinds, kind_matches, kind_programs, subject_matches

if TYPE_CHECKING:
    import numpy as np

    from .search import EvidenceSearch

#: Documents taken from BM25 alone into re-ranking.
BM25_CANDIDATES = 60
#: BM25 rows fetched from the store for a query (re-ranking may drop some).
BM25_FETCH = 200
#: How much preference and recency weigh a BM25 score at most when the BM25 candidates are
#: chosen (:func:`.qdocs.preference` of a sub-agent's tool output showing an error, not asked
#: for an error, times the newest one's recency).
WEIGHT_MAX = 1.15 * 1.1 * 1.05 * 1.1
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
    #: why it was picked: what matched, which of several it is
    why: str = ""


class Question:
    """One search: the lookups a question needs, in a few round trips to the store."""

    def __init__(self, search: EvidenceSearch, src: KeySource, query: str, top: int) -> None:
        self.search = search
        self.src = src
        self.query = query
        self.top = top
        self.docs: dict[str, Doc] = {}
        self.spec = parse_query(query, ())
        clean = strip_ordinals(query)
        self.clean = " ".join(clean.split())
        #: the question's semantic vector, when it was asked of the model
        self.qvec: np.ndarray[tuple[int], np.dtype[np.float32]] | None = None
        self.terms = [t for t in dict.fromkeys(tokenize(clean)) if t not in STOPWORDS]
        quoted = [
            normalize_command(next(g for g in m.groups() if g)) for m in _QUOTED.finditer(query)
        ]
        self.quoted = [q for q in quoted if q]
        self.low = query.lower()
        self.flat_pattern = f" {pattern_key(query)} "
        #: the first BM25 query (its words and hits)
        self.first_terms: list[str] = []
        self.first: dict[str, tuple[float, Mapping[str, JSON]]] = {}
        #: the first query found every document with any of its words
        self.complete = False

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
        # a listing, an install, a linter asked for: the commands of its programs
        prefixes += [f"cmdtok:{longest_token(prog)} " for prog in kind_programs(spec.kind)]
        return [k for k in keys if fits(k)], [p for p in prefixes if fits(p)]

    def answer(self, k: int, pick: Callable[[Iterator[Hit]], list[Hit]] | None = None) -> list[Hit]:
        """The ``k`` best hits: three rounds of lookups, then :func:`.rank.rerank`. ``pick``
        chooses among them, best first, reading as many as it needs (a hit's whole pointer is
        read when it gets there); the text of a hit is restored for the hits chosen only."""
        hits = self._pointed(self._ranked(k))
        chosen = pick(hits) if pick is not None else list(hits)
        return [self._previewed(h) for h in chosen]

    def _ranked(self, k: int) -> list[Candidate]:
        scores = self._first_bm25()
        by = self._first_lookup()
        f = self._named(by)
        self._semantic_kind(f)
        self._second_lookup(f)
        wanted = self._candidates(scores, f)
        near = self._semantic(f, wanted)
        seqs, log = self._positions(wanted)
        cands = [
            self._candidate(d, seqs[d], scores, f, near.get(d))
            for d in sorted(self._kept(wanted, f, k), key=lambda d: (self.docs[d].ord, d))
        ]
        if log is None and self.spec.ordinal is not None:
            log = self.search.internal_log()
        calls = log if self.spec.ordinal is not None else None
        newest = max(seqs.values(), default=0)
        return rerank(cands, self.spec, calls=calls, newest=newest)[:k]

    # ------------------------------------------------------------ round 1: its lookups

    def _first_bm25(self) -> dict[str, float]:
        """The first BM25 query's scores; their metadata is read when a hit is used."""
        self.first_terms = [t for t in self.terms if t not in FILLER]
        self.first, self.complete = self.search.bm25_all(self.src, self.first_terms)
        return {d: s for d, (s, _) in self.first.items()}

    def _best_bm25(self, scores: Mapping[str, float]) -> set[str]:
        """The :data:`BM25_CANDIDATES` best hits by score, preference and recency (ties: the
        store's order). The metadata of a hit is read only when it can still be among them: no
        preference and recency together weigh more than :data:`WEIGHT_MAX`."""
        best: list[tuple[float, int, str]] = []  # (weight, -place, doc): a min-heap
        for i, (d, s) in enumerate(scores.items()):
            bound = s * WEIGHT_MAX if s > 0 else s  # the most its weight can be
            if len(best) >= BM25_CANDIDATES and bound < best[0][0]:
                continue
            self._fetch((d,))
            if d not in self.docs:
                continue
            item = (s * self._pref(d) * (1.0 + 0.1 * self._created(d) / self.top), -i, d)
            if len(best) < BM25_CANDIDATES:
                heapq.heappush(best, item)
            elif item > best[0]:
                heapq.heapreplace(best, item)
        return {d for _, _, d in best}

    def _first_lookup(self) -> dict[str, set[str]]:
        """key -> its documents, for the keys the question names; the tools it names."""
        keys, prefixes = self._first_keys()
        by: dict[str, set[str]] = {}
        for key, d in self.src.lookup(keys, prefixes):
            by.setdefault(key, set()).add(d)
        tools = {key[6:] for key in by if key.startswith("tools:")}
        words = set(_WORDS.findall(self.query))
        padded = f" {self.query} "
        named = [t for t in sorted(tools) if t in words or (len(t) > 3 and f" {t} " in padded)]
        self.spec = dataclasses.replace(self.spec, tools=tuple(named))
        return by

    def _named(self, by: Mapping[str, set[str]]) -> Found:
        """What the first lookups found: commands, anchors, paths, URLs, patterns, errors."""
        f = Found(by=by)
        for key, ds in by.items():
            file_key(f, key, ds)
        f.exact, f.partial, f.more = self._commands(f.commands, f.filed, f.words_of)
        for term in self.terms:
            for value in f.anchor_words.get(term, ()):
                if value in self.low:
                    f.anchors[value] = f.anchors.get(value, 0) + 1
        f.strength = self._path_strength(by)
        f.url_docs = f.docs_of("url:", self.spec.urls)
        f.pattern_docs = {
            d
            for pat, ds in f.patterns.items()
            if len(pat) >= 2 and f" {pat} " in self.flat_pattern
            for d in ds
        }
        f.exc_docs = f.docs_of("exc:", self.spec.exceptions)
        self._of_kind(f)
        return f

    def _of_kind(self, f: Found) -> None:
        """The commands of the program kind asked for (:func:`.understand.command_kinds`):
        their documents when already found, else to be looked up."""
        kind = self.spec.kind
        programs = {longest_token(prog) for prog in kind_programs(kind)}
        if not programs:
            return
        cmds = {c for w in programs for c in f.words_of.get(w, ()) if kind in command_kinds(c)}
        for cmd in sorted(cmds):
            if cmd in f.commands:
                f.kind_docs.update(f.commands[cmd])
            else:
                f.kind_more.add(cmd)

    def _path_strength(self, by: Mapping[str, set[str]]) -> dict[str, int]:
        """How many components a named path has in common with the call's (path_strength):
        all of the question's path when it is a suffix of the call's, else all of the call's
        path when that is a suffix of the question's."""
        strength: dict[str, int] = {}
        for qp in self.spec.paths:
            ways = [(f"path:{qp}", qp), *((f"full:{s}", s) for s in path_suffixes(qp)[1:])]
            for key, path in ways:
                for d in by.get(key, ()):
                    strength[d] = max(strength.get(d, 0), path.count("/") + 1)
        return strength

    # ------------------------------------------------------ round 2: what those lead to

    def _second_keys(self, f: Found) -> tuple[list[str], list[str]]:
        spec = self.spec
        keys = [cmd_key(c) for c in f.more | f.kind_more] + [f"anc:{a}" for a in f.anchors]
        prefixes: list[str] = []
        if f.bulk(spec):
            prefixes.append("out:1" if spec.wants_failing else "out:")
            if spec.wants_error:  # errors shown in messages too (observations sent as user text)
                prefixes.append("err:")
            keys += [f"tool:{t}" for t in spec.tools]
        return [k for k in keys if fits(k)], prefixes

    def _second_lookup(self, f: Found) -> None:
        keys, prefixes = self._second_keys(f)
        for key, d in self.src.lookup(keys, prefixes):
            if key.startswith("cmd:"):
                cmd = after(key, "cmd:")[1]
                if cmd in f.kind_more:
                    f.kind_docs.add(d)
                if cmd in f.more or cmd not in f.kind_more:
                    f.partial.add(d)
            elif key.startswith("anc:"):
                f.anchor_hits[d] = f.anchor_hits.get(d, 0) + f.anchors[key[4:]]
            elif key.startswith("out:"):
                place, _, call = key[5:].partition(" ")
                f.outputs[d] = (int(place), key[4] == "1", call)
            elif key.startswith("tool:"):
                f.tool_docs.add(d)
            elif key.startswith("err:"):
                f.err_docs.add(d)
        f.partial -= f.exact

    # ------------------------------------------------------ round 3: the candidates

    def _candidates(self, scores: Mapping[str, float], f: Found) -> set[str]:
        """The documents ranked: the best of BM25 and every one a lookup found."""
        best = self._best_bm25(scores)
        wanted = best | f.strong() | set(f.anchor_hits) | (f.err_docs - f.outputs.keys())
        self._fetch(wanted)
        wanted &= self.docs.keys()
        self._fetch(d for d in f.outputs if d in self.first)  # (from the hits: no round trip)
        for d, (at, fail, call) in f.outputs.items():
            if d not in self.docs:  # counted for the ordinal only: what it is comes later
                bare = EvidencePointer(id=d.partition(":")[2], role="tool", tool_use_id=call)
                self.docs[d] = Doc(at, pointer=bare, failed=fail)
            wanted.add(d)
        self._extra_bm25(wanted, f)
        return wanted

    def _semantic_kind(self, f: Found) -> None:
        """The kind of output asked for, from the question's meaning, when its words do not
        say it (:class:`.semantic.Meanings`); nothing without the ``semantic`` extra."""
        if not semantic.kind_wanted(self.spec, self.quoted, f) or self.search.vectors() is None:
            return
        self.qvec = semantic.question_vector(semantic.frame(self.clean))
        kind = semantic.Meanings.kind_of(self.qvec) if self.qvec is not None else None
        if kind is not None:
            self.spec = dataclasses.replace(self.spec, kind=kind, kind_because=semantic.BECAUSE)

    def _semantic(self, f: Found, wanted: set[str]) -> dict[str, float]:
        """How near in meaning each candidate is (0..1 among them), when the question's words
        do not say what it wants (:func:`.semantic.wanted`) and it names no file; the nearest
        outputs join the candidates when it names nothing at all. Empty without the
        ``semantic`` extra."""
        if self.qvec is None or self.spec.paths or not semantic.wanted(self.spec, self.quoted, f):
            return {}  # (a file named: its content unless the meaning says another kind)
        vectors = self.search.vectors()
        if vectors is None:
            return {}
        sid = self.search.store.session.session_id
        sims = {f"{sid}:{pid}": s for pid, s in vectors.similarities(self.qvec).items()}
        if not sims:
            return {}
        if not f.strong():
            near = sorted(d for d, s in sims.items() if s >= semantic.SIM_FLOOR)
            best = heapq.nlargest(semantic.CANDIDATES, near, key=sims.__getitem__)
            self._fetch(best)
            wanted.update(d for d in best if d in self.docs)
        return semantic.relative(sims, sorted(wanted))

    def _extra_bm25(self, wanted: set[str], f: Found) -> None:
        """BM25 of the question's words that name neither a command it names, nor a path,
        an error type, a tool or the kind of output: what tells runs of one call apart."""
        spec = self.spec
        commands_named = {self.docs[d].command for d in (f.exact | f.partial) & wanted}
        named = set(tokenize(" ".join(commands_named)))  # (the words of each, once)
        named_with_kind = (*spec.paths, *spec.exceptions, *spec.tools, spec.kind_because)
        handles = set(tokenize(" ".join((*named_with_kind, spec.subject)))) | KIND_WORDS
        extra = [t for t in self.terms if t not in named and t not in handles]
        extra = [t for t in extra if t not in GENERIC and t not in FILLER]
        f.extra = self._bm25_of(extra, f.strong())

    def _positions(self, wanted: set[str]) -> tuple[dict[str, int], CallLog | None]:
        """Where each call is in the session: stored with the documents, so the session's
        call log is read only for an ordinal (it counts every call) or for documents written
        without it; without the session's calls, the documents' own order."""
        log: CallLog | None = None
        stored = self.search.calls is not None and self.spec.ordinal is None
        stored = stored and all("pos" in (self.docs[d].meta or {}) for d in wanted)
        if self.search.calls is not None and not stored:
            log = self.search.calls()
            log = log if log is not None and len(log) else None
        seqs: dict[str, int] = {}
        for d in wanted:
            doc = self.docs[d]
            if stored:
                seq = (doc.meta or {}).get("pos")
            else:
                seq = log.positions.get(doc.call) if log is not None else None
            seqs[d] = seq if type(seq) is int else doc.ord
        return seqs, log

    def _kept(self, wanted: set[str], f: Found, k: int) -> set[str]:
        """Without an ordinal or a tool named, only the command named exactly reaches the top
        level: when it has k outputs or more, the others cannot be among the hits (they count
        only for recency, through the newest place among all)."""
        exact = f.exact & wanted
        if self.spec.ordinal is None and not self.spec.tools and len(exact) >= k:
            return exact
        return wanted

    def _candidate(
        self, d: str, seq: int, scores: Mapping[str, float], f: Found, near: float | None
    ) -> Candidate:
        spec, doc = self.spec, self.docs[d]
        p = doc.pointer
        stub = doc.rank is None  # a bare output, taken to count an ordinal
        pref = 1.0 if stub else self._pref_error(d) if spec.wants_error else self._pref(d)
        return Candidate(
            pointer=p,
            seq=seq,
            bm25=scores.get(d, 0.0) * (1.0 + 0.1 * self._created(d) / self.top),
            command=2 if d in f.exact else 1 if d in f.partial else 0,
            path=f.strength.get(d, 0),
            lines=lines_match(spec.lines, p.lines),
            tool=(d in f.tool_docs) if stub else p.tool_name in spec.tools,
            pattern=d in f.pattern_docs,
            url=d in f.url_docs,
            anchors=f.anchor_hits.get(d, 0),
            exception=d in f.exc_docs,
            primary=primary_exception(p) in set(spec.exceptions),
            failed=doc.failed,
            pref=pref,
            extra=f.extra.get(d, 0.0),
            kind=not stub and kind_matches(spec.kind, p, doc.failed),
            subject=not stub and subject_matches(spec.kind, spec.subject, p),
            semantic=near,
        )

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
        """Read the metadata of documents not read yet (``again``: also of those given):
        of a first BM25 hit from the hit, of any other from the store."""
        missing = sorted(wanted) if again else sorted(d for d in wanted if d not in self.docs)
        if not again:
            for d in [d for d in missing if d in self.first]:
                got = doc_of(self.first[d][1])
                if got is not None:
                    self.docs[d] = got
            missing = [d for d in missing if d not in self.first]
        if not missing:
            return
        for d, meta in self.src.metas(missing).items():
            got = doc_of(meta)
            if got is not None:
                self.docs[d] = got

    def _created(self, d: str) -> int:
        return self.docs[d].created

    def _pref(self, d: str) -> float:
        return preference(self.docs[d], False)

    def _pref_error(self, d: str) -> float:
        return preference(self.docs[d], True)

    def _bm25_of(self, terms: list[str], docs: set[str]) -> dict[str, float]:
        """BM25 of ``terms`` for the given documents only."""
        if not docs:
            return {}
        limit = max(BM25_FETCH, 4 * len(docs))
        complete = self.complete and set(terms) <= set(self.first_terms)
        if complete and not docs & self.first.keys():
            return {}  # none of the documents has a word of the first query, nor of these
        if terms == self.first_terms and (limit == BM25_FETCH or complete):
            scores = self.first  # the same query: asked already
        else:
            scores = self.search.bm25(self.src, terms, limit=limit)
        return {d: s for d, (s, _) in scores.items() if d in docs}

    def _pointed(self, ranked: list[Candidate]) -> Iterator[Hit]:
        """The hits with their whole pointers, in order, each read when asked for (ranking
        needed only a part); their text is not restored yet (:meth:`_previewed`)."""
        sid = self.search.store.session.session_id
        ids = [f"{sid}:{c.pointer.id}" for c in ranked]
        missing = [d for d in ids if d in self.docs and self.docs[d].meta is None]
        self._fetch(missing, again=True)
        for c, d in zip(ranked, ids, strict=True):
            meta = self._meta(d)
            full = self.src.full({d: meta}) if meta is not None else {}
            pointer = full.get(d) or self.search.store.find(c.pointer.id) or c.pointer
            yield Hit(
                pointer=pointer, score=round(c.score, 4), text_preview="", why=explain(c, self.spec)
            )

    def _previewed(self, hit: Hit) -> Hit:
        """``hit`` with an excerpt of its restored text."""
        body = self.search.store.restore(hit.pointer).text
        return dataclasses.replace(hit, text_preview=snippet(body, self.terms))

    def _meta(self, d: str) -> Mapping[str, JSON] | None:
        doc = self.docs.get(d)
        return doc.meta if doc is not None else None


__all__ = ["BM25_CANDIDATES", "BM25_FETCH", "Hit", "Question"]
