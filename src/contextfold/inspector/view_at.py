"""The view at one model call next to the full history: each message before the call, kept
in the view, pinned, offloaded or summarized, with where it went."""

from __future__ import annotations

from typing import Any

from ..core.view_layout import CHANGED, VIEW_EVENT, positions
from ..errors import ConfigError
from ..jsontypes import JSON, JSONObject
from ..recovery.sessions.log import entry_of
from ..storage import Store
from .data import PREVIEW_CHARS, Compaction, LogDigest, read_log


def _governing(log: LogDigest, seq: int) -> tuple[Compaction | None, int]:
    """The newest compaction before event ``seq`` and the view's boundary then."""
    current = None
    for c in log.compactions:
        if c.seq < seq:
            current = c
    boundary = 0
    for s, b in log.states:
        if s < seq:
            boundary = b
    return current, boundary


def _evidence_by_message(log: LogDigest, seq: int) -> dict[str, str]:
    out: dict[str, str] = {}
    for s, block in log.blocks:
        if s >= seq:
            break
        for p in block.evidence:
            if p.message_uuid:
                out.setdefault(p.message_uuid, p.id)
    return out


def _previews(store: Store, session_id: str, stop_seq: int) -> dict[int, str]:
    out: dict[int, str] = {}
    for ev in store.read(session_id, stop=stop_seq, kinds=["message"]):
        e = entry_of(ev)
        text = e.message.text
        if not text and e.message.tool_calls:
            text = "; ".join(f"{c.name}({c.arguments})" for c in e.message.tool_calls)
        out[e.seq] = text[:PREVIEW_CHARS]
    return out


def _status(pos: int, boundary: int, pinned: set[int], offload: dict[str, Any] | None) -> str:
    if pos in pinned:
        return "pinned"
    if pos < boundary:
        return "summarized"
    if offload is not None:
        return "evicted" if offload.get("policy") == "eviction" else "offloaded"
    return "kept"


Layout = tuple[dict[int, str], int]


def _recorded(store: Store, session_id: str, seq: int) -> Layout | None:
    """The layout the newest compaction before event ``seq`` recorded (None: none was, as in
    stores written before views were recorded)."""
    last = None
    for ev in store.read(session_id, stop=seq, kinds=[VIEW_EVENT]):
        last = ev
    if last is None:
        return None
    try:
        items, _summary, length = positions(dict(last.data))
    except (ValueError, TypeError):
        return None
    return items, length


def _recorded_status(
    pos: int, layout: Layout, pinned: set[int], offload: dict[str, Any] | None
) -> str:
    items, length = layout
    if pos >= length:  # appended after the compaction: sent as it is
        return "pinned" if pos in pinned else "kept"
    code = items.get(pos)
    if code is None:
        return "summarized"
    if code == CHANGED:
        if offload is not None:
            return "evicted" if offload.get("policy") == "eviction" else "offloaded"
        return "shortened"
    return "pinned" if pos in pinned else "kept"


def view_at(store: Store, session_id: str, call: int) -> JSONObject:
    """Every history message before model call ``call`` (1-based), marked."""
    log = read_log(store, session_id)
    calls = log.calls()
    if not calls:
        raise ConfigError(f"session {session_id!r} has no model calls yet")
    if not 1 <= call <= len(calls):
        raise ConfigError(f"session {session_id!r} has model calls 1-{len(calls)}; no call {call}")
    pos = calls[call - 1]
    seq = log.messages[pos].seq
    comp, boundary = _governing(log, seq)
    offloads = {e["tool_call_id"]: e for s, e in log.offloads if s < seq and "tool_call_id" in e}
    evidence = _evidence_by_message(log, seq)
    heads = log.messages[:pos]
    first = next(
        (i for i, h in enumerate(log.messages) if h.role not in ("system", "developer")), 0
    )
    pinned = {h.pos for h in heads[:first]}
    users = [h.pos for h in heads if h.role == "user"]
    pinned.update(users[:1] + users[-1:])
    previews = _previews(store, session_id, seq)
    layout = _recorded(store, session_id, seq) if comp is not None else None
    rows: list[JSON] = []
    for h in heads:
        off = offloads.get(h.tool_call_id) if h.tool_call_id else None
        if layout is not None:
            status = _recorded_status(h.pos, layout, pinned, off)
        else:
            status = _status(h.pos, boundary, pinned, off)
        rows.append(
            {
                "position": h.pos,
                "role": h.role,
                "tokens": h.tokens,
                "status": status,
                "preview": previews.get(h.pos, ""),
                "tool_call_id": h.tool_call_id,
                "offload": off,
                "evidence": evidence.get(h.uuid),
                "compaction": comp.number if comp is not None and status == "summarized" else None,
            }
        )
    return {
        "session_id": session_id,
        "call": call,
        "position": pos,
        "boundary": boundary,
        #: the view as recorded when it was sent (else reconstructed from the records)
        "recorded": layout is not None,
        "compaction": comp.number if comp is not None else None,
        "summary": comp.record.summary_text if comp is not None else "",
        "messages": rows,
    }
