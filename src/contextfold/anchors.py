"""Five structured anchors, prompt templates, a tolerant parser, union merge, and the
compaction message format."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from .errors import ConfigError


class AnchorType(str, Enum):
    USER_INTENT = "user_intent"
    EXECUTION_PROGRESS = "execution_progress"
    KEY_DECISION = "key_decision"
    TRIED_SOLUTION = "tried_solution"
    NEXT_STEP = "next_step"


ALL_ANCHOR_TYPES: tuple[AnchorType, ...] = tuple(AnchorType)

ANCHOR_HEADERS: dict[AnchorType, str] = {
    AnchorType.USER_INTENT: "User Intent",
    AnchorType.EXECUTION_PROGRESS: "Execution Progress",
    AnchorType.KEY_DECISION: "Key Decisions",
    AnchorType.TRIED_SOLUTION: "Tried Solutions",
    AnchorType.NEXT_STEP: "Next Steps",
}

NA = "N/A"


@dataclass(frozen=True, kw_only=True, slots=True)
class Anchor:
    type: AnchorType
    #: The section body: one item per line ("- item"), or "N/A".
    content: str = NA

    @property
    def is_empty(self) -> bool:
        return self.content.strip() in ("", NA, "- N/A")

    def items(self) -> list[str]:
        """The section's items, without bullets; empty for N/A."""
        if self.is_empty:
            return []
        out = []
        for line in self.content.splitlines():
            s = line.strip()
            if s.startswith(("- ", "* ")):
                s = s[2:].strip()
            if s and s not in (NA, "- N/A"):
                out.append(s)
        return out


# --------------------------------------------------------------------------------------------
# Prompt templates. Every template takes the conversation text as "{messages}".

_FORMAT = """## Anchors

### User Intent
<one concise sentence: what the user actually wants>

### Execution Progress
- <key milestone already completed>

### Key Decisions
- <decision: rationale>

### Tried Solutions
- <approach: outcome (why it failed)>

### Next Steps
- <pending task>

## Summary
<supplementary context not captured in anchors: file paths, names, values, errors>"""

_RULES = """Rules:
- Each anchor section MUST be present (use "- N/A" if nothing applies)
- Be concise: each item one line
- Keep exact file paths, identifiers, commands and error messages
- [offloaded: ...] entries indicate large outputs saved to files; keep their paths"""

FIRST_TEMPLATE = f"""Produce a structured compaction of the following conversation in this exact format:

{_FORMAT}

{_RULES}

Conversation:
{{messages}}
"""

INCREMENTAL_TEMPLATE = f"""Update the existing compaction by merging in new conversation content.

<previous-compaction>
{{previous}}
</previous-compaction>

New conversation to merge:
{{messages}}

Output the updated compaction in this exact format:

{_FORMAT}

{_RULES}
- Keep every earlier item that is still true (progress, decisions, tried solutions)
- Remove next steps that the new conversation completed; add the new ones
"""

SECTIONS_TEMPLATE = """Summarize the conversation below so an agent can continue the work without it.
Write exactly these four sections, in this order:

## SESSION INTENT
<the overall goal of this session, in one or two sentences>

## SUMMARY
<what happened so far: actions taken, results, decisions and their reasons, failed attempts>

## ARTIFACTS
- <files created or modified, important tool outputs, key values and identifiers>

## NEXT STEPS
- <actions that were planned but not done yet>

Be concise; keep exact file paths, identifiers, commands and error messages.

Conversation:
{messages}
"""

_PREVIOUS_BLOCK = """<previous-summary>
{previous}
</previous-summary>

Merge the previous summary with the new conversation below (keep what is still true).

"""


# --------------------------------------------------------------------------------------------
# Parsing


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


# --------------------------------------------------------------------------------------------
# Merge

_LIST_TYPES = (
    AnchorType.EXECUTION_PROGRESS,
    AnchorType.KEY_DECISION,
    AnchorType.TRIED_SOLUTION,
)


def _item_key(item: str) -> str:
    return " ".join(item.casefold().split()).rstrip(".;,")


