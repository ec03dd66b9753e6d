"""Five structured anchors, prompt templates, a tolerant parser, union merge, and the
compaction message format."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

from ..errors import ConfigError
from .anchors_model import ALL_ANCHOR_TYPES, ANCHOR_HEADERS, NA, Anchor, AnchorType
from .anchors_parse import ParsedSummary, is_section_header, parse_summary

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
