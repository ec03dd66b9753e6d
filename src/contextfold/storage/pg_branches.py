"""Branch sessions on PostgreSQL (see :mod:`.branches`): the chain of parents in one round
trip, a branch's creation and what a deleted parent leaves to its branches."""

from __future__ import annotations

from collections.abc import Sequence

import psycopg

from ..jsontypes import to_int
from .base import ConcurrentWriteError
from .branches import MAX_DEPTH, Chain, relink, segments
from .util import utc_now

Conn = psycopg.Connection[tuple[object, ...]]


def chain_sql(s: str) -> str:
    """The session first, then each parent it shares events with: ``(session_id, parent_id,
    fork_at)`` rows (none when the session does not exist)."""
    return (
        f"WITH RECURSIVE c(sid, parent, fork_at, depth) AS (SELECT session_id, parent_id, "
        f"fork_at, 0 FROM {s}.sessions WHERE session_id = %s UNION ALL SELECT p.session_id, "
        f"p.parent_id, p.fork_at, c.depth + 1 FROM {s}.sessions p JOIN c ON p.session_id = "
        f"c.parent WHERE c.depth < {MAX_DEPTH}) SELECT sid, parent, fork_at FROM c ORDER BY depth"
    )


def to_chain(session_id: str, rows: Sequence[Sequence[object]]) -> Chain:
    if not rows:
        return [(session_id, 0)]
    return [(str(r[0]), to_int(r[2]) if r[1] is not None else 0) for r in rows]


def chain(conn: Conn, s: str, session_id: str) -> Chain:
    return to_chain(session_id, conn.execute(chain_sql(s), (session_id,)).fetchall())


def create(
    conn: Conn, s: str, session_id: str, parent_id: str, at: int, agent_id: str, title: str
) -> None:
    """Insert the branch's row (its prefix counted from the parent's events; the arguments
    checked by the transaction)."""
    messages = 0
    for holder, lo, hi in segments(chain(conn, s, parent_id), 0, at):
        row = conn.execute(
            f"SELECT count(*) FROM {s}.events WHERE session_id = %s AND kind = 'message' "
            "AND seq >= %s AND seq < %s",
            (holder, lo, hi),
        ).fetchone()
        messages += to_int(row[0]) if row else 0
    now = utc_now()
    made = conn.execute(
        f"INSERT INTO {s}.sessions (session_id, agent_id, title, created_at, updated_at, head, "
        "messages, parent_id, fork_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
        "ON CONFLICT (session_id) DO NOTHING RETURNING 1",
        (session_id, agent_id, title, now, now, at, messages, parent_id, at),
    ).fetchone()
    if made is None:  # another writer created it since it was looked for
        raise ConcurrentWriteError(session_id, 0, None)


def keep_branches(conn: Conn, s: str, session_id: str) -> None:
    """Before ``session_id`` is deleted (its row locked): its branches take the events they
    share with it and are re-linked to its own parent."""
    row = conn.execute(
        f"SELECT parent_id, fork_at FROM {s}.sessions WHERE session_id = %s", (session_id,)
    ).fetchone()
    if row is None:
        return
    children = conn.execute(
        f"SELECT session_id, fork_at FROM {s}.sessions WHERE parent_id = %s FOR UPDATE",
        (session_id,),
    ).fetchall()
    for child, child_fork in children:
        parent_id = None if row[0] is None else str(row[0])
        parent, fork_at, lo, hi = relink(to_int(row[1]), parent_id, to_int(child_fork))
        conn.execute(
            f"INSERT INTO {s}.events (session_id, seq, kind, ts, data, head, detail) "
            f"SELECT %s, seq, kind, ts, data, head, detail FROM {s}.events "
            "WHERE session_id = %s AND seq >= %s AND seq < %s",
            (child, session_id, lo, hi),
        )
        conn.execute(
            f"UPDATE {s}.sessions SET parent_id = %s, fork_at = %s WHERE session_id = %s",
            (parent, fork_at, child),
        )


__all__ = ["chain", "chain_sql", "create", "keep_branches", "to_chain"]
