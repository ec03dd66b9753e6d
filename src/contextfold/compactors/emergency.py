"""The emergency tier: truncation without an LLM, then squeezing oversized texts and call
arguments to head and tail (each saved whole first), then shortening pinned messages."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ContextFoldError, StorageError
from ..offload import is_offloaded_text
from .common import EMERGENCY_POLICY, _Run, calls_json
from .pinned import fit_pinned

if TYPE_CHECKING:
    from .progressive import ProgressiveCompactor


def truncate(comp: ProgressiveCompactor, run: _Run, extra: int) -> None:
    """Seed 6.3: no LLM. Keep the newest messages within the target; the dropped range gets
    an extractive (deterministic, no LLM) summary merged into the previous anchors."""
    v = comp.view
    start = v.boundary
    n = len(v)
    budget = comp.target_tokens
    b = start
    last_cut = v.legal_cut_at_or_before(n - 1, start) if n > start else start
    while b < last_cut and comp._projected(b, extra) > budget:
        b = v.legal_cut_at_or_after(b + 1)
        b = min(b, last_cut)
    if b > start:
        comp._summarize(run, start, b, use_llm=False)
        run.notes.append(f"truncated {b - start} messages without an LLM")
    if comp.view_tokens(extra) > budget:
        comp._offload_range(run, v.boundary, n, EMERGENCY_POLICY)
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
    pinned = {v.first_user, v.newest_user}
    order = sorted(range(v.boundary, len(v)), key=lambda i: -v.tokens_of(i))
    for i in order:
        if comp.view_tokens(extra) <= comp.target_tokens:
            break
        if i in pinned or comp.offload is None:
            continue
        form = v.forms[i]
        original = v.history[i]
        args_chars = sum(len(c.arguments) for c in form.tool_calls)
        complete = len(form.tool_calls) == len(original.tool_calls)  # no result pending
        if args_chars >= 2_000 and complete:
            comp._squeeze_one(run, i, f"args-{original.uuid}", calls_json(form), "squeeze_args")
            form = v.forms[i]
        if not isinstance(form.content, str) or len(form.content) < 2_000:
            continue
        if is_offloaded_text(form.content) and form.role == "tool":
            continue
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