def _by_type(anchors: Sequence[Anchor]) -> dict[AnchorType, Anchor]:
    out: dict[AnchorType, Anchor] = {}
    for a in anchors:
        out.setdefault(a.type, a)
    return out


def _bullets(items: Sequence[str]) -> str:
    return "\n".join(f"- {i}" for i in items) if items else NA


def union_items(old: Sequence[str], new: Sequence[str]) -> list[str]:
    """Old items first, then new ones not already present (case/whitespace-insensitive)."""
    seen: set[str] = set()
    out: list[str] = []
    for item in (*old, *new):
        key = _item_key(item)
        if key and key not in seen:
            seen.add(key)
            out.append(item)
    return out


def replace_anchors(old: Sequence[Anchor], new: Sequence[Anchor]) -> tuple[Anchor, ...]:
    """The design notes' merge, literally: a new non-N/A anchor replaces the old one of its
    type; an old non-N/A anchor the new ones leave N/A is kept. Five anchors, in order."""
    o, n = _by_type(old), _by_type(new)
    out: list[Anchor] = []
    for atype in ALL_ANCHOR_TYPES:
        a_old = o.get(atype, Anchor(type=atype))
        a_new = n.get(atype, Anchor(type=atype))
        if not a_new.is_empty:
            content = a_new.content.strip()
        elif not a_old.is_empty:
            content = a_old.content.strip()
        else:
            content = NA
        out.append(Anchor(type=atype, content=content))
    return tuple(out)


def merge_anchors(old: Sequence[Anchor], new: Sequence[Anchor]) -> tuple[Anchor, ...]:
    """Merge the anchors of an earlier compaction with those of a new one (merge by union or replacement).

    Always returns five anchors in ``ALL_ANCHOR_TYPES`` order.

    - Execution Progress, Key Decisions, Tried Solutions: the union of the items, old items
      first, then new items not already present (compared case- and whitespace-insensitively).
      A summarizer that forgets an old decision therefore cannot drop it.
    - User Intent: a non-N/A new value replaces the old one (the summarizer was shown the old
      intent and is asked to restate it, refined); otherwise the old value is kept.
    - Next Steps: a non-N/A new value replaces the old one, deliberately *not* a union: next
      steps that were done in the meantime must disappear, and only the newer summary knows
      which. When the new value is N/A the old steps are kept.
    """
    o, n = _by_type(old), _by_type(new)
    out: list[Anchor] = []
    for atype in ALL_ANCHOR_TYPES:
        a_old = o.get(atype, Anchor(type=atype))
        a_new = n.get(atype, Anchor(type=atype))
        if atype in _LIST_TYPES:
            content = _bullets(union_items(a_old.items(), a_new.items()))
        elif not a_new.is_empty:
            content = a_new.content.strip()
        elif not a_old.is_empty:
            content = a_old.content.strip()
        else:
            content = NA
        out.append(Anchor(type=atype, content=content))
    return tuple(out)


# --------------------------------------------------------------------------------------------
# Rendering


def render_anchors(anchors: Sequence[Anchor], summary: str) -> str:
    """The anchors markdown: "## Anchors", five "### ..." sections, then "## Summary"."""
    by = _by_type(anchors)
    parts = ["## Anchors", ""]
    for atype in ALL_ANCHOR_TYPES:
        a = by.get(atype)
        content = a.content.strip() if a is not None and not a.is_empty else NA
        parts += [f"### {ANCHOR_HEADERS[atype]}", content, ""]
    parts += ["## Summary", summary.strip() or NA]
    return "\n".join(parts)


RECALL_HINT = (
    "Call the `recall` tool with one of these evidence ids to get the full original text back."
)


