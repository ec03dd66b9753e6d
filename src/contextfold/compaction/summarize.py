"""Summarizing a range of the view into the compaction message (the Soft/Full tiers and
the no-LLM truncation share it). Fail-open: a summarizer error falls back to the extractive
summary and is recorded."""

from __future__ import annotations

import logging
import uuid as uuidlib
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ..core import telemetry
from ..core.anchors import (
    Anchor,
    merge_anchors,
    parse_summary,
    render_compaction_message,
    replace_anchors,
    union_items,
)
from ..core.messages import Message
from ..errors import ContextFoldError
from .artifacts import files_section
from .common import COMPACTION_KIND, _Run, bound_anchors, clip_text, render_sections_message
from .summarizers.base import Summarizer, SummaryRequest
from .summarizers.extractive import ExtractiveSummarizer
from .summarizers.transcript import truncate_tool_arguments

if TYPE_CHECKING:
    from .progressive import ProgressiveCompactor

_log = logging.getLogger("contextfold.compaction")


def drop_range(comp: ProgressiveCompactor, run: _Run, start: int, end: int, why: str) -> None:
    """Token-budget truncation: messages ``start:end`` leave the view with no summary, only a
    one-line notice in their place (their evidence is still indexed; the log keeps them)."""
    v = comp.view
    removed = list(v.history[start:end])
    if comp.index_range is not None:
        try:
            comp.index_range(removed, list(run.offloaded), (), "", run.tier)
        except Exception as exc:  # fail-open: the evidence index is an extra
            run.errors.append(f"evidence indexing failed: {exc}")
    text = (
        f"[Context Compaction]\n{end - start} earlier messages were truncated ({why}); the "
        "full history is kept and can be read with session_history."
    )
    msg = Message(
        role="user",
        content=text,
        uuid=str(
            uuidlib.uuid5(
                uuidlib.NAMESPACE_URL, f"cf:{comp.session_id}:{end}:{comp.state.compactions}:t"
            )
        ),
        metadata={"cf_kind": COMPACTION_KIND},
    )
    v.set_boundary(end, msg)
    comp.state.compaction_text = text
    comp.state.boundary_uuid = v.history[end].uuid if end < len(v) else None
    comp.state.compactions += 1
    run.summarized += end - start


#: the messages of a long range the extractive summary reads: its first ones (where the task
#: is set) and its newest ones; what lies between stays in the log and the evidence index
EXTRACTIVE_HEAD = 64
EXTRACTIVE_TAIL = 1_536


def extractive_span(msgs: Sequence[Message]) -> Sequence[Message]:
    """What the extractive (no-LLM) summary of ``msgs`` reads: all of a range up to
    ``EXTRACTIVE_HEAD + EXTRACTIVE_TAIL`` messages, else its head and its newest messages,
    so a first request carrying a long history is summarized in bounded time (its summary is
    bounded anyway)."""
    if len(msgs) <= EXTRACTIVE_HEAD + EXTRACTIVE_TAIL:
        return msgs
    head, tail = EXTRACTIVE_HEAD, len(msgs) - EXTRACTIVE_TAIL
    while head < tail and msgs[head].role == "tool":  # a call keeps its results
        head += 1
    while tail < len(msgs) and msgs[tail].role == "tool":
        tail += 1
    return [*msgs[:head], *msgs[tail:]]


def summarize(
    comp: ProgressiveCompactor, run: _Run, start: int, end: int, *, use_llm: bool
) -> None:
    v = comp.view
    msgs = list(v.messages_between(start, end))
    if comp.before_summarize is not None:
        try:
            comp.before_summarize(msgs)
        except Exception as exc:  # fail-open by design: memory flush must not block
            if comp.cfg.memory_errors == "record":
                run.errors.append(f"memory flush failed: {exc}")
            else:
                _log.debug("memory flush failed (skipped): %s", exc)
    summarizer = comp.summarizer if use_llm else comp.fallback_summarizer
    extractive = isinstance(summarizer, ExtractiveSummarizer)
    to_send: Sequence[Message] = extractive_span(msgs) if extractive else msgs
    if comp.truncate_args is not None:
        to_send = truncate_tool_arguments(
            to_send,
            tools=comp.truncate_args.tools,
            max_length=comp.truncate_args.max_arg_length,
            text=comp.truncate_args.truncation_text,
        )
    request = SummaryRequest(
        messages=to_send,
        previous_summary=comp.state.last_summary or None,
        previous_anchors=comp.state.last_anchors,
        style=comp.summary_style,
        prompt=comp.summary_prompt,
        max_summary_tokens=max(256, min(4_000, int(comp.working_window * 0.06))),
        notes=tuple(comp.active_tasks() if comp.active_tasks else ()),
        omitted=len(msgs) - len(to_send),
    )
    text = ""
    try:
        text = _summarize(summarizer, request, run.tier.value)
        if not isinstance(text, str):
            raise ContextFoldError(f"summarizer returned {type(text).__name__}, not text")
        if not text.strip():
            raise ContextFoldError("summarizer returned an empty summary")
        run.summarizer_name = type(summarizer).__name__
    except Exception as exc:  # fail-open: any summarizer failure degrades to extractive
        run.errors.append(f"LLM summary failed in Tier{run.tier.label}: {exc}")
        if comp.cfg.llm_fallback == "truncate":
            drop_range(comp, run, start, end, "the LLM summary failed")
            return
        summarizer = comp.fallback_summarizer
        if not extractive:  # the extractive fallback reads the head and tail of a long range
            span = extractive_span(to_send)
            request = replace(request, messages=span, omitted=len(msgs) - len(span))
        text = _summarize(summarizer, request, run.tier.value)
        run.summarizer_name = type(summarizer).__name__ + " (fallback)"
    if summarizer is not comp.fallback_summarizer:
        prompt_tokens = sum(comp.count_text(m.text) for m in to_send) + 300
        prompt_tokens += comp.count_text(comp.state.last_summary)
        run.summarizer_in += prompt_tokens
        run.summarizer_out += comp.count_text(text)
    parsed = parse_summary(text)
    if parsed.problems:
        run.errors.append("summary parse: " + "; ".join(parsed.problems))
    if comp.cfg.anchor_merge == "replace":
        anchors = replace_anchors(comp.state.last_anchors, parsed.anchors)
    else:
        anchors = merge_anchors(comp.state.last_anchors, parsed.anchors)
    comp.state.last_artifacts = tuple(union_items(comp.state.last_artifacts, parsed.artifacts))
    summary = parsed.summary
    removed = list(v.history[start:end])
    offloaded_here = [e for e in run.offloaded]
    recall: list[str] = []
    if comp.index_range is not None:
        try:
            recall = comp.index_range(removed, offloaded_here, anchors, summary, run.tier)
        except Exception as exc:  # fail-open: the evidence index is an extra
            run.errors.append(f"evidence indexing failed: {exc}")
    comp._set_compaction(run, end, anchors, summary, recall, summarized=end - start)


