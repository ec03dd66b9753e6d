"""What the inspector shows, read from a store: the sessions, one session's model calls and
compactions, and the view at one call next to the full history.

Everything here only reads. A session's log holds, in order, its ``message`` events, and for
each compaction a ``compaction`` event (the record), a ``state`` event (where the view's
uncompacted part starts) and ``offload``/``evidence`` events (what left the view and where it
went). A model call is an assistant message: the call was made with the messages before it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.records import CompactionRecord
from ..engine.session_ops import get_session
from ..errors import ConfigError
from ..evidence.model import CompactBlock, EvidenceFormatError
from ..jsontypes import JSON, JSONObject, need_object, to_int
from ..recovery.sessions.log import entry_of
from ..storage import Store

#: characters of a message shown in a view listing (the whole text is one click away)
PREVIEW_CHARS = 240
#: the most sessions one page of the session list holds
MAX_PAGE = 200


@dataclass(kw_only=True, slots=True)
class MessageHead:
    pos: int
    seq: int
    uuid: str
    role: str
    tokens: int
    tool_call_id: str | None


@dataclass(kw_only=True, slots=True)
class Compaction:
    number: int
    seq: int
    #: messages in the history when it ran
    at_message: int
    record: CompactionRecord
    #: history position where the view's uncompacted part starts after it
    boundary: int = 0


@dataclass(kw_only=True, slots=True)
class LogDigest:
    """The parts of one session's log the inspector needs (message bodies not included)."""

    session_id: str
    agent_id: str
    messages: list[MessageHead] = field(default_factory=list)
    compactions: list[Compaction] = field(default_factory=list)
    #: (seq, boundary) of each ``state`` event
    states: list[tuple[int, int]] = field(default_factory=list)
    #: (seq, entry dict) of each ``offload`` event
    offloads: list[tuple[int, JSONObject]] = field(default_factory=list)
    blocks: list[tuple[int, CompactBlock]] = field(default_factory=list)
    head: int = 0

    def prefix_tokens(self) -> list[int]:
        out = [0]
        for m in self.messages:
            out.append(out[-1] + m.tokens)
        return out

    def calls(self) -> list[int]:
        """History positions of the assistant messages (model calls), oldest first."""
        return [m.pos for m in self.messages if m.role == "assistant" and m.pos > 0]


def _head_of(seq: int, head: Any, pos: int) -> MessageHead | None:
    if type(head) is list and len(head) >= 5:
        at, uuid, role, tokens, call_id = head[:5]
    elif isinstance(head, dict):
        at, uuid, role = head.get("pos"), head.get("uuid"), head.get("role")
        tokens, call_id = head.get("tokens"), head.get("tool_call_id")
    else:
        return None
    if at != pos or not isinstance(uuid, str) or not isinstance(role, str):
        return None
    return MessageHead(
        pos=pos,
        seq=seq,
        uuid=uuid,
        role=role,
        tokens=tokens if type(tokens) is int else 0,
        tool_call_id=call_id if isinstance(call_id, str) else None,
    )


def _message_heads(store: Store, session_id: str) -> list[MessageHead]:
    heads = store.read_heads(session_id, kinds=["message"])
    out: list[MessageHead] = []
    for pos, h in enumerate(heads):
        got = _head_of(h.seq, h.head, pos)
        if got is None:  # an older log without heads: read the messages themselves
            return _read_messages(store, session_id)
        out.append(got)
    return out


def _read_messages(store: Store, session_id: str) -> list[MessageHead]:
    out: list[MessageHead] = []
    for ev in store.read(session_id, kinds=["message"]):
        e = entry_of(ev)
        out.append(
            MessageHead(
                pos=e.seq,
                seq=ev.seq,
                uuid=e.uuid,
                role=e.message.role,
                tokens=e.tokens if e.tokens is not None else len(e.message.text) // 4,
                tool_call_id=e.message.tool_call_id,
            )
        )
    return out


def read_log(store: Store, session_id: str) -> LogDigest:
    """The session's message heads, compactions, states, offloads and evidence blocks."""
    info = get_session(store, session_id)
    log = LogDigest(session_id=session_id, agent_id=info.agent_id)
    log.head = store.head(session_id)
    log.messages = _message_heads(store, session_id)
    seqs = [m.seq for m in log.messages]
    for ev in store.read(session_id, kinds=["compaction", "state", "offload", "evidence"]):
        data = ev.data
        try:
            if ev.kind == "compaction":
                record = CompactionRecord.from_dict(data["record"])
                at = _count_before(seqs, ev.seq)
                n = len(log.compactions) + 1
                log.compactions.append(
                    Compaction(number=n, seq=ev.seq, at_message=at, record=record)
                )
            elif ev.kind == "state":
                boundary = to_int(data.get("boundary") or 0)
                log.states.append((ev.seq, boundary))
                if log.compactions and log.compactions[-1].seq < ev.seq:
                    log.compactions[-1].boundary = boundary
            elif ev.kind == "offload":
                log.offloads.append((ev.seq, dict(need_object(data["entry"], "offload entry"))))
            else:
                log.blocks.append((ev.seq, CompactBlock.from_dict(data["block"])))
        except (KeyError, TypeError, ValueError, EvidenceFormatError):
            continue  # a damaged event: the rest of the log is still shown
    return log


