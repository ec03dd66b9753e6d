"""Loading a session into its session context, and the compactor state saved with it.

Reopening builds the view from small per-message heads and loads old messages on demand.

Each stored message carries a head (position, uuid, role, the call it answers or the calls it
makes, token count: :func:`~contextfold.recovery.sessions.log.message_head`). Reopening reads every head
but decodes only the messages the view can show: the system prompt, the pinned ones (first
and newest user request, the newest later instructions) and everything from the compaction
boundary on. The history before the boundary is loaded the first time something asks for one
of its messages (``ContextManager.history``, an export); building views, compacting, adding and
``restore`` do not. A session with events written before heads existed (an older release) is
read entirely, as before.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..compaction.pinned import budget_of
from ..compaction.progressive import CompactorState
from ..core.anchors import Anchor, AnchorType
from ..core.messages import Message
from ..core.tokens import Calibration
from ..errors import ConfigError, InvalidMessageError, StorageError
from ..jsontypes import JSON, JSONObject
from ..providers.limits import LearnedWindow
from ..recovery.sessions.log import LogEntry, entry_of
from ..storage.base import Event
from .client_rewrite import REWRITE, stored_retracts
from .context import SessionContext
from .state import load_state as load_session_state

if TYPE_CHECKING:
    from ..core.records import OffloadEntry
    from ..core.view import HistoryView

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
Head = tuple[str, str, str | None, tuple[str, ...], int]


def _parse_heads(rows: Sequence[Any]) -> tuple[list[Head], list[int], dict[int, JSON]] | None:
    """(heads, event seq of each position, calls stored in heads of the older form by
    position); None when any head is missing or not in an expected form (then every message
    is read). A head is ``[pos, uuid, role, tokens, tool_call_id, call ids]``, or an object
    with those fields and the calls' details (written before the details had their column)."""
    heads: list[Head] = []
    seqs: list[int] = []
    calls: dict[int, JSON] = {}
    append, add_seq, roles = heads.append, seqs.append, _ROLES
    try:
        for pos, (seq, _kind, h, _detail) in enumerate(rows):
            if type(h) is list:
                at, uuid, role, tokens, call_id, ids = h[:6]  # h[6]: the caller's key
                ids = tuple(ids) if ids else ()
            else:
                at, uuid, role, tokens = h["pos"], h["uuid"], h["role"], h["tokens"]
                call_id = h.get("tool_call_id")
                raw = h.get("calls")
                ids = ()
                if raw is not None:
                    ids = tuple([c["id"] for c in raw])
                    calls[pos] = raw
            if (
                at != pos
                or type(uuid) is not str
                or role not in roles
                or type(tokens) is not int
                or (call_id is not None and type(call_id) is not str)
                or not all(type(c) is str for c in ids)
            ):
                return None
            append((uuid, role, call_id, ids, tokens))
            add_seq(seq)
    except (TypeError, KeyError, AttributeError, ValueError):
        return None
    return heads, seqs, calls


def _check_head(session_id: str, heads: Sequence[Head], entry: LogEntry) -> None:
    """A message loaded after a lazy reopen must be what its head said (the view was built
    from the heads); StorageError naming the position otherwise (nothing is changed)."""
    msg = entry.message
    uuid, role, call_id, ids, _tokens = heads[entry.seq]
    if (
        msg.uuid != uuid
        or msg.role != role
        or (msg.tool_call_id if role == "tool" else None) != (call_id if role == "tool" else None)
        or tuple(c.id for c in msg.tool_calls) != ids
    ):
        raise StorageError(
            f"session {session_id!r}: the stored message at position {entry.seq} does not match "
            "its head (the heads column was changed outside contextfold); the view built from "
            "the heads is kept"
        )


def stored_calls_of(ctx: SessionContext, calls: dict[int, JSON]) -> Callable[[], dict[int, JSON]]:
    """What each call was about, by history position, read when first needed (an ordinal
    recall question): from the heads' detail column, or the older heads that held them."""

    known = len(ctx.view)

    def read() -> dict[int, JSON]:
        out = dict(calls)
        rows = ctx.session.read_heads(["message"], details=True)
        for pos, row in enumerate(rows[:known]):  # later messages: derived as they come
            if row.detail is not None:
                out[pos] = row.detail
        return out

    return read


