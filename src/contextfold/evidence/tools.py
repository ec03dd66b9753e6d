"""The ``recall`` agent tool: the model asks for evidence from before a compaction itself
(issue 4, section 7)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..core.tools import Tool
from ..errors import ToolArgumentsError
from .inject import truncate_middle
from .search import EvidenceSearch
from .store import EvidenceStore, RestoredText

DEFAULT_K = 3
MAX_K = 10
DEFAULT_MAX_CHARS = 20_000

DESCRIPTION = (
    "Recall evidence from before a context compaction: the exact output of an earlier command "
    "(errors, stack traces, test output, logs, sub-agent output) that is no longer in the "
    "conversation. Give a query naming what you need (the command, test id, exception type, "
    "file path, or words from it) to get ranked hits with their text; give evidence_id (from a "
    "hit or from the compaction summary) to read one item in full, paging with offset. The text "
    "is what was seen at that time, not the current state."
)

PARAMETERS: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "description": (
                "What to look for, e.g. 'full error output of `pytest -x`' (not needed with "
                "evidence_id)."
            ),
        },
        "k": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_K,
            "description": f"How many hits to return (1-{MAX_K}, default {DEFAULT_K}).",
        },
        "evidence_id": {
            "type": "string",
            "description": "Fetch this one evidence item (an id such as ev-1a2b3c4d5e6f).",
        },
        "max_chars": {
            "type": "integer",
            "minimum": 200,
            "description": f"Most characters of text to return (default {DEFAULT_MAX_CHARS}).",
        },
        "offset": {
            "type": "integer",
            "minimum": 0,
            "description": "With evidence_id: start reading at this character.",
        },
    },
    # query or evidence_id: one of the two (checked by the handler; a top-level anyOf is
    # refused by some providers' tool schemas)
    "required": [],
}


def _status(restored: RestoredText) -> str:
    if restored.sha256_ok is True:
        check = "sha256 verified"
    elif restored.sha256_ok is False:
        check = "SHA256 MISMATCH"
    else:
        check = "sha256 not checked"
    out = f"source: {restored.source}, {check}"
    if restored.problem:
        out += f" ({restored.problem})"
    return out


def _one(search: EvidenceSearch, store: EvidenceStore, args: Mapping[str, Any]) -> str:
    evidence_id = str(args["evidence_id"]).strip()
    pointer = search.get(evidence_id)
    if pointer is None:
        known = [p.id for p in search.pointers()[-5:]]
        hint = f" Recent ids: {', '.join(known)}." if known else " No evidence is stored yet."
        raise ToolArgumentsError(
            f"recall: no evidence with id {evidence_id!r}. Search with a query to find ids.{hint}"
        )
    max_chars = int(args.get("max_chars", DEFAULT_MAX_CHARS))
    offset = int(args.get("offset", 0))
    restored = store.restore(pointer)
    text = restored.text
    if offset > len(text):
        raise ToolArgumentsError(
            f"recall: offset {offset} is past the end of {evidence_id} ({len(text)} characters)"
        )
    piece = text[offset : offset + max_chars]
    end = offset + len(piece)
    lines = [
        f"evidence {pointer.id} · command: {pointer.command or '-'} · "
        f"types: {', '.join(pointer.content_types) or '-'}",
        _status(restored),
        f"characters {offset}-{end} of {len(text)}"
        + (
            f"; more: call recall with evidence_id={pointer.id!r}, offset={end}"
            if end < len(text)
            else ""
        ),
        "-----",
        piece,
    ]
    return "\n".join(lines)


def _many(search: EvidenceSearch, store: EvidenceStore, args: Mapping[str, Any]) -> str:
    query = str(args["query"])
    if not query.strip():
        raise ToolArgumentsError(
            "recall: query is empty; say what to look for, or give evidence_id"
        )
    k = int(args.get("k", DEFAULT_K))
    if not 1 <= k <= MAX_K:
        raise ToolArgumentsError(f"recall: k must be between 1 and {MAX_K}, got {k}")
    max_chars = int(args.get("max_chars", DEFAULT_MAX_CHARS))
    hits = search.search(query, k=k)
    if not hits:
        total = len(search)
        return (
            f"No evidence matches {query!r} ({total} items stored). Try other words: the "
            "command, a file path, a test name or an exception type."
        )
    share = max(200, max_chars // len(hits))
    out = [f"{len(hits)} hit(s) for {query!r}, best first (historical; verify current state):"]
    for rank, hit in enumerate(hits, 1):
        p = hit.pointer
        restored = store.restore(p)
        body = truncate_middle(restored.text, share)
        where = f"sub-agent {p.agent_run_id}" if p.source_scope == "sub_agent" else p.role
        out.append(
            f"\n[{rank}] {p.id} · score {hit.score:.2f} · {where} · command: {p.command or '-'} · "
            f"types: {', '.join(p.content_types) or '-'} · {len(restored.text)} chars · "
            f"{_status(restored)}"
        )
        if hit.why:
            out.append(f"(why: {hit.why})")
        if len(body) < len(restored.text):
            out.append(f"(truncated; recall with evidence_id={p.id!r} for the full text)")
        out.append(body)
    return "\n".join(out)


def recall_tool(
    search: EvidenceSearch | Callable[[], EvidenceSearch], store: EvidenceStore
) -> Tool:
    """The ``recall`` tool over one session's evidence. ``search`` may be a function giving
    the search when the tool is first used (building the tool box reads no evidence)."""

    def handler(args: Mapping[str, Any]) -> str:
        found = search if isinstance(search, EvidenceSearch) else search()
        if args.get("evidence_id"):
            return _one(found, store, args)
        if args.get("query") is None:
            raise ToolArgumentsError(
                "recall: give query (what to look for) or evidence_id (an id such as "
                "ev-1a2b3c4d5e6f) to read one item"
            )
        return _many(found, store, args)

    return Tool(name="recall", description=DESCRIPTION, parameters=PARAMETERS, handler=handler)


__all__ = ["recall_tool"]