def set_compaction(
    comp: ProgressiveCompactor,
    run: _Run,
    end: int,
    anchors: tuple[Anchor, ...],
    summary: str,
    recall: list[str],
    *,
    summarized: int,
    note: str | None = None,
) -> None:
    v = comp.view
    offloaded_refs = comp._offloaded_refs(end)
    tasks = comp.active_tasks() if comp.active_tasks else []
    # the compaction message has a budget: anchors merged over many rounds keep their newest
    # items (older ones stay in the compaction records), so the message can never crowd out the view
    budget = comp.compaction_budget
    max_items = 12
    # the files written come first: up to 40% of the budget (about 4 characters a token)
    files_text = files_section(comp.written.scan(v, v.history, end), budget * 4 * 2 // 5)
    while True:
        anchors = bound_anchors(anchors, max_items)
        summary = clip_text(summary, max(200, budget * 3 // 3))
        if comp.summary_style == "sections":
            text = render_sections_message(
                anchors,
                summary,
                comp.state.last_artifacts[-max_items:],
                offloaded=offloaded_refs[-max_items:],
                active_tasks=tasks,
                recall=recall[-max_items:],
                note=note,
            )
        else:
            text = render_compaction_message(
                anchors,
                summary,
                offloaded=offloaded_refs[-max_items:],
                active_tasks=tasks,
                recall=recall[-max_items:],
                note=note,
            )
        text += files_text
        if comp.count_text(text) <= budget or max_items <= 1:
            break
        max_items = max(1, max_items // 2)
        budget_chars = budget * 3
        summary = clip_text(summary, budget_chars // 3)
    if comp.count_text(text) > budget:
        text = clip_text(text, budget * 3)
    if v.newest_user is not None and v.newest_user < end and v.newest_user != v.first_user:
        text += "\n\n(The latest user request follows verbatim.)"
    msg = Message(
        role="user",
        content=text,
        uuid=str(
            uuidlib.uuid5(
                uuidlib.NAMESPACE_URL, f"cf:{comp.session_id}:{end}:{comp.state.compactions}"
            )
        ),
        metadata={"cf_kind": COMPACTION_KIND},
    )
    v.set_boundary(end, msg)
    comp.state.last_summary = summary
    comp.state.last_anchors = anchors
    comp.state.compaction_text = text
    comp.state.boundary_uuid = v.history[end].uuid if end < len(v) else None
    comp.state.compactions += 1
    run.summarized += summarized
    run.summary_text = summary
    run.anchors = anchors


def offloaded_refs(comp: ProgressiveCompactor, end: int) -> list[tuple[str, str]]:
    if comp.offload is None:
        return []
    out: list[tuple[str, str]] = []
    entries = comp.offload.entries()
    for store in comp.extra_stores:
        entries.update(store.entries())
    hidden_ids = set(comp.view.tool_ids_between(comp.view.prefix_len, end))
    for call_id, e in entries.items():
        if call_id in hidden_ids:
            out.append(
                (
                    e.path,
                    f"{e.lines} lines, {e.bytes // 1024} KB - tool result of "
                    f"{e.tool_name or 'tool'} ({call_id})",
                )
            )
    return out[-20:]


def _summarize(summarizer: Summarizer, request: SummaryRequest, tier: str) -> str:
    """One summarizer call, in a ``contextfold.summarize`` span."""
    model = getattr(summarizer, "model", None)
    attrs: dict[str, telemetry.Attr | None] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": model if isinstance(model, str) else None,
        "contextfold.summarizer": type(summarizer).__name__,
        "contextfold.tier": tier,
        "contextfold.core.messages": len(request.messages),
    }
    with telemetry.span("contextfold.summarize", attrs) as current:
        text = summarizer.summarize(request)
        if isinstance(text, str):
            telemetry.set_attributes(current, {"contextfold.summary.chars": len(text)})
        return text
