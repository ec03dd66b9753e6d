"""The tolerant parser of summarizer output (part of :mod:`contextfold.core.anchors`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .anchors_model import ALL_ANCHOR_TYPES, ANCHOR_HEADERS, NA, Anchor, AnchorType


@dataclass(frozen=True, kw_only=True)
class ParsedSummary:
    #: Always five anchors, in ALL_ANCHOR_TYPES order (missing ones are "N/A").
    anchors: tuple[Anchor, ...]
    #: The "## Summary" body ("" when absent).
    summary: str
    #: Items of an "ARTIFACTS" section (four-section style), without bullets.
    artifacts: tuple[str, ...]
    #: What was missing or malformed, e.g. "missing section: Key Decisions".
    problems: tuple[str, ...]


_SUMMARY = "summary"
_ARTIFACTS = "artifacts"
_IGNORED = "ignored"
_SESSION = "session intent"

_ALIASES: dict[str, AnchorType | str] = {}
for _key, _names in {
    AnchorType.USER_INTENT: (
        "user intent",
        "intent",
        "user goal",
        "goal",
        "task",
        "user request",
    ),
    AnchorType.EXECUTION_PROGRESS: (
        "execution progress",
        "progress",
        "completed",
        "milestones",
        "done",
    ),
    AnchorType.KEY_DECISION: ("key decision", "decision", "decisions made"),
    AnchorType.TRIED_SOLUTION: (
        "tried solution",
        "tried approach",
        "attempted solution",
        "failed attempt",
        "attempt",
        "tried",
    ),
    AnchorType.NEXT_STEP: ("next step", "pending task", "todo", "next", "remaining work"),
    _SUMMARY: ("summary", "supplementary context"),
    _ARTIFACTS: ("artifact", "files", "file changed", "output"),
    _IGNORED: ("anchor", "compaction", "context compaction"),
    _SESSION: ("session intent", "session goal"),
}.items():
    for _name in _names:
        _ALIASES[" ".join(w.rstrip("s") for w in _name.split())] = _key

_MD_HEADER = re.compile(r"^\s{0,3}#{1,6}\s*(?P<title>.*?)\s*#*\s*$")
_BOLD_HEADER = re.compile(
    r"^\s*(?:\d+[.)]\s*)?(?:\*\*|__)(?P<title>[^*_]{1,60}?)(?:\*\*|__)\s*:?\s*(?P<rest>.*)$"
)
_PLAIN_HEADER = re.compile(
    r"^\s*(?:\d+[.)]\s*)?(?P<title>[A-Za-z][A-Za-z ]{1,40}?)\s*:\s*(?P<rest>.*)$"
)
_NA_VALUES = {"", "n/a", "- n/a", "* n/a", "none", "- none", "n/a.", "na", "-"}


def _normalize_title(title: str) -> str:
    t = title.strip().strip("*_`").strip()
    t = re.sub(r"^(?:\d+|[ivx]+)[.)]\s*", "", t, flags=re.IGNORECASE)
    t = t.strip().strip("*_`").strip().rstrip(":").strip().lower()
    t = re.sub(r"[^a-z ]+", " ", t)
    return " ".join(w.rstrip("s") for w in t.split())


def _header_of(line: str) -> tuple[AnchorType | str, str] | None:
    """(section key, inline content) when the line is a recognized section header."""
    m = _MD_HEADER.match(line)
    if m:
        key = _ALIASES.get(_normalize_title(m.group("title")))
        return (key, "") if key is not None else None
    m = _BOLD_HEADER.match(line)
    if m:
        key = _ALIASES.get(_normalize_title(m.group("title")))
        if key is not None:
            return key, m.group("rest").strip()
        return None
    m = _PLAIN_HEADER.match(line)
    if m:
        raw, rest = m.group("title").strip(), m.group("rest").strip()
        key = _ALIASES.get(_normalize_title(raw))
        # "Name:" lines count when alone on their line or written in capitals ("NEXT STEPS: x"),
        # so prose such as "Key decision: use X" inside a section stays prose.
        if key is not None and (not rest or (raw.isupper() and len(raw) > 3)):
            return key, rest
    return None


def is_section_header(line: str) -> bool:
    """Whether ``parse_summary`` would read ``line`` as a section header."""
    return _header_of(line) is not None


def _clean_body(lines: list[str]) -> str:
    body = "\n".join(lines).strip("\n")
    # Drop uniform indentation and trailing spaces.
    stripped = [ln.rstrip() for ln in body.splitlines()]
    body = "\n".join(stripped).strip()
    return NA if body.lower() in _NA_VALUES else body


def _strip_fences(text: str) -> str:
    lines = text.strip().splitlines()
    if lines and lines[0].strip().startswith("```"):
        lines = lines[1:]
        if lines and lines[-1].strip().startswith("```"):
            lines = lines[:-1]
    return "\n".join(lines)


def _scan_sections(
    text: str,
) -> tuple[dict[AnchorType | str, list[str]], list[AnchorType | str], list[str], bool]:
    """The sections of a summary by header (in order), problems seen (duplicates), and
    whether a four-section SESSION INTENT header was among them (lines before the first
    header belong to no section)."""
    sections: dict[AnchorType | str, list[str]] = {}
    order: list[AnchorType | str] = []
    current: AnchorType | str | None = None
    problems: list[str] = []
    seen_session = False
    for line in _strip_fences(text).splitlines():
        hit = _header_of(line)
        if hit is None:
            if current is not None:
                sections[current].append(line)
            continue
        key, rest = hit
        if key == _SESSION:
            seen_session = True
            key = AnchorType.USER_INTENT
        if key == _IGNORED:
            current = None
            continue
        if key in sections:
            problems.append(f"duplicate section: {_display(key)}")
        else:
            sections[key] = []
            order.append(key)
        current = key
        if rest:
            sections[key].append(rest)
    return sections, order, problems, seen_session


def parse_summary(text: str) -> ParsedSummary:
    """Parse summarizer output tolerantly; never raises.

    Headers may be ``###``/``##`` markdown, ``**Bold**`` lines or ``Name:`` lines, in any case,
    numbered, with trailing colons and singular/plural variants. The four-section style of
    the harness preset maps SESSION INTENT to user_intent, NEXT STEPS to next_step, SUMMARY to the summary
    text and ARTIFACTS to ``artifacts``. Missing anchors become "N/A" and are reported in
    ``problems``. Text without any recognizable section becomes the summary.
    """
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    sections, order, problems, seen_session = _scan_sections(text)

    if not order:
        summary = text.strip()
        problems.append(
            "no recognizable sections" + ("; used the text as summary" if summary else "")
        )
        anchors = tuple(Anchor(type=t) for t in ALL_ANCHOR_TYPES)
        problems.extend(f"missing section: {ANCHOR_HEADERS[t]}" for t in ALL_ANCHOR_TYPES)
        return ParsedSummary(
            anchors=anchors, summary=summary, artifacts=(), problems=tuple(problems)
        )

    sections_style = seen_session or _ARTIFACTS in sections
    anchors_list: list[Anchor] = []
    for atype in ALL_ANCHOR_TYPES:
        if atype in sections:
            content = _clean_body(sections[atype])
            anchors_list.append(Anchor(type=atype, content=content))
        else:
            anchors_list.append(Anchor(type=atype))
            if not sections_style or atype in (AnchorType.USER_INTENT, AnchorType.NEXT_STEP):
                problems.append(f"missing section: {_display(atype)}")
    summary = _clean_body(sections.get(_SUMMARY, []))
    if summary == NA:
        summary = ""
    if _SUMMARY not in sections:
        problems.append("missing section: Summary")
    artifacts: tuple[str, ...] = ()
    if _ARTIFACTS in sections:
        artifacts = tuple(
            Anchor(
                type=AnchorType.EXECUTION_PROGRESS, content=_clean_body(sections[_ARTIFACTS])
            ).items()
        )
    elif sections_style:
        problems.append("missing section: ARTIFACTS")
    return ParsedSummary(
        anchors=tuple(anchors_list),
        summary=summary,
        artifacts=artifacts,
        problems=tuple(problems),
    )


def _display(key: AnchorType | str) -> str:
    if isinstance(key, AnchorType):
        return ANCHOR_HEADERS[key]
    return {"summary": "Summary", "artifacts": "ARTIFACTS"}.get(key, key)
