"""Rows of the PostgreSQL store's event log and sessions, as the Store protocol returns them:
sessions, events, and the query and decoding of event heads."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import cast

from ..errors import StorageError
from ..jsontypes import JSON, to_int
from .base import Event, EventHead, SessionInfo
from .pg_schema import BIG_HEAD, SMALL_HEAD

SESSION_COLS = (
    "session_id, agent_id, created_at, updated_at, title, head, messages, parent_id, fork_at"
)


def session_row(row: Sequence[object]) -> SessionInfo:
    return SessionInfo(
        session_id=str(row[0]),
        agent_id=str(row[1]),
        created_at=str(row[2]),
        updated_at=str(row[3]),
        title=str(row[4]),
        events=to_int(row[5]),
        messages=to_int(row[6]),
        parent_id=None if row[7] is None else str(row[7]),
        fork_at=to_int(row[8]),
    )


DECODER = json.JSONDecoder()


def event_row(row: Sequence[object], session_id: str | None = None) -> Event:
    """An event row, labelled with the session read (a branch reads its parent's rows)."""
    return Event(
        session_id=session_id if session_id is not None else str(row[0]),
        seq=to_int(row[1]),
        kind=str(row[2]),
        ts=str(row[3]),
        data=cast("Mapping[str, JSON]", row[4]),  # (a jsonb object, decoded)
    )


def heads_query(
    s: str,
    session_id: str,
    start: int,
    stop: int | None,
    kinds: Sequence[str] | None,
    details: bool,
) -> tuple[str, list[object]]:
    """The query of a session's event heads in ``[start, stop)`` (of ``kinds``), and its
    parameters. Without details the rows come in runs each ordered by seq (sort them)."""
    params: list[object] = [session_id, max(start, 0)]
    where = "session_id = %s AND seq >= %s"
    if stop is not None:
        where += " AND seq < %s"
        params.append(stop)
    if kinds is not None:
        where += " AND kind = ANY(%s)"
        params.append(list(kinds))
    # as text, decoded here without the whitespace checks of json.loads (the store wrote it)
    if details:  # the details are not in an index: the events' rows are read
        sql = f"SELECT seq, kind, head::text, detail::text FROM {s}.events WHERE {where}"
        return sql + " ORDER BY seq", params
    # each half is one partial index; the first covers the heads (index-only)
    select = f"SELECT seq, kind, head::text FROM {s}.events WHERE {where}"
    return f"{select} AND {SMALL_HEAD} UNION ALL {select} AND {BIG_HEAD}", params + params


def decode_heads(
    rows: Sequence[Sequence[object]], session_id: str, details: bool
) -> list[EventHead]:
    """The heads of rows read by :func:`heads_query`."""
    decode = DECODER.raw_decode
    texts = cast("Sequence[tuple[int, str, str | None, str | None]]", rows)  # (its columns)
    try:
        if not details:  # (three columns: no detail)
            return [
                EventHead(int(r[0]), str(r[1]), decode(r[2])[0] if r[2] is not None else None)
                for r in texts
            ]
        return [
            EventHead(
                int(r[0]),
                str(r[1]),
                decode(r[2])[0] if r[2] is not None else None,
                decode(r[3])[0] if r[3] is not None else None,
            )
            for r in texts
        ]
    except ValueError as exc:
        raise StorageError(f"session {session_id!r} has a damaged event head: {exc}") from exc


__all__ = ["DECODER", "SESSION_COLS", "decode_heads", "event_row", "heads_query", "session_row"]
