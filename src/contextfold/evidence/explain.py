"""Why recall picked a hit, in a few words (what matched, which of several it is)."""

from __future__ import annotations

from .rank import Candidate, QuerySpec

_KIND_NAMES = {
    "read": "a file's content as read",
    "run": "a program's output",
    "traceback": "a traceback",
    "tests": "test results",
    "search": "a search result",
    "diff": "a diff",
    "list": "a directory listing",
    "install": "a package install's output",
    "lint": "a linter's or type checker's report",
    "report": "a sub-agent's report",
}


def _what(c: Candidate, q: QuerySpec) -> list[str]:
    out: list[str] = []
    if c.command == 2:
        out.append("the command named")
    elif c.command == 1:
        out.append("part of the command named")
    if c.kind and q.kind:
        out.append(f"{_KIND_NAMES.get(q.kind, q.kind)} (asked: {q.kind_because!r})")
    if c.subject and q.subject:
        out.append(f"about {q.subject!r}")
    if c.path:
        out.append("the file named")
    if c.tool:
        out.append("the tool named")
    if c.exception:
        out.append("shows the error type named")
    if c.pattern:
        out.append("the pattern named")
    if c.url:
        out.append("the URL named")
    if c.anchors:
        out.append("names in it match")
    if c.semantic is not None and c.semantic >= 1.0:
        out.append("semantic match (the nearest in meaning)")
    return out


def explain(c: Candidate, q: QuerySpec) -> str:
    """``c`` as ranked for ``q``: what matched, then how it was chosen among those."""
    parts = _what(c, q)
    if c.picked:
        parts.append(c.picked)
    elif not parts:
        parts.append("words of the question (BM25)")
    if q.wants_error and c.failed and not c.picked:
        parts.append("a failing run")
    return "; ".join(parts)


__all__ = ["explain"]
