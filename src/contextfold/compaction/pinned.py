"""Oversized pinned messages: head and tail in the view, the whole text in the offload store.

The system prompt, the first and the newest user message (and the newest later instructions)
are pinned: compaction never moves them behind the boundary. A pinned message larger than the
window would therefore make every view too large. Such a message keeps its role and position,
but its view form becomes the head and tail of its text plus a pointer to the full text, which
is written byte-exact (sha256) to the session's offload store under ``msg-<uuid>``, the same
store and ``read_offloaded`` / ``recover_tool_result`` path as offloaded tool results.

The reduced form is a pure function of the text and a token budget; the budget is part of the
policy name (``pinned:<tokens>``) so reopening a session rebuilds the same form.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..core.messages import Content
from ..core.records import OffloadEntry
from ..errors import ContextFoldError, StorageError
from .offload import offloadable_text

if TYPE_CHECKING:
    from .common import _Run
    from .progressive import ProgressiveCompactor

PINNED_POLICY = "pinned"
#: The smallest body budget tried before prepare() gives up (tokens per pinned message).
MIN_PINNED_TOKENS = 64


def pinned_key(message_uuid: str) -> str:
    return f"msg-{message_uuid}"


def policy_name(budget: int) -> str:
    return f"{PINNED_POLICY}:{budget}"


def budget_of(name: str) -> int | None:
    """The token budget of a ``pinned:<tokens>`` policy name, else None."""
    head, sep, tail = name.partition(":")
    if head != PINNED_POLICY or not sep or not tail.isdigit():
        return None
    return int(tail)


def reduced_text(
    text: str, entry: OffloadEntry, role: str, budget: int, count: Callable[[str], int]
) -> str:
    """Head and tail of ``text`` plus the pointer, within ``budget`` tokens when the budget
    allows any body at all. Each shrink step cuts a third: O(log) counts of short texts."""
    key = entry.tool_call_id
    header = (
        f"[message shortened: this {role} message has {entry.chars} characters "
        f"({entry.lines} lines, sha256 {entry.sha256[:16]}); the full text is saved to "
        f'{entry.path}; read it with read_offloaded(id="{key}") using offset/limit]'
    )
    chars = max(0, budget * 4)
    while True:
        head_n = chars // 2
        tail_n = chars - head_n
        if head_n + tail_n >= len(text):
            body = text
        else:
            omitted = len(text) - head_n - tail_n
            tail = text[len(text) - tail_n :] if tail_n else ""
            body = f"{text[:head_n]}\n... [{omitted} characters omitted] ...\n{tail}"
        out = f"{header}\n{body}"
        if chars <= 0 or count(out) <= budget:
            return out
        chars = chars * 2 // 3 if chars > 30 else 0


def _reduced_content(original: Content, reduced: str) -> Content:
    """Replace the text of ``original`` by ``reduced``; non-text blocks (images) are kept."""
    if not isinstance(original, tuple):
        return reduced
    out: list[Mapping[str, Any]] = []
    placed = False
    for block in original:
        if isinstance(block, dict) and block.get("type") == "text":
            if not placed:
                out.append({"type": "text", "text": reduced})
                placed = True
            continue
        out.append(block)
    if not placed:
        out.insert(0, {"type": "text", "text": reduced})
    return tuple(out)


def pinned_indices(comp: ProgressiveCompactor) -> list[int]:
    """History indices in the view that compaction never moves: the leading system messages,
    the first and newest user message, the later instructions the view keeps and the
    messages carrying the client's current state (its files block, repository map)."""
    v = comp.view
    out = set(range(v.prefix_len))
    for i in (v.first_user, v.newest_user):
        if i is not None:
            out.add(i)
    out.update(v.later_system[-5:])
    out.update(i for i in v.state_pins[-v.MAX_STATE_PINS :] if i not in v.retracted)
    return sorted(out)


def apply_pinned(comp: ProgressiveCompactor, index: int, entry: OffloadEntry, name: str) -> bool:
    """Set the reduced view form of history[index] (also when a session is reopened)."""
    budget = budget_of(name)
    if budget is None:
        return False
    original = comp.view.history[index]
    text = reduced_text(original.text, entry, original.role, budget, comp.count_text)
    form = original.with_content(
        _reduced_content(original.content, text), cf_offloaded=entry.path, cf_replaced=True
    )
    comp.view.set_form(index, form)
    comp.state.offload_policies[entry.tool_call_id] = name
    return True


def reduce_pinned(
    comp: ProgressiveCompactor,
    run: _Run | None,
    *,
    above: int,
    budget: int,
    errors: list[str],
) -> list[OffloadEntry]:
    """Reduce every pinned message whose view form has more than ``above`` tokens to about
    ``budget`` tokens. Returns the entries written; failures are appended to ``errors`` and
    leave the message as it was (fail-open, the caller decides whether the view still fits)."""
    if comp.offload is None:
        return []
    v = comp.view
    done: list[OffloadEntry] = []
    for i in sorted(pinned_indices(comp), key=lambda j: -v.tokens_of(j)):
        if v.tokens_of(i) <= max(above, budget):
            break
        original = v.history[i]
        form = v.forms[i]
        current = budget_of(comp.state.offload_policies.get(pinned_key(original.uuid), ""))
        if current is not None and current <= budget:
            continue  # already as small as asked
        if offloadable_text(original.content) is None and not original.text:
            continue  # no text to shorten (only images or other blocks)
        if form.role == "tool" or original.tool_calls:
            continue  # never pinned in practice; tool pairs are the squeeze's job
        try:
            entry = comp.offload.write(
                pinned_key(original.uuid),
                original.text,
                message_uuid=original.uuid,
                policy=policy_name(budget),
                tool_name=None,
            )
        except (ContextFoldError, StorageError) as exc:
            errors.append(f"shortening pinned {original.role} message {i} failed: {exc}")
            continue
        apply_pinned(comp, i, entry, policy_name(budget))
        done.append(entry)
        if run is not None:
            run.offloaded.append(entry)
            run.notes.append(
                f"pinned {original.role} message {i} ({entry.chars} characters) shortened to "
                f"head and tail (about {budget} tokens); full text in {entry.path}"
            )
    return done


def fit_pinned(comp: ProgressiveCompactor, run: _Run, extra: int) -> None:
    """Last step before giving up: shorten pinned messages with shrinking budgets until the
    view fits the window (or the smallest budget is reached)."""
    window = comp.window
    budget = comp.pinned_budget
    while comp.view_tokens(extra) > window:
        reduce_pinned(comp, run, above=budget, budget=budget, errors=run.errors)
        if budget <= MIN_PINNED_TOKENS:
            break
        budget = max(MIN_PINNED_TOKENS, budget // 3)
