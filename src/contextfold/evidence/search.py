"""Ranked retrieval over the evidence of a session (seed 004, section 5.3).

BM25 over each evidence body plus its hints (command, anchors, content types), with the seed's
preferences on top: sub-agent output, tool results, and stack traces / errors / test output
rank higher, and so does recent evidence. A command named in the query (in backticks, or
verbatim) is the strongest signal: "show me the full error output of `pytest -x`" ranks the
output of ``pytest -x`` first.

Retrieval is the store's persisted BM25 index (one row per pointer, written with the block
that made it): nothing is rebuilt when a session is reopened. Bodies are read for the top hits.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable
from dataclasses import dataclass

from .classify import normalize_command
from .model import EvidencePointer
from .store import NAMESPACE, EvidenceStore, command_key

#: Characters of a body that are indexed (head and tail of very large outputs).
INDEX_CHARS = 200_000
#: Runs of a command named in the query score above this; BM25 scores stay far below.
COMMAND_EXACT_BONUS = 1_000.0
COMMAND_PARTIAL_BONUS = 12.0
ANCHOR_BONUS = 4.0
SNIPPET_CHARS = 400
#: Candidates taken from the index before re-ranking.
CANDIDATES = 60
#: Runs of one command fetched at most.
RUNS_LIMIT = 500

_WORD = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./:\-]*")
_SPLIT = re.compile(r"[_./:\-]+")
_PATH_SPLIT = re.compile(r"[./:\-]+")
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_QUOTED = re.compile(r"`([^`\n]+)`|\"([^\"\n]{3,})\"|'([^'\n]{3,})'")
_ERRORISH = re.compile(
    r"error|fail|traceback|stack|exception|crash|broke|报错|错误|失败|异常|堆栈|崩溃", re.IGNORECASE
)


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


STOPWORDS = _words(
    "a an and are as at be by can could did do does for from give had has have how i in is it "
    "its me my of on or our please show that the their them then there these this those to us "
    "was we were what when where which who why will with would you your full entire complete "
    "again earlier before previous last time 的 了 吗 我 你 把 给 一下 刚才 之前"
)


#: Words that name a kind of evidence rather than a particular one.
GENERIC = _words(
    "error errors output outputs log logs trace traces stack traceback tracebacks failure "
    "failures failed fail failing result results message messages test tests run exception "
    "报错 错误 输出 日志 堆栈 失败 异常 结果 测试"
)


def tokenize(text: str) -> list[str]:
    """Lowercase words; identifiers also split on ``_./:-`` and camelCase (whole token kept);
    CJK runs as character bigrams (a single character stays a unigram)."""
    out: list[str] = []
    for m in _WORD.finditer(text):
        word = m.group(0).strip("./:-")
        if not word:
            continue
        low = word.lower()
        out.append(low)
        coarse = [p for p in _PATH_SPLIT.split(word) if p]
        if len(coarse) > 1:
            out.extend(p.lower() for p in coarse if "_" in p)
        parts = [p for p in _SPLIT.split(word) if p]
        if len(parts) > 1 or _CAMEL.search(word):
            for part in parts:
                sub = _CAMEL.split(part)
                if len(sub) > 1:
                    out.append(part.lower())
                out.extend(s.lower() for s in sub if len(s) > 1 or s.isdigit())
    for m in _CJK.finditer(text):
        run = m.group(0)
        if len(run) == 1:
            out.append(run)
        else:
            out.extend(run[i : i + 2] for i in range(len(run) - 1))
    return out


def _index_text(text: str) -> str:
    if len(text) <= INDEX_CHARS:
        return text
    half = INDEX_CHARS // 2
    return text[:half] + "\n" + text[-half:]


def snippet(text: str, terms: Iterable[str], width: int = SNIPPET_CHARS) -> str:
    """A short excerpt of ``text``: around the last line naming a query term (errors are
    usually at the end), else the head."""
    if len(text) <= width:
        return text
    low = text.lower()
    best = -1
    for term in terms:
        if len(term) >= 3:
            best = max(best, low.rfind(term))
    if best < 0:
        return text[: width - 1] + "…"
    start = max(0, text.rfind("\n", 0, max(0, best - width // 3)) + 1)
    start = min(start, max(0, best - width // 2))
    piece = text[start : start + width]
    return ("…" if start > 0 else "") + piece + ("…" if start + width < len(text) else "")


def _failed(p: EvidencePointer) -> bool:
    """A non-zero exit code or a stack trace."""
    if "stack_trace" in p.content_types:
        return True
    return any(a.startswith("exit_code:") and a != "exit_code:0" for a in p.anchors)


@dataclass(frozen=True, kw_only=True, slots=True)
class Hit:
    pointer: EvidencePointer
    score: float
    text_preview: str


class EvidenceSearch:
    """Ranked evidence of one session: the store's persisted BM25 index finds candidates, the
    seed's preferences re-rank them (nothing is held in memory or rebuilt on open)."""

    def __init__(self, store: EvidenceStore) -> None:
        self.store = store

    def __len__(self) -> int:
        return len({p.id for p in self.store.pointers()})

    def sync(self) -> int:
        """Kept for callers of the in-memory index: the persisted index is always current."""
        return 0

    def get(self, evidence_id: str) -> EvidencePointer | None:
        return self.store.find(evidence_id)

    def pointers(self) -> list[EvidencePointer]:
        return self.store.pointers()

    # ----------------------------------------------------------------- querying

    def _query(self, text: str, limit: int) -> list[tuple[EvidencePointer, float]]:
        session = self.store.session
        hits = session.store.search(NAMESPACE, text, session_id=session.session_id, limit=limit)
        out: list[tuple[EvidencePointer, float]] = []
        for h in hits:
            try:
                out.append((EvidencePointer.from_dict(h.meta["pointer"]), h.score))
            except (KeyError, ValueError, TypeError):
                continue
        return out

    def _runs(self, command: str) -> list[EvidencePointer]:
        key = command_key(command)
        if not key:
            return []
        return [
            p
            for p, _ in self._query(key, RUNS_LIMIT)
            if normalize_command(p.command or "") == command
        ]

    def search(self, query: str, k: int = 5) -> list[Hit]:
        """The ``k`` best pieces of evidence for ``query``, best first."""
        if k <= 0:
            return []
        terms = [t for t in dict.fromkeys(tokenize(query)) if t not in STOPWORDS]
        found = self._query(" ".join(terms), CANDIDATES) if terms else []
        pointers: dict[str, EvidencePointer] = {p.id: p for p, _ in found}
        scores: dict[str, float] = {p.id: s for p, s in found}
        quoted = [
            normalize_command(next(g for g in m.groups() if g)) for m in _QUOTED.finditer(query)
        ]
        quoted = [q for q in quoted if q]
        named = set(quoted)
        flat_query = " ".join(query.split())
        exact: set[str] = set()
        partial: set[str] = set()
        commands = {normalize_command(p.command) for p in pointers.values() if p.command}
        for q in quoted:
            for p in self._runs(q):
                pointers.setdefault(p.id, p)
                exact.add(p.id)
        for cmd in commands:
            if not cmd:
                continue
            if cmd not in named and len(cmd) >= 6 and cmd in flat_query:
                for p in self._runs(cmd):
                    pointers.setdefault(p.id, p)
                    (exact if not quoted else partial).add(p.id)
            for q in quoted:
                if len(q) >= 4 and cmd != q and q in cmd:
                    for p in self._runs(cmd):
                        pointers.setdefault(p.id, p)
                        partial.add(p.id)
        partial -= exact
        for pid in partial:
            scores[pid] = scores.get(pid, 0.0) + COMMAND_PARTIAL_BONUS
        low_query = query.lower()
        for pid, p in list(pointers.items()):
            for anchor in p.anchors:
                if anchor.startswith(("command:", "exit_code:")):
                    continue
                key = anchor.split(":", 1)[-1].lower()
                if len(key) >= 4 and key in low_query:
                    scores[pid] = scores.get(pid, 0.0) + ANCHOR_BONUS
        if not pointers:
            return []
        wants_error = bool(_ERRORISH.search(query))
        top = max(1, *(p.created_at for p in pointers.values()))
        ranked = heapq.nlargest(
            k,
            (
                (
                    base
                    * _preference(pointers[pid], wants_error)
                    * (1.0 + 0.1 * pointers[pid].created_at / top),
                    pointers[pid].created_at,
                    pid,
                )
                for pid, base in scores.items()
                if pid not in exact
            ),
        )
        if exact:
            runs = self._rank_runs([pointers[i] for i in exact], terms, wants_error)
            ranked = sorted(runs + ranked, reverse=True)[:k]
        hits: list[Hit] = []
        for score, _, pid in ranked:
            pointer = pointers[pid]
            body = self.store.restore(pointer).text
            hits.append(
                Hit(pointer=pointer, score=round(score, 4), text_preview=snippet(body, terms))
            )
        return hits

    def _rank_runs(
        self, exact: list[EvidencePointer], terms: list[str], wants_error: bool
    ) -> list[tuple[float, int, str]]:
        """Runs of a command named in the query rank above everything else. Generic words
        ("error", "output") cannot tell them apart: a failing run wins when the query asks for
        an error, then specific extra words ("the ImportError one"), then the latest run."""
        named = set(tokenize(" ".join(p.command or "" for p in exact)))
        rest = [t for t in terms if t not in named and t not in GENERIC]
        extra = {p.id: s for p, s in self._query(" ".join(rest), CANDIDATES)} if rest else {}
        order = sorted(exact, key=lambda p: p.created_at)
        out: list[tuple[float, int, str]] = []
        for rank, p in enumerate(order):
            score = COMMAND_EXACT_BONUS + 2.0 * rank / max(1, len(order) - 1)
            if wants_error and _failed(p):
                score += 15.0
            if p.id in extra:  # names a specific word of this run
                score += min(10.0, 4.0 + 4.0 * extra[p.id])
            out.append((score, p.created_at, p.id))
        return out


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
