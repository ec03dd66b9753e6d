"""The emergency tier: truncation without an LLM, then squeezing oversized texts and call
arguments to head and tail (each saved whole first), then shortening pinned messages."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..errors import ContextFoldError, StorageError
from .common import EMERGENCY_POLICY, _Run, calls_json
from .offload import OffloadPolicy, is_offloaded_text
from .pinned import fit_pinned
from .summarize import drop_range

_log = logging.getLogger("contextfold.compaction")

#: how a record's note starts when the requested LLM summarizer was not used (emergency tier)
LLM_SKIPPED = "LLM summarizer not used"

#: An offload placeholder with the pointer and two short preview lines (emergency only).
TIGHT_POLICY = OffloadPolicy(name="tight", threshold=0, preview_lines=2)

if TYPE_CHECKING:
    from .progressive import ProgressiveCompactor


def truncate(comp: ProgressiveCompactor, run: _Run, extra: int) -> None:
    """Truncation, no LLM. Keep the newest messages within the target; the dropped range gets
    an extractive (deterministic, no LLM) summary merged into the previous anchors."""
    v = comp.view
    start = v.boundary
    n = len(v)
    budget = comp.target_tokens
    b = start
    last_cut = v.legal_cut_at_or_before(n - 1, start) if n > start else start
    if comp.cfg.emergency == "minimal_tail":
        # CompactForce: truncate to the newest turn, no summary (the pinned messages stay)
        if last_cut > start:
            drop_range(comp, run, start, last_cut, "emergency: forced truncation")
            run.notes.append(f"truncated {last_cut - start} messages to the minimal tail")
        if comp.view_tokens(extra) > comp.window:
            comp._offload_range(run, v.boundary, n, EMERGENCY_POLICY)
        _fit(comp, run, extra)
        return
    while b < last_cut and comp._projected(b, extra) > budget:
        b = v.legal_cut_at_or_after(b + 1)
        b = min(b, last_cut)
    if b > start:
        comp._summarize(run, start, b, use_llm=False)
        run.notes.append(f"truncated {b - start} messages without an LLM")
        if comp.summarizer is not comp.fallback_summarizer:
            note = (
                f"{LLM_SKIPPED}: {type(comp.summarizer).__name__} is not called in the emergency "
                "tier (over the emergency threshold the dropped messages get an extractive "
                "summary, with no model call)"
            )
            run.notes.append(note)
            _log.warning("%s", note)
    if comp.view_tokens(extra) > budget:
        comp._offload_range(run, v.boundary, n, EMERGENCY_POLICY)
    _fit(comp, run, extra)


def _fit(comp: ProgressiveCompactor, run: _Run, extra: int) -> None:
    if comp.view_tokens(extra) > comp.cfg.emergency_threshold * comp.window:
        comp._squeeze(run, extra)
    if comp.view_tokens(extra) > comp.window:
        fit_pinned(comp, run, extra)
    if comp.view_tokens(extra) > comp.window:
        run.errors.append(
            "view still exceeds the window: the pinned messages (system prompt, first and "
            "newest user message), shortened to head and tail, and the newest turn do not fit"
        )


def squeeze(comp: ProgressiveCompactor, run: _Run, extra: int) -> None:
    """Last resort: cut oversized non-pinned texts and tool-call arguments to head+tail,
    saving the whole of them to a file first (so every byte stays recoverable)."""
    v = comp.view
    pinned: set[int | None] = {v.first_user, v.newest_user, *v.state_pins}
    big = max(400, min(2_000, comp.window // 2))  # characters: "long" in a small window too
    # retracted positions are out of the view (and their call ids may be used again)
    live = (i for i in range(v.boundary, len(v)) if i not in v.retracted)
    order = sorted(live, key=lambda i: -v.tokens_of(i))
    for i in order:
        if comp.view_tokens(extra) <= comp.target_tokens:
            break
        if i in pinned or comp.offload is None:
            continue
        form = v.forms[i]
        original = v.history[i]
        args_chars = sum(len(c.arguments) for c in form.tool_calls)
        complete = len(form.tool_calls) == len(original.tool_calls)  # no result pending
        if args_chars >= big and complete:
            comp._squeeze_one(run, i, f"args-{original.uuid}", calls_json(form), "squeeze_args")
            form = v.forms[i]
        if not isinstance(form.content, str) or len(form.content) < min(1_200, big):
            continue
        if is_offloaded_text(form.content) and form.role == "tool":
            tighten(comp, run, i)  # a long preview: keep the pointer and two short lines
            continue
        keep = comp.policies["squeeze"].head_chars + comp.policies["squeeze"].tail_chars
        if len(form.content) < max(big, keep + 600):
            continue  # head + tail + the pointer would not be shorter than the text
        key = original.tool_call_id or f"msg-{original.uuid}"
        comp._squeeze_one(run, i, key, original.text, "squeeze")


def squeeze_one(
    comp: ProgressiveCompactor, run: _Run, index: int, key: str, text: str, policy: str
) -> None:
    assert comp.offload is not None
    original = comp.view.history[index]
    try:
        entry = comp.offload.write(
            key, text, message_uuid=original.uuid, policy=policy, tool_name=None
        )
    except (ContextFoldError, StorageError) as exc:
        run.errors.append(f"emergency offload failed for {key}: {exc}")
        return
    comp.reapply(index, entry, policy)
    run.offloaded.append(entry)


def tighten(comp: ProgressiveCompactor, run: _Run, index: int) -> None:
    """Shorten the placeholder of an already offloaded result to its pointer and two lines."""
    call_id = comp.view.history[index].tool_call_id or ""
    if comp.state.offload_policies.get(call_id) == TIGHT_POLICY.name:
        return
    stores = [s for s in (comp.offload, *comp.extra_stores) if s is not None]
    entry = next((e for e in (s.get(call_id) for s in stores) if e is not None), None)
    if entry is None:
        return
    comp.apply_offload(index, entry, TIGHT_POLICY)
    run.notes.append(f"offload preview of {call_id} shortened to two lines to fit the window")