def _boundary(heads: Sequence[Head], state: Mapping[str, JSON] | None) -> int:
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


def _needed(heads: Sequence[Head], boundary: int, gone: set[int]) -> set[int]:
    """Positions before the boundary the view can show: the leading instructions, the first
    and newest user request and the newest later instructions (``gone``: retracted ones,
    never shown)."""
    out: set[int] = set()
    i = 0
    while i < len(heads) and heads[i][1] in ("system", "developer"):
        out.add(i)
        i += 1
    users = [j for j, h in enumerate(heads) if h[1] == "user" and j not in gone]
    if users:
        out.update((users[0], users[-1]))
    later = [
        j for j in range(i, len(heads)) if heads[j][1] in ("system", "developer") and j not in gone
    ]
    out.update(later[-5:])
    return {j for j in out if j < boundary and j not in gone}


def load_lazily(ctx: SessionContext) -> list[Event] | None:
    """Build ``ctx.view`` from the message heads; returns the offload events (for the caller
    to load), or None when the session must be read entirely."""
    session = ctx.session
    parsed = _parse_heads(session.read_heads(["message"]))
    if parsed is None:
        return None
    heads, seqs, calls = parsed
    retracts = stored_retracts(session.read(kinds=[REWRITE]))
    gone = {p for ps in retracts.values() for p in ps}
    last = session.read_last(1, ["state"])
    boundary = _boundary(heads, last[0].data if last else None)
    wanted = sorted(_needed(heads, boundary, gone))
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
            ctx.cache.seed(entry.message, entry.tokens)

    def load_some(positions: list[int]) -> dict[int, Message]:
        out: dict[int, Message] = {}
        if not positions:
            return out
        start, stop = seqs[positions[0]], seqs[positions[-1]] + 1
        want = set(positions)
        for event in store.read(sid, start=start, stop=stop, kinds=["message"]):
            entry = entry_of(event)
            if entry.seq in want:
                _check_head(sid, heads, entry)
                if entry.tokens is not None:
                    ctx.cache.seed(entry.message, entry.tokens)
                out[entry.seq] = entry.message
        return out

    try:
        ctx.view.adopt(heads, loaded, load_some, lambda: reapply_deferred(ctx), retracts)
    except InvalidMessageError:
        return None  # the view is left untouched
    ctx.recovery.stored_calls = {}
    ctx.recovery.read_stored_calls = stored_calls_of(ctx, calls)
    ctx.recovery.calls_known = len(heads)
    ctx.seqs = seqs
    return list(session.read(kinds=["offload"]))


def deferred_policy(ctx: SessionContext, entry: OffloadEntry, policy: str) -> bool:
    """Whether reapplying ``entry`` under ``policy`` would record that policy (then the
    deferred entry records it at once: a state saved before the history is loaded keeps it)."""
    return (
        policy == "squeeze_args"
        or budget_of(policy) is not None
        or policy in ctx.compactor.policies
    )


def load(ctx: SessionContext) -> None:
    ctx.seqs = None
    ctx.deferred = []
    # tens of thousands of small objects are made and all kept: a cyclic collection in the
    # middle would scan them (and everything else alive) for nothing
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        offloads = load_lazily(ctx)
        if offloads is None:  # events of an older release (no heads): read every message
            offloads = load_all(ctx)
    finally:
        if was_enabled:
            gc.enable()
    ctx.offload.load(offloads)
    if ctx.eviction_store is not ctx.offload:
        ctx.eviction_store.load(offloads)
    # user data, not derived: a damaged snapshot is an error naming it, never dropped
    ctx.session_state = load_session_state(ctx.session)
    load_view_state(ctx)


