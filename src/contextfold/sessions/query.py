"""Searching the session index: ranked FTS5 queries and the LIKE fallback without FTS5.

Both take an open connection of :class:`~contextfold.sessions.index.SessionIndex` (which
registers ``cf_unzip``) and return :class:`SearchHit` rows, best first.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .text import fts_query, like_terms, make_snippet, scope_key, unzip_text


@dataclass(frozen=True, kw_only=True, slots=True)
class SearchHit:
    session_id: str
    agent_id: str
    seq: int
    role: str
    ts: str
    #: Matching text with the hits in [brackets] and … where text was cut.
    snippet: str
    #: Higher is better (negated bm25 with FTS5; a match count in the fallback).
    score: float


def _hit(row: Sequence[Any], body: str, terms: Sequence[str], score: float) -> SearchHit:
    """A hit from ``(session_id, agent_id, seq, role, ts, ...)``."""
    return SearchHit(
        session_id=row[0],
        agent_id=row[1],
        seq=int(row[2]),
        role=row[3] or "",
        ts=row[4] or "",
        snippet=make_snippet(body, terms),
        score=score,
    )


def _scope(agent_id: str | None, session_id: str | None) -> tuple[str, list[Any]]:
    """SQL conditions (`` AND ...``) and parameters keeping one agent's / session's rows."""
    where = ""
    params: list[Any] = []
    if agent_id is not None:
        where += " AND agent_id = ?"
        params.append(agent_id)
    if session_id is not None:
        where += " AND session_id = ?"
        params.append(session_id)
    return where, params


def search_fts(
    con: sqlite3.Connection,
    query: str,
    op: str,
    agent_id: str | None,
    limit: int,
    session_id: str | None,
    warn: Callable[[str], None],
) -> list[SearchHit]:
    """FTS5 hits ranked by bm25; ``warn`` is told when the query fails (no results then)."""
    match = fts_query(query, op=op)
    if not match:
        return []
    expr = f"body : ({match})"
    try:
        if agent_id is not None or session_id is not None:
            # Let FTS5 itself keep only this agent's / session's rows (hashed id tokens):
            # bm25 ranks a fraction of the matches and no join runs per match. Hash
            # collisions are caught by the exact check on the winners below.
            keys = []
            if agent_id is not None:
                keys.append(f'akey : "{scope_key("a", agent_id)}"')
            if session_id is not None:
                keys.append(f'skey : "{scope_key("s", session_id)}"')
            ranked = con.execute(
                "SELECT rowid, bm25(chunks_fts, 1.0, 0.0, 0.0) AS score FROM chunks_fts "
                "WHERE chunks_fts MATCH ? ORDER BY score LIMIT ?",
                (" AND ".join([*keys, expr]), limit),
            ).fetchall()
        else:
            ranked = con.execute(
                "SELECT c.id, bm25(chunks_fts, 1.0, 0.0, 0.0) AS score FROM chunks_fts "
                "JOIN chunks c ON c.id = chunks_fts.rowid "
                "WHERE chunks_fts MATCH ? ORDER BY score LIMIT ?",
                [expr, limit],
            ).fetchall()
        if not ranked:
            return []
        marks = ",".join(str(int(r[0])) for r in ranked)
        meta = {
            int(r[0]): r
            for r in con.execute(
                "SELECT id, session_id, agent_id, seq, role, ts, zbody FROM chunks "
                f"WHERE id IN ({marks})"
            )
        }
    except sqlite3.OperationalError as exc:
        warn(f"search {match!r} failed in FTS5 ({exc}); no results")
        return []
    terms = re.findall(r"\w+", query)
    hits = []
    for rowid, score in ranked:
        r = meta.get(int(rowid))
        if r is None or (agent_id is not None and r[2] != agent_id):
            continue
        if session_id is not None and r[1] != session_id:
            continue
        hits.append(_hit(r[1:], unzip_text(r[6]), terms, -float(score)))
    return hits


def search_like(
    con: sqlite3.Connection,
    query: str,
    agent_id: str | None,
    limit: int,
    session_id: str | None,
) -> list[SearchHit]:
    """Hits of a LIKE scan (no FTS5), ranked by how many query words they contain."""
    terms = like_terms(query)[:8]
    if not terms:
        return []
    hit = "(instr(lower(cf_unzip(zbody)), lower(?)) > 0)"
    scores = " + ".join(hit for _ in terms)
    scope, scope_params = _scope(agent_id, session_id)
    sql = (
        f"SELECT session_id, agent_id, seq, role, ts, cf_unzip(zbody), ({scores}) AS score "
        f"FROM chunks WHERE ({' OR '.join(hit for _ in terms)}){scope} "
        "ORDER BY score DESC, id DESC LIMIT ?"
    )
    rows = con.execute(sql, [*terms, *terms, *scope_params, limit]).fetchall()
    return [_hit(r, str(r[5]), terms, float(r[6])) for r in rows]


__all__ = ["SearchHit", "search_fts", "search_like"]
