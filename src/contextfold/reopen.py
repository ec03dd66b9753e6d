"""Reopening a session: the view from small per-message heads, old messages on demand.

Each stored message carries a head (position, uuid, role, the call it answers or the calls it
makes, token count: :func:`~contextfold.sessions.log.message_head`). Reopening reads every head
but decodes only the messages the view can show: the system prompt, the pinned ones (first
and newest user request, the newest later instructions) and everything from the compaction
boundary on. The history before the boundary is loaded the first time something asks for one
of its messages (``cm.history``, an export); building views, compacting, adding and
``restore`` do not. A session with events written before heads existed (an older release) is
read entirely, as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .compactors.pinned import budget_of
from .errors import InvalidMessageError
from .messages import Message
from .sessions.log import LogEntry, entry_of

if TYPE_CHECKING:
    from .manager import ContextManager
    from .records import OffloadEntry

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
Head = tuple[str, str, str | None, tuple[str, ...], int]


def _parse_heads(rows: Sequence[Any]) -> tuple[list[Head], list[int], dict[int, Any]] | None:
    """(heads, event seq of each position, stored calls by position); None when any head is
    missing or not in the expected form (then every message is read)."""
    heads: list[Head] = []
    seqs: list[int] = []
    calls: dict[int, Any] = {}
    for row in rows:
        h = row.head
        try:
            uuid, role, tokens = h["uuid"], h["role"], h["tokens"]
            call_id = h.get("tool_call_id")
            raw = h.get("calls")
            ids = tuple([c["id"] for c in raw]) if raw is not None else ()
        except (TypeError, KeyError, AttributeError):
            return None
        if (
            h["pos"] != len(heads)
            or type(uuid) is not str
            or role not in _ROLES
            or type(tokens) is not int
            or (call_id is not None and type(call_id) is not str)
            or any(type(c) is not str for c in ids)
        ):
            return None
        if raw is not None:
            calls[len(heads)] = raw
        heads.append((uuid, role, call_id, ids, tokens))
        seqs.append(row.seq)
    return heads, seqs, calls


def _boundary(heads: Sequence[Head], state: Mapping[str, Any] | None) -> int:
    """Where the stored view's boundary is (0: none, or not a usable cut)."""
    if not state:
        return 0
    b = state.get("boundary")
    wanted = state.get("boundary_uuid")
    if isinstance(wanted, str):
        found = next((i for i, h in enumerate(heads) if h[0] == wanted), None)
        if found is not None:
            b = found
    if isinstance(b, bool) or not isinstance(b, int) or not 0 < b < len(heads):
        return 0
    return b if heads[b][1] != "tool" else 0


def _needed(heads: Sequence[Head], boundary: int) -> set[int]:
    """Positions before the boundary the view can show: the leading instructions, the first
    and newest user request and the newest later instructions."""
    out: set[int] = set()
    i = 0
    while i < len(heads) and heads[i][1] in ("system", "developer"):
        out.add(i)
        i += 1
    users = [j for j, h in enumerate(heads) if h[1] == "user"]
    if users:
        out.update((users[0], users[-1]))
    later = [j for j in range(i, len(heads)) if heads[j][1] in ("system", "developer")]
    out.update(later[-5:])
    return {j for j in out if j < boundary}


def load_lazily(cm: ContextManager) -> list[Any] | None:
    """Build ``cm.view`` from the message heads; returns the offload events (for the caller
    to load), or None when the session must be read entirely."""
    session = cm.session
    parsed = _parse_heads(session.read_heads(["message"]))
    if parsed is None:
        return None
    heads, seqs, calls = parsed
    last = session.read_last(1, ["state"])
    boundary = _boundary(heads, last[0].data if last else None)
    wanted = sorted(_needed(heads, boundary))
    store, sid = session.store, session.session_id
    entries: list[LogEntry] = [
        entry_of(e)
        for pos in wanted
        for e in store.read(sid, start=seqs[pos], stop=seqs[pos] + 1, kinds=["message"])
    ]
    if boundary < len(heads):
        entries.extend(entry_of(e) for e in session.read(start=seqs[boundary], kinds=["message"]))
    loaded: dict[int, Message] = {}
    for entry in entries:
        if entry.seq >= len(heads) or heads[entry.seq][0] != entry.uuid:
            return None  # heads and messages disagree: read everything
        loaded[entry.seq] = entry.message
        if entry.tokens is not None:
            cm._cache.seed(entry.message, entry.tokens)

    def load(positions: list[int]) -> dict[int, Message]:
        out: dict[int, Message] = {}
        if not positions:
            return out
        start, stop = seqs[positions[0]], seqs[positions[-1]] + 1
        want = set(positions)
        for event in store.read(sid, start=start, stop=stop, kinds=["message"]):
            entry = entry_of(event)
            if entry.seq in want:
                if entry.tokens is not None:
                    cm._cache.seed(entry.message, entry.tokens)
                out[entry.seq] = entry.message
        return out

    try:
        cm.view.adopt(heads, loaded, load, cm._reapply_deferred)
    except InvalidMessageError:
        return None  # the view is left untouched
    cm.recovery.stored_calls = calls
    cm.recovery.calls_known = len(heads)
    cm._seqs = seqs
    return list(session.read(kinds=["offload"]))


def deferred_policy(cm: ContextManager, entry: OffloadEntry, policy: str) -> bool:
    """Whether reapplying ``entry`` under ``policy`` would record that policy (then the
    deferred entry records it at once: a state saved before the history is loaded keeps it)."""
    return (
        policy == "squeeze_args" or budget_of(policy) is not None or policy in cm.compactor.policies
    )


__all__ = ["deferred_policy", "load_lazily"]
