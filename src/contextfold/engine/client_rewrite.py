"""A caller's own rewrite of its conversation (see :meth:`ContextManager.rewrite`).

Clients that own their prompt rewrite it every turn: they summarize old turns, move or refresh
a block of file contents, swap reminders. The history stays append-only: the messages the
caller took out are *retracted* (kept in the history, recoverable and searchable, left out of
every view), and a ``rewrite`` event records which, at which message count, and why; reopening
applies the events in order (see :mod:`contextfold.engine.reopen`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ..core.messages import Message
from ..errors import ConfigError
from ..jsontypes import JSONLike
from ..storage.base import Event
from . import ingest
from .context import SessionContext

#: the event kind of a rewrite: {"at": message count, "retract": [positions], "note": {...}}
REWRITE = "rewrite"


def rewrite(
    ctx: SessionContext,
    retract: Sequence[int],
    messages: Iterable[ingest.MessageInput],
    note: Mapping[str, JSONLike],
) -> list[Message]:
    """Retract the history messages at ``retract`` from every view and append ``messages``,
    all or nothing, in one unit of work with a ``rewrite`` event saying which and why."""
    if not isinstance(note, Mapping):
        raise ConfigError("note must be a JSON object (a mapping)")
    units = ctx.units
    with units.lock:
        view = ctx.view
        start = len(view)
        positions = view.check_retract(list(retract))
        parsed = ingest.parse(ctx, messages)
        if not positions:  # a plain append: checked before its unit, like add_many
            if parsed:
                tokens = ingest.check(ctx, parsed)
                with units.unit():
                    ingest.append(ctx, parsed, tokens)
            return parsed
        try:
            with units.unit():  # one unit: the rewrite event, the retraction and the messages
                ctx.session.emit(REWRITE, {"at": start, "retract": positions, "note": dict(note)})
                view.retract(positions)
                if parsed:  # validated after the retraction (it frees call ids)
                    ingest.append(ctx, parsed, ingest.check(ctx, parsed))
        except BaseException:
            # the view may have changed before the error: back to what is stored
            units.reload_after_failure()
            raise
        return parsed


def stored_retracts(events: Iterable[Event]) -> dict[int, list[int]]:
    """The stored rewrite events as message count -> retracted positions (in order)."""
    out: dict[int, list[int]] = {}
    for event in events:
        data = event.data
        at, positions = data.get("at"), data.get("retract")
        if isinstance(at, int) and isinstance(positions, list):
            out.setdefault(at, []).extend(p for p in positions if isinstance(p, int))
    return out


__all__ = ["REWRITE", "rewrite", "stored_retracts"]