def load_all(ctx: SessionContext) -> list[Event]:
    offloads = []
    entries: list[LogEntry] = []
    stored_calls = ctx.recovery.stored_calls
    rewrites: list[Event] = []
    for event in ctx.session.read(kinds=["message", "offload", REWRITE]):
        if event.kind == "offload":
            offloads.append(event)
            continue
        if event.kind == REWRITE:
            rewrites.append(event)
            continue
        raw_calls = event.data.get("calls")
        if raw_calls is not None:
            stored_calls[len(entries)] = raw_calls  # read when recall first needs them
        entries.append(entry_of(event))
    answered = {e.message.tool_call_id for e in entries if e.message.role == "tool"}
    retracts = stored_retracts(rewrites)
    for entry in entries:
        if len(ctx.view) in retracts:
            ctx.view.retract([p for p in retracts.pop(len(ctx.view)) if p < len(ctx.view)])
        msg = entry.message
        if entry.tokens is not None:
            ctx.cache.seed(msg, entry.tokens)
        if msg.tool_calls:
            ctx.view.expect_answers(
                len(ctx.view), {c.id for c in msg.tool_calls if c.id in answered}
            )
        ctx.view.append(msg, entry.seq, checked=True)  # entry_of validated it
    if len(ctx.view) in retracts:
        ctx.view.retract([p for p in retracts.pop(len(ctx.view)) if p < len(ctx.view)])
    return offloads


def load_view_state(ctx: SessionContext) -> None:
    last = ctx.session.read_last(1, ["state"])
    calibration = ctx.store.get_doc("calibration", f"{ctx.session_id}/calibration")
    if not last:
        reapply_offloads(ctx, {})
    else:
        try:
            apply_state(ctx, last[0].data)
        except (ValueError, TypeError, KeyError) as exc:
            # the state is derived (the log is the truth): start the view over, say why
            ctx.recovery.note_problem(f"compactor state (event {last[0].seq}) ignored: {exc}")
            ctx.compactor.state = CompactorState()
            ctx.bind_calibration(Calibration())
            reapply_offloads(ctx, {})
    if calibration is not None:
        with contextlib.suppress(ValueError, TypeError, KeyError):
            ctx.bind_calibration(Calibration.from_dict(calibration))


def apply_state(ctx: SessionContext, data: Mapping[str, JSON]) -> None:
    """Restore the compactor's state from a ``state`` event (ValueError, TypeError or
    KeyError when it is not in that form)."""
    st = ctx.compactor.state
    st.last_summary = str(data.get("last_summary", ""))
    st.last_anchors = tuple(_anchor(a) for a in _listed(data.get("last_anchors", []), "anchors"))
    st.compaction_text = str(data.get("compaction_text", ""))
    boundary_uuid = data.get("boundary_uuid")
    st.boundary_uuid = boundary_uuid if isinstance(boundary_uuid, str) else None
    st.compactions = _int(data.get("compactions", 0), "compactions")
    st.last_artifacts = tuple(str(a) for a in _listed(data.get("last_artifacts", []), "artifacts"))
    written = data.get("written")
    if isinstance(written, Mapping):
        ctx.compactor.written.restore(ctx.view, written)
    ctx.bind_calibration(Calibration.from_dict(_object(data.get("calibration", {}), "calibration")))
    ctx.set_window(LearnedWindow.from_dict(data.get("learned_window")))
    policies = _object(data.get("offload_policies", {}), "offload_policies")
    if not all(isinstance(p, str) for p in policies.values()):
        raise ConfigError("offload_policies must map keys to policy names")
    reapply_offloads(ctx, {k: str(p) for k, p in policies.items()})
    boundary = _int(data.get("boundary", ctx.view.prefix_len), "boundary")
    if st.boundary_uuid is not None and st.boundary_uuid in ctx.view.uuids:
        boundary = ctx.view.uuids[st.boundary_uuid]
    if boundary > ctx.view.prefix_len and st.compaction_text:
        uuid = data.get("compaction_uuid")
        msg = Message(
            role="user",
            content=st.compaction_text,
            uuid=uuid if isinstance(uuid, str) and uuid else f"cf-compaction-{st.compactions}",
            metadata={"cf_kind": "compaction"},
        )
        ctx.view.set_boundary(min(boundary, len(ctx.view)), msg)