def render_compaction_message(
    anchors: Sequence[Anchor],
    summary: str,
    *,
    offloaded: Sequence[tuple[str, str]] = (),
    active_tasks: Sequence[str] = (),
    recall: Sequence[str] = (),
    note: str | None = None,
) -> str:
    """The message injected in place of compacted history.

    ``offloaded`` holds (path, description) pairs such as ("…/tc_001.txt", "5000 lines, 128 KB -
    tool result of bash"); ``active_tasks`` holds preformatted lines ("[>] Set up middleware");
    ``recall`` holds evidence lines (id and hint). Empty optional sections are omitted.
    """
    parts = ["[Context Compaction]\n" + render_anchors(anchors, summary)]
    if offloaded:
        lines = ["## Offloaded References"]
        for path, desc in offloaded:
            desc = desc.strip()
            if " - " in desc:
                size, rest = desc.split(" - ", 1)
                lines.append(f"- {path} ({size.strip()}) - {rest.strip()}")
            elif desc:
                lines.append(f"- {path} ({desc})")
            else:
                lines.append(f"- {path}")
        parts.append("\n".join(lines))
    if active_tasks:
        parts.append("\n".join(["## Active Tasks", *(t.rstrip() for t in active_tasks)]))
    if recall:
        lines = ["## Recallable Evidence"]
        lines += [r if r.lstrip().startswith("- ") else f"- {r.strip()}" for r in recall]
        lines.append(RECALL_HINT)
        parts.append("\n".join(lines))
    text = "\n\n".join(parts) + "\n\n---"
    if note:
        text += "\n" + note.strip()
    return text


# --------------------------------------------------------------------------------------------
# Prompt building

_PLACEHOLDER = re.compile(r"\{(messages|previous)\}")


def _fill(template: str, values: dict[str, str]) -> str:
    # One pass, so a transcript containing "{previous}" (or braces) is never re-expanded.
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


class PromptRequest(Protocol):
    """What :func:`build_prompt` reads of a summary request (the summarizers' ``SummaryRequest``)."""

    @property
    def previous_summary(self) -> str | None: ...
    @property
    def previous_anchors(self) -> Sequence[Anchor]: ...
    @property
    def style(self) -> str: ...
    @property
    def prompt(self) -> str | None: ...


def build_prompt(request: PromptRequest, transcript: str) -> str:
    """The LLM prompt for ``request``, with the conversation text ``transcript`` filled in.

    A custom ``request.prompt`` must contain "{messages}" (ConfigError otherwise); "{previous}"
    in it receives the previous summary ("" if none). Otherwise: SECTIONS_TEMPLATE for style
    "sections" (with a previous-summary block when one exists), INCREMENTAL_TEMPLATE when a
    previous summary exists, else FIRST_TEMPLATE.
    """
    previous = request.previous_summary or ""
    if previous and request.previous_anchors and "### " not in previous:
        previous = render_anchors(request.previous_anchors, previous)
    elif not previous and any(not a.is_empty for a in request.previous_anchors):
        previous = render_anchors(request.previous_anchors, "")
    if request.prompt is not None:
        if "{messages}" not in request.prompt:
            raise ConfigError(
                'summary prompt must contain the "{messages}" placeholder '
                f"(got a {len(request.prompt)}-character prompt without it)"
            )
        return _fill(request.prompt, {"messages": transcript, "previous": previous})
    if request.style == "sections":
        template = SECTIONS_TEMPLATE
        if previous:
            anchor = "Conversation:\n{messages}"
            template = template.replace(anchor, _PREVIOUS_BLOCK + anchor)
            return _fill(template, {"messages": transcript, "previous": previous})
        return _fill(SECTIONS_TEMPLATE, {"messages": transcript, "previous": ""})
    if previous:
        return _fill(INCREMENTAL_TEMPLATE, {"messages": transcript, "previous": previous})
    return _fill(FIRST_TEMPLATE, {"messages": transcript, "previous": ""})


__all__ = [
    "ALL_ANCHOR_TYPES",
    "ANCHOR_HEADERS",
    "FIRST_TEMPLATE",
    "INCREMENTAL_TEMPLATE",
    "NA",
    "SECTIONS_TEMPLATE",
    "Anchor",
    "AnchorType",
    "ParsedSummary",
    "build_prompt",
    "is_section_header",
    "merge_anchors",
    "parse_summary",
    "render_anchors",
    "render_compaction_message",
    "union_items",
]