def _count_before(seqs: Sequence[int], seq: int) -> int:
    lo, hi = 0, len(seqs)
    while lo < hi:
        mid = (lo + hi) // 2
        if seqs[mid] < seq:
            lo = mid + 1
        else:
            hi = mid
    return lo


# --------------------------------------------------------------------------- session list


def session_row(store: Store, session_id: str) -> JSONObject:
    """One line of the session list: agent, messages, tokens, compactions, last activity."""
    info = get_session(store, session_id)
    heads = _message_heads(store, session_id)
    history = sum(h.tokens for h in heads)
    compactions = store.read_heads(session_id, kinds=["compaction"])
    view = history
    if compactions:
        last = store.read_last(session_id, 1, kinds=["compaction"])
        try:
            record = CompactionRecord.from_dict(last[0].data["record"])
            after = [h.tokens for h in heads if h.seq > last[0].seq]
            view = record.tokens_after + sum(after)
        except (KeyError, TypeError, ValueError, IndexError):
            view = history
    return {
        "session_id": info.session_id,
        "agent_id": info.agent_id,
        "title": info.title,
        "messages": info.messages,
        "history_tokens": history,
        "view_tokens": view,
        "compactions": len(compactions),
        "created_at": info.created_at,
        "updated_at": info.updated_at,
    }


def list_sessions(
    store: Store, *, query: str = "", agent: str = "", limit: int = 50, offset: int = 0
) -> JSONObject:
    """A page of the store's sessions, most recently active first, filtered by agent and by
    ``query`` (a part of the session id, title or agent, any case)."""
    if not 1 <= limit <= MAX_PAGE:
        raise ConfigError(f"limit must be between 1 and {MAX_PAGE}, got {limit}")
    if offset < 0:
        raise ConfigError(f"offset must be 0 or more, got {offset}")
    infos = store.sessions([agent] if agent else None)
    q = query.strip().lower()
    if q:
        infos = [
            i
            for i in infos
            if q in i.session_id.lower() or q in i.title.lower() or q in i.agent_id.lower()
        ]
    page = infos[offset : offset + limit]
    return {
        "total": len(infos),
        "offset": offset,
        "sessions": [session_row(store, i.session_id) for i in page],
        "agents": list[JSON](sorted({i.agent_id for i in store.sessions()})),
    }


# --------------------------------------------------------------------------- timeline


def _record_json(c: Compaction) -> dict[str, Any]:
    r = c.record
    return {
        "number": c.number,
        "id": r.id,
        "at_message": c.at_message,
        "boundary": c.boundary,
        "timestamp": r.timestamp,
        "tier": r.tier.value,
        "reason": r.reason,
        "strategy": r.strategy,
        "tokens_before": r.tokens_before,
        "tokens_after": r.tokens_after,
        "ratio": r.compression_ratio,
        "summarized": r.summarized,
        "preserved_tail": r.preserved_tail,
        "offloaded": [e.to_dict() for e in r.offloaded],
        "anchors": [{"type": a.type.value, "content": a.content} for a in r.anchors],
        "summary": r.summary_text,
        "summarizer": r.summarizer,
        "error": r.error,
        "notes": list(r.notes),
        "duration_ms": r.duration_ms,
        "forced": r.forced,
    }


def timeline(store: Store, session_id: str) -> JSONObject:
    """Per model call the tokens of the full history and of the view, and every compaction.

    The view's size at a call is the newest compaction's tokens after it plus the messages
    added since (before any compaction, the whole history)."""
    log = read_log(store, session_id)
    prefix = log.prefix_tokens()
    calls: list[dict[str, Any]] = []
    ci = 0
    current: Compaction | None = None
    for n, pos in enumerate(log.calls(), 1):
        seq = log.messages[pos].seq
        while ci < len(log.compactions) and log.compactions[ci].seq < seq:
            current = log.compactions[ci]
            ci += 1
        view = prefix[pos]
        if current is not None:
            view = current.record.tokens_after + prefix[pos] - prefix[current.at_message]
        calls.append(
            {
                "call": n,
                "position": pos,
                "history_tokens": prefix[pos],
                "view_tokens": view,
                "compaction": current.number if current is not None else None,
            }
        )
    comps = [_record_json(c) for c in log.compactions]
    for item in comps:  # the first call made after it
        item["call"] = next((k["call"] for k in calls if k["position"] >= item["at_message"]), None)
    return {
        "session_id": log.session_id,
        "agent_id": log.agent_id,
        "head": log.head,
        "messages": len(log.messages),
        "history_tokens": prefix[-1],
        "calls": list[JSON](calls),
        "compactions": list[JSON](comps),
    }
