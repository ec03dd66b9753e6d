"""Reading a recall question and ordering the candidates it found (issue 11, parts 2 and 3).

Candidate retrieval (BM25 and the exact lookups of :mod:`.search`) finds what *could* answer;
this module decides the order, as pure functions over the candidates and the question:

1. :func:`parse_query` reads what the question names: commands (in backticks or verbatim),
   file paths (any form: ``./pkg/x.py``, ``/testbed/pkg/x.py``), a line range, exception types,
   tool names, and an ordinal ("the first run", "the run before last", "before the fix",
   第二次, 上一次, 修复之前).
2. :func:`rerank` gives every candidate a *match level*: 3 the very call named (the command, or
   the tool with its path, range and pattern), 2 a strong handle (a command fragment, the path,
   a URL), 1 a weak one (an anchor, a pattern, the tool), 0 words only. Inside the best level
   a question that names a group of outputs (the runs of a command, the reads of a file, the
   outputs that show one exception type, the failing commands) gets its member by ordinal,
   else the newest; everything else follows by score.

Ordinals count over every call of the session when the caller knows them (``calls``), so "the
second run" is the second run even if the first never left the view.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .calls import CallLog, path_strength
from .fields import normalize_path, pointer_key
from .model import EvidencePointer
from .rank_ordinal import Ordinal, parse_ordinal, strip_ordinals
from .understand import PROGRAM_KINDS, asked_kind, counts_runs

LEVEL = 1_000.0
_I = re.IGNORECASE

_QUOTED = re.compile(r"`([^`\n]+)`|\"([^\"\n]{3,})\"|'([^'\n]{3,})'")
_PATH_TOKEN = re.compile(r"(?<![\w/.:\-*])((?:\.{0,2}/)?[\w.\-*]+(?:/[\w.\-*]+)*)(?::(\d+))?")
_LINES = [
    re.compile(r"\blines? (\d+)\s*(?:-|–|to|through|thru|\.\.|,)\s*(\d+)", _I),
    re.compile(r"\bview_range=?\s*\[\s*(\d+)\s*,\s*(-?\d+)\s*\]", _I),
    re.compile(r"第\s*(\d+)\s*(?:-|到|至|~)\s*(\d+)\s*行"),
]
_OFFSET = re.compile(r"\boffset[=: ]\s*(\d+)", _I)
_LIMIT = re.compile(r"\blimit[=: ]\s*(\d+)", _I)
_ONE_LINE = re.compile(r"\bline (\d+)\b|第\s*(\d+)\s*行", _I)
_EXC = re.compile(r"\b((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Warning|Exit|Interrupt))\b")
_URL = re.compile(r"https?://[^\s'\"<>`)]+")
_ERRORISH = re.compile(
    r"error|fail|traceback|stack|exception|crash|broke|报错|错误|失败|异常|堆栈|崩溃", _I
)
_FAILISH = re.compile(r"fail|error|broke|crash|失败|报错|出错|错误", _I)
_FAILED_RUN = re.compile(r"\b(?:fail(?:ed|ing|s)?|broke|crash(?:ed|es|ing)?)\b|失败|出错|崩溃", _I)
_EXTENSION = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,7}$")
SUBCOMMANDS = frozenset({"view", "create", "str_replace", "insert", "undo_edit", "write"})


@dataclass(frozen=True, kw_only=True, slots=True)
class QuerySpec:
    text: str
    quoted: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    lines: tuple[int, int] | None = None
    exceptions: tuple[str, ...] = ()
    urls: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    subcommands: tuple[str, ...] = ()
    ordinal: Ordinal | None = None
    wants_error: bool = False
    wants_failing: bool = False
    #: asks for a run that failed ("the first time it failed", 失败的那次), not an error text
    failed_run: bool = False
    #: the kind of output asked for (:data:`.understand.KINDS`) and the words that said so
    kind: str | None = None
    kind_because: str = ""
    #: what the kind of output is about when named with it ("the grep for X": X)
    subject: str = ""


def query_paths(text: str) -> tuple[str, ...]:
    """File paths a question names (normalized), URLs and test ids left out."""
    out: list[str] = []
    clean = _URL.sub(" ", text)
    for m in _PATH_TOKEN.finditer(clean):
        token = m.group(1).split("::", 1)[0].rstrip(".")
        last = token.rsplit("/", 1)[-1]
        if "/" not in token and not _EXTENSION.search(last):
            continue
        if token.replace(".", "").replace("/", "").isdigit():
            continue
        norm = normalize_path(token)
        if norm and norm not in out:
            out.append(norm)
    return tuple(out)


def query_lines(text: str) -> tuple[int, int] | None:
    for pattern in _LINES:
        m = pattern.search(text)
        if m:
            return int(m.group(1)), max(0, int(m.group(2)))
    off, lim = _OFFSET.search(text), _LIMIT.search(text)
    if lim:
        first = int(off.group(1)) if off else 1
        return first, first + int(lim.group(1)) - 1
    return None


def parse_query(text: str, tools: Iterable[str] = ()) -> QuerySpec:
    """What a recall question names; ``tools`` are the tool names known to the index."""
    quoted = tuple(next(g for g in m.groups() if g) for m in _QUOTED.finditer(text))
    words = set(re.findall(r"[A-Za-z_][\w\-]*", text))
    ordinal = parse_ordinal(text)
    kind = asked_kind(text)
    return QuerySpec(
        text=text,
        quoted=quoted,
        paths=query_paths(text),
        lines=query_lines(text),
        exceptions=tuple(dict.fromkeys(m.group(1).rsplit(".", 1)[-1] for m in _EXC.finditer(text))),
        urls=tuple(_URL.findall(text)),
        tools=tuple(t for t in tools if t in words or (len(t) > 3 and f" {t} " in f" {text} ")),
        subcommands=tuple(w for w in words if w in SUBCOMMANDS),
        ordinal=ordinal,
        wants_error=bool(_ERRORISH.search(text)),
        wants_failing=bool(_FAILISH.search(text)),
        failed_run=bool(_FAILED_RUN.search(text)),
        kind=kind.kind if kind is not None else None,
        kind_because=kind.because if kind is not None else "",
        subject=kind.subject if kind is not None else "",
    )


# --------------------------------------------------------------------------- candidates


@dataclass(kw_only=True, slots=True)
class Candidate:
    """One retrieved pointer with what matched; ``seq`` orders calls (oldest first)."""

    pointer: EvidencePointer
    seq: int
    bm25: float = 0.0
    #: 2 the command named exactly, 1 a fragment of it
    command: int = 0
    #: components of the longest path named by the question that this call named (0: none)
    path: int = 0
    #: 2 the exact line range, 1 an overlapping one, -1 another range
    lines: int = 0
    tool: bool = False
    pattern: bool = False
    url: bool = False
    anchors: int = 0
    #: the output shows an exception type the question names
    exception: bool = False
    #: ... and it is the exception the output ends with
    primary: bool = False
    failed: bool = False
    pref: float = 1.0
    #: BM25 of the question's words that are not part of the named command
    extra: float = 0.0
    #: the output is of the kind of output the question asks for
    kind: bool = False
    #: ... and about the subject named with the kind (the pattern searched, the test run)
    subject: bool = False
    #: how near the question it is in meaning, 0..1 among the candidates (None: not asked)
    semantic: float | None = None
    #: how an ordinal chose it ("number 2 of 5 ..."), for explaining the hit
    picked: str = ""
    level: int = field(default=0)
    score: float = field(default=0.0)


def primary_exception(p: EvidencePointer) -> str | None:
    return next((a[10:] for a in p.anchors if a.startswith("exception:")), None)


def _subcommand(p: EvidencePointer) -> str | None:
    if p.shell or not p.command:
        return None
    parts = p.command.split(" ", 2)
    return parts[1] if len(parts) > 1 and parts[1] in SUBCOMMANDS else None


def _level(c: Candidate, q: QuerySpec) -> int:
    p = c.pointer
    if c.command == 2 or (c.kind and c.subject):
        return 3
    if c.tool and (c.path or c.pattern or c.url):
        sub = _subcommand(p)
        sub_ok = not q.subcommands or sub in q.subcommands
        lines_ok = c.lines == 2 if q.lines else not p.lines
        pattern_ok = c.pattern or not p.patterns or p.action != "search"
        if sub_ok and lines_ok and pattern_ok and (c.path or not q.paths):
            return 3
    if c.command == 1 or c.url or (c.path and c.lines >= 0) or (c.pattern and c.path):
        return 2
    if c.kind and q.kind in PROGRAM_KINDS:  # a listing, an install, a linter's run asked for
        return 2
    if c.exception:
        return 2
    if c.path or c.pattern or c.anchors or c.tool:
        return 1
    return 0


#: Weight of the semantic similarity (0..1 among the candidates) where nothing is named.
SEMANTIC_LOW = 12.0


def _within(c: Candidate, q: QuerySpec, newest: int) -> float:
    """The order inside one match level."""
    p = c.pointer
    sem = c.semantic
    if c.level < 2:
        score = c.bm25 * c.pref + 4.0 * c.anchors + 2.0 * c.path / (c.path + 1)
        score += 8.0 if c.kind else 0.0
        score += SEMANTIC_LOW * sem if sem is not None else 0.0
        return score + (2.0 if c.pattern else 0.0) + (6.0 if c.exception else 0.0)
    # the named thing is found: a file named alone means its content (a read); then a failure
    # when an error is asked for; then specific extra words; then the newest
    score = 20.0 if p.role == "tool" else 0.0  # an output, not a message quoting it
    if q.kind is not None:
        score += 50.0 if c.kind else 0.0  # the kind of output asked for
    elif sem is not None:  # what the question means, where its words do not say it
        score += 50.0 * sem
    elif q.paths and c.command < 2 and p.action == "read":
        score += 50.0
    if q.wants_error and c.failed and not c.exception:
        score += 15.0  # "the error output of `cmd`": its failing run (an error type is named)
    if c.primary:
        score += 0.5  # the output ends with the error named, a tie-break after recency
    score += 4.0 * max(0, c.lines) + (2.0 if c.pattern else 0.0)
    score += min(10.0, 4.0 * c.extra) + 2.0 * (max(0, c.seq) / max(1, newest))
    return score


def _same_call(best: Candidate, pool: Sequence[Candidate]) -> list[Candidate]:
    """The runs of the call named (level 3)."""
    if best.kind and best.subject and best.command < 2:  # the search for X, the tests of Y
        return [c for c in pool if c.kind and c.subject]
    if best.command != 2:
        return [c for c in pool if c.level == 3]
    same = [c for c in pool if c.command == 2]
    if not best.pointer.command:
        return same
    key = pointer_key(best.pointer)
    return [c for c in same if pointer_key(c.pointer) == key] or same


def _of_path(best: Candidate, pool: Sequence[Candidate], q: QuerySpec) -> list[Candidate]:
    """The outputs about the file named: of the kind asked for, else its reads."""
    group = [c for c in pool if c.path and c.lines >= 0]
    if q.kind is not None and best.kind:
        return [c for c in group if c.kind]
    if best.semantic is not None:  # the kind of output nearest in meaning: best's action
        return [c for c in group if c.pointer.action == best.pointer.action] or group
    return [c for c in group if c.pointer.action == "read"] or group


def _outputs(best: Candidate, pool: Sequence[Candidate], q: QuerySpec) -> list[Candidate]:
    """The outputs: tool results, or for an agent that sends them as user messages
    (mini-swe-agent's "<returncode>..." observations) the user messages; of the kind asked
    for, else the failing ones when a failure is asked for."""
    tools = [c for c in pool if c.pointer.role == "tool"]
    tools = tools or [c for c in pool if c.pointer.role == "user"]
    if q.kind is not None and best.kind:
        return [c for c in tools if c.kind]
    return [c for c in tools if c.failed] if q.wants_failing else tools


def _group(best: Candidate, pool: Sequence[Candidate], q: QuerySpec) -> list[Candidate]:
    """The outputs an ordinal counts among: runs of the call, reads of the path, outputs
    showing the exception, or the failing commands."""
    if best.level == 3:
        return _same_call(best, pool)
    if best.level >= 2 and best.path:
        return _of_path(best, pool, q)
    shown = [c for c in pool if c.exception] if q.exceptions else []
    if shown:
        return [c for c in shown if c.pointer.role == "tool"] or shown
    return _outputs(best, pool, q)


def _pick(
    group: Sequence[Candidate], ordinal: Ordinal, runs: Sequence[int] | None, edits: Sequence[int]
) -> Candidate | None:
    """The member of ``group`` the ordinal names. ``runs``: the positions of every call of the
    group in the session (also those still in view); ``edits``: positions of edits."""
    if not group:
        return None
    members = sorted(group, key=lambda c: c.seq)
    seqs = sorted(set(runs)) if runs else [c.seq for c in members]
    if ordinal.fix is not None:
        newest = seqs[-1]
        fixes = [e for e in edits if e < newest and any(s < e for s in seqs)]
        if ordinal.fix == "after":
            target = newest
        elif fixes:
            before = [s for s in seqs if s < fixes[-1]]
            target = before[-1] if before else seqs[0]
        else:
            target = seqs[-2] if len(seqs) > 1 else seqs[0]
    else:
        i = ordinal.index
        if i >= len(seqs):
            i = len(seqs) - 1
        if i < -len(seqs):
            i = 0
        target = seqs[i]
    exact = [c for c in members if c.seq == target]
    if exact:
        return exact[-1]
    # the run asked for is not evidence (still in view): the nearest one that is
    return min(members, key=lambda c: (abs(c.seq - target), c.seq > target))


def rerank(
    candidates: Sequence[Candidate],
    q: QuerySpec,
    *,
    calls: CallLog | None = None,
    newest: int | None = None,
) -> list[Candidate]:
    """``candidates`` best first (sets their ``level`` and ``score``, nothing else). ``calls``:
    the session's calls, so that ordinals count also the runs still in view. ``newest``: the
    newest ``seq`` of every candidate found (default: of those given), recency's scale."""
    if not candidates:
        return []
    if newest is None:
        newest = max(c.seq for c in candidates)
    for c in candidates:
        c.level = _level(c, q)
        c.score = c.level * LEVEL + _within(c, q, newest)
    ranked = sorted(candidates, key=lambda c: (c.score, c.seq), reverse=True)
    top = ranked[0]
    if q.ordinal is None:
        return ranked
    # an ordinal with nothing named ("the first failing command") counts every tool output
    pool = [c for c in ranked if c.level >= top.level] if top.level >= 2 else ranked
    group = _group(top, pool, q)
    key = group_key_of(top, q) if calls is not None else None
    runs = calls.runs(key) if calls is not None and key else None
    failing = [c for c in group if c.failed] if q.failed_run else []
    if failing:  # "the first time it failed": counted among the runs that failed
        group, runs = failing, None
    chosen = _pick(group, q.ordinal, runs, calls.edits if calls is not None else ())
    if chosen is None:
        return ranked
    chosen.picked = _picked_how(chosen, q.ordinal, runs, group)
    rest = [c for c in ranked if c is not chosen]
    return [chosen, *rest]


def _picked_how(
    chosen: Candidate, ordinal: Ordinal, runs: Sequence[int] | None, group: Sequence[Candidate]
) -> str:
    """How an ordinal chose ``chosen`` among the runs counted (the group's when not known)."""
    seqs = sorted(set(runs) if runs else {c.seq for c in group})
    which = "before the fix" if ordinal.fix == "before" else "after the fix" if ordinal.fix else ""
    if chosen.seq in seqs:
        place = f"number {seqs.index(chosen.seq) + 1} of {len(seqs)}"
    else:
        place = f"the nearest of {len(seqs)} that left the view"
    return f"{place} ({which or 'the ordinal asked'})"


def group_key_of(c: Candidate, q: QuerySpec) -> str | None:
    """The key under which the caller lists a group's calls: ``call:<key>`` for runs of one
    call, ``read:<path>`` for reads of a file, ``kind:<kind>:<path or =subject>`` for the
    outputs of a kind; None when the group is not about calls (or the log cannot tell)."""
    by_kind = q.kind is not None and c.kind
    if by_kind and c.subject and c.command < 2:
        return f"kind:{q.kind}:={q.subject}" if counts_runs(q.kind) else None
    if c.level == 3 and c.pointer.command:
        return "call:" + pointer_key(c.pointer)
    if by_kind and q.kind != "read":
        about = q.paths[0] if c.path and q.paths else ""
        return f"kind:{q.kind}:{about}" if counts_runs(q.kind) else None
    return "read:" + q.paths[0] if c.path and q.paths else None


def lines_match(q: tuple[int, int] | None, p: str | None) -> int:
    if q is None or not p:
        return 0
    a, _, b = p.partition("-")
    try:
        first, last = int(a), int(b) if b else 0
    except ValueError:
        return 0
    if (first, last) == q:
        return 2
    qa, qb = q
    if first <= (qb or qa) and (last == 0 or qa <= last):
        return 1
    return -1


__all__ = [
    "CallLog",
    "Candidate",
    "Ordinal",
    "QuerySpec",
    "group_key_of",
    "lines_match",
    "parse_ordinal",
    "parse_query",
    "path_strength",
    "primary_exception",
    "rerank",
    "strip_ordinals",
]