def _listed(value: JSON, what: str) -> list[JSON]:
    if not isinstance(value, list):
        raise TypeError(f"{what} must be a list, not {type(value).__name__}")
    return value


def _object(value: JSON, what: str) -> JSONObject:
    if not isinstance(value, dict):
        raise ConfigError(f"{what} must be an object, not {type(value).__name__}")
    return value


def _int(value: JSON, what: str) -> int:
    if not isinstance(value, int | float | str):
        raise TypeError(f"{what} must be a number, not {type(value).__name__}")
    return int(value)


def _anchor(value: JSON) -> Anchor:
    if not isinstance(value, dict):
        raise TypeError(f"an anchor must be an object, not {type(value).__name__}")
    return Anchor(type=AnchorType(value["type"]), content=str(value["content"]))


def reapply_offloads(ctx: SessionContext, policies: Mapping[str, str]) -> None:
    entries = ctx.offload_entries()
    view = ctx.view
    for key, entry in entries.items():
        idx = view.result_index(key)
        if idx is None and key.startswith(("msg-", "args-")):
            idx = view.uuids.get(key.split("-", 1)[1])
        if idx is None or not _entry_of(view, idx, entry):
            continue
        policy = policies.get(key, entry.policy)
        if view.is_loaded(idx):
            ctx.compactor.reapply(idx, entry, policy)
            continue
        # before the boundary of a lazily reopened history: applied when it is loaded
        ctx.deferred.append((idx, entry, policy))
        if deferred_policy(ctx, entry, policy):
            ctx.compactor.state.offload_policies[entry.tool_call_id] = policy


def _entry_of(view: HistoryView, idx: int, entry: OffloadEntry) -> bool:
    """Whether ``entry`` was written for the message at ``idx``: a client's rewrite may have
    retracted the message it was written for and sent another under the same call id."""
    own = view.uuids.get(entry.message_uuid) if entry.message_uuid else None
    return own is None or own == idx


def reapply_deferred(ctx: SessionContext) -> None:
    deferred, ctx.deferred = ctx.deferred, []
    for idx, entry, policy in deferred:
        ctx.compactor.reapply(idx, entry, policy)


def state_data(ctx: SessionContext) -> JSONObject:
    st: CompactorState = ctx.compactor.state
    comp = ctx.view.compaction
    return {
        "boundary": ctx.view.boundary,
        "boundary_uuid": st.boundary_uuid,
        "compaction_text": st.compaction_text,
        "compaction_uuid": comp.uuid if comp is not None else None,
        "last_summary": st.last_summary,
        "last_anchors": [{"type": a.type.value, "content": a.content} for a in st.last_anchors],
        "compactions": st.compactions,
        "last_artifacts": list(st.last_artifacts),
        "written": ctx.compactor.written.snapshot(ctx.view),
        "offload_policies": dict(changed_policies(ctx)),
        "calibration": ctx.calibration.to_dict(),
        "learned_window": ctx.learned_window.to_dict() if ctx.learned_window else None,
    }


def save_state(ctx: SessionContext) -> None:
    """A ``state`` event with the compactor's state (in the current unit), and the
    calibration."""
    ctx.session.emit("state", state_data(ctx))
    ctx.save_calibration()


def changed_policies(ctx: SessionContext) -> dict[str, str]:
    """The offload policies that differ from the one stored with their entry (reopening
    falls back to the entry's): the state stays small however many outputs were
    offloaded."""
    entries = ctx.offload_entries()
    return {
        key: policy
        for key, policy in ctx.compactor.state.offload_policies.items()
        if (entry := entries.get(key)) is None or entry.policy != policy
    }


__all__ = [
    "apply_state",
    "changed_policies",
    "deferred_policy",
    "load",
    "load_all",
    "load_lazily",
    "load_view_state",
    "reapply_deferred",
    "reapply_offloads",
    "save_state",
    "state_data",
]
