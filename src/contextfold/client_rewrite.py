"""A caller's own rewrite of its conversation (see :meth:`ContextManager.rewrite`).

Clients that own their prompt rewrite it every turn: they summarize old turns, move or refresh
a block of file contents, swap reminders. The history stays append-only: the messages the
caller took out are *retracted* (kept in the history, recoverable and searchable, left out of
every view), and a ``rewrite`` event records which, at which message count, and why; reopening
applies the events in order (see :mod:`contextfold.reopen`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .errors import ConfigError
from .messages import Message
from .responses import parse_inputs

if TYPE_CHECKING:
    from .manager import ContextManager

#: the event kind of a rewrite: {"at": message count, "retract": [positions], "note": {...}}
REWRITE = "rewrite"


def rewrite(
    cm: ContextManager,
    retract: Sequence[int],
    messages: Iterable[Mapping[str, Any] | Message],
    note: Mapping[str, Any],
) -> list[Message]:
    if not isinstance(note, Mapping):
        raise ConfigError("note must be a JSON object (a mapping)")
    with cm._lock:
        view = cm.view
        start = len(view)
        positions = view.check_retract(list(retract))
        parsed = parse_inputs(messages, start, cm._uuid_for)
        if not positions:
            if not parsed:
                return []
            return cm.add_many(parsed)
        added: list[Message] = []
        try:
            with cm._unit():  # one unit: the add below joins it
                cm.session.emit(REWRITE, {"at": start, "retract": positions, "note": dict(note)})
                view.retract(positions)
                if parsed:  # validated after the retraction (it frees call ids)
                    added = cm.add_many(parsed)
        except BaseException:
            # the view was changed before the error: back to what is stored
            cm._reload_after_failure()
            raise
        return added


def stored_retracts(events: Iterable[Any]) -> dict[int, list[int]]:
    """The stored rewrite events as message count -> retracted positions (in order)."""
    out: dict[int, list[int]] = {}
    for event in events:
        data = event.data
        at, positions = data.get("at"), data.get("retract")
        if isinstance(at, int) and isinstance(positions, list):
            out.setdefault(at, []).extend(p for p in positions if isinstance(p, int))
    return out


__all__ = ["REWRITE", "rewrite", "stored_retracts"]
