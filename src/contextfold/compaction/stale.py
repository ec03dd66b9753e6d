"""Stale tool outputs leave the view in batches that pay for their cache miss.

A large tool output that the agent has already read and moved past (``stale_after`` newer tool
results since) mostly costs re-reading on every later call. Replacing it by its offload
placeholder saves ``0.1 x its tokens`` per later call at the cached rate, but rewriting a message
in the middle of the view makes every message after it miss the provider's prefix cache once
(billed at the full rate instead of 0.1). So stale outputs are collected and offloaded together,
only when the tokens they free are at least ``stale_batch_ratio`` of the tokens from the first
of them to the end of the view: the miss is then repaid within a few calls, and the prefix
stays stable in between. Offloaded outputs are written byte-exact first (sha256), as every
other offload, so each one stays recoverable.

The previews of outputs offloaded earlier are candidates too: a long session's stubs (a path,
sizes and ten lines each) would otherwise pile up until a summary folds them. A batch shortens
them to a brief placeholder (two short lines) in the same rewrite. The batch is the largest run
of candidates, from some point to the newest, that pays: a rewrite costs the same from any
point on, so old candidates that free little never hold back a batch of recent ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.records import OffloadEntry
from ..errors import ContextFoldError
from ..storage.util import sha256_hex
from .common import calls_json
from .offload import OffloadPolicy, offloadable_text, placeholder

if TYPE_CHECKING:
    from .common import _Run
    from .progressive import ProgressiveCompactor

#: About what a preview placeholder costs (path, sizes, sha256 and the first lines).
PLACEHOLDER_TOKENS = 120
#: Tokens a brief placeholder must free in place of a preview for the preview to be shortened.
BRIEF_MIN_GAIN = 50
#: The policies whose placeholders a stale batch shortens to a brief one: previews of outputs
#: offloaded earlier (the agent has moved past them too; the whole output stays one
#: ``read_offloaded`` away). Pinned, eviction and emergency placeholders are left as they are.
BRIEFED = frozenset({"compaction", "stale", "ingest"})
#: Characters of each long argument the shortened call keeps (head and tail).
ARGS_KEPT = 600
#: contextfold's own tools: their output is already a page of stored text.
OWN_TOOLS = ("read_offloaded", "recall", "session_*", "memory_*")


def _stale_cut(comp: ProgressiveCompactor) -> int:
    """Index of the oldest of the newest ``stale_after`` tool results (everything before it
    has been read and moved past)."""
    v = comp.view
    seen = 0
    i = len(v) - 1
    while i >= v.boundary and seen < comp.cfg.stale_after:
        if v.history[i].role == "tool":
            seen += 1
        i -= 1
    return i + 1


def stale_candidates(comp: ProgressiveCompactor, policy: OffloadPolicy) -> list[tuple[int, int]]:
    """(index, tokens freed) of what may leave the view, oldest first: tool results older than
    the newest ``stale_after`` results that the policy would offload (large, plain text, not
    offloaded yet) or whose preview a brief placeholder would shorten, and long arguments of
    tool calls whose results are all in."""
    v = comp.view
    limit = comp.cfg.stale_min_chars
    out: list[tuple[int, int]] = []
    gone = v.retracted
    for j in range(v.boundary, _stale_cut(comp)):
        if j in gone:  # a client's rewrite took it out (its call id may be used again)
            continue
        form = v.forms[j]
        if form.role == "tool":
            if form.metadata.get("cf_offloaded"):
                gain = _brief_gain(comp, j)
                if gain:
                    out.append((j, gain))
                continue
            text = offloadable_text(form.content)
            if text is None or not policy.applies(text, comp._tool_name(j)):
                continue
            out.append((j, max(0, v.tokens_of(j) - PLACEHOLDER_TOKENS)))
        elif form.tool_calls and not form.metadata.get("cf_args_offloaded"):
            if len(form.tool_calls) != len(v.history[j].tool_calls):
                continue  # a call without its result: leave it to the view's pairing rules
            long = sum(len(c.arguments) - ARGS_KEPT for c in form.tool_calls)
            if long > limit:
                out.append((j, long // 4))
    return out


def _paying_batch(
    comp: ProgressiveCompactor, cands: list[tuple[int, int]]
) -> list[tuple[int, int]]:
    """The candidates from the oldest one on whose batch pays for its cache miss (the tokens
    freed reach ``stale_batch_ratio`` of the view from it on, and ``stale_min_gain``): the
    largest such batch, as a rewrite costs the same from any point on. Empty when none does."""
    v, cfg = comp.view, comp.cfg
    freed = sum(t for _, t in cands)
    for k, (index, gain) in enumerate(cands):
        if freed < cfg.stale_min_gain:
            break
        if freed >= cfg.stale_batch_ratio * v.range_tokens(index, len(v)):
            return cands[k:]
        freed -= gain
    return []


def _brief_gain(comp: ProgressiveCompactor, index: int) -> int:
    """Tokens a brief placeholder frees in place of the preview at ``index`` (0: none, or
    fewer than ``BRIEF_MIN_GAIN``: not worth rewriting the message for)."""
    call_id = comp.view.history[index].tool_call_id or ""
    entry = comp.offload.get(call_id) if comp.offload is not None else None
    if entry is None:
        return 0
    if comp.state.offload_policies.get(call_id, entry.policy) not in BRIEFED:
        return 0
    key = f"{call_id}:{entry.sha256}"
    brief = comp.brief_tokens.get(key)
    if brief is None:
        original = comp.view.history[index].text
        if (
            sha256_hex(original.encode("utf-8", "surrogatepass")) != entry.sha256
        ):  # the entry is of another output
            brief = -1
        else:
            brief = comp.count_text(placeholder(entry, original, comp.policies["brief"]))
        comp.brief_tokens[key] = brief
    if brief < 0:
        return 0
    gain = comp.view.tokens_of(index) - brief
    return gain if gain >= BRIEF_MIN_GAIN else 0


def _shorten(comp: ProgressiveCompactor, index: int) -> bool:
    """Put a brief placeholder in place of the preview at ``index`` (the entry is stored)."""
    assert comp.offload is not None
    entry = comp.offload.get(comp.view.history[index].tool_call_id or "")
    if entry is None:
        return False
    comp.apply_offload(index, entry, comp.policies["brief"])
    return True


def offload_stale(comp: ProgressiveCompactor, run: _Run, *, force: bool = False) -> int:
    """Move the stale candidates out of the view when the batch pays for its cache miss (or
    ``force``). Returns how many messages changed."""
    if comp.offload is None or comp.cfg.stale_after <= 0:
        return 0
    policy = comp.policies["stale"]
    v = comp.view
    if not force and comp.view_tokens() - comp.fixed_tokens() < (
        comp.cfg.warn_threshold * comp.working_window
    ):
        return 0  # a small view stays as it is (no rewrite, no cache miss): nothing to look at
    cands = stale_candidates(comp, policy)
    if not force:
        cands = _paying_batch(comp, cands)
    if not cands:
        return 0
    freed = sum(t for _, t in cands)
    suffix = v.range_tokens(cands[0][0], len(v))
    done = 0
    for i, _ in cands:
        original = v.history[i]
        if original.role == "tool" and v.forms[i].metadata.get("cf_offloaded"):
            if _shorten(comp, i):
                run.briefed += 1
                done += 1
            continue
        if original.role != "tool":
            before = len(run.offloaded)
            comp._squeeze_one(
                run, i, f"args-{original.uuid}", calls_json(v.forms[i]), "squeeze_args"
            )
            done += len(run.offloaded) - before
            continue
        try:
            entry: OffloadEntry = comp.offload.write(
                original.tool_call_id or "",
                original.text,
                message_uuid=original.uuid,
                policy=policy.name,
                tool_name=comp._tool_name(i),
            )
        except ContextFoldError as exc:
            run.errors.append(f"offload failed for {original.tool_call_id}: {exc}")
            continue
        comp.apply_offload(i, entry, policy)
        run.offloaded.append(entry)
        done += 1
    if done:
        run.notes.append(
            f"{done} stale tool outputs, call arguments and previews (older than the newest "
            f"{comp.cfg.stale_after} results) offloaded together: about {freed} tokens, "
            f"{freed / max(1, suffix):.0%} of the view after the first of them"
        )
    return done
