"""Queries of the SQLite backend's search index: FTS5 ``bm25()``, or a LIKE scan ranked by the
shared BM25 when the database was made without FTS5."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from typing import Any

from .base import SearchHit
from .text import BODY_WEIGHT, HINT_WEIGHT, bm25_scores


def fts_search(
    con: sqlite3.Connection,
    table: str,
    terms: list[str],
    session_tag: str | None,
    where: str,
    args: list[Any],
    limit: int,
) -> list[SearchHit]:
    """Any of ``terms`` (quoted: query syntax is inert), narrowed to one session's tag token."""
    match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
    if session_tag is not None:
        match = f'({match}) AND tags:"{session_tag}"'
    rows = con.execute(
        f"SELECT d.doc_id, d.session_id, d.meta, "
        f"-bm25({table}, {BODY_WEIGHT}, {HINT_WEIGHT}, 0.0) AS s FROM {table} "
        f"JOIN search_docs d ON d.id={table}.rowid WHERE {table} MATCH ? "
        f"AND {where} ORDER BY s DESC, d.doc_id LIMIT ?",
        [match, *args, limit],
    ).fetchall()
    return [
        SearchHit(doc_id=r[0], session_id=r[1], score=float(r[3]), meta=json.loads(r[2]))
        for r in rows
    ]


def scan_search(
    con: sqlite3.Connection, terms: list[str], where: str, args: list[Any], limit: int
) -> list[SearchHit]:
    """Without FTS5: LIKE finds candidates, the shared BM25 ranks them."""
    like = " OR ".join("(' ' || d.body || ' ' || d.hints || ' ') LIKE ?" for _ in terms)
    rows = con.execute(
        f"SELECT d.doc_id, d.session_id, d.meta, d.body, d.hints FROM search_docs d "
        f"WHERE {where} AND ({like})",
        [*args, *(f"% {t} %" for t in terms)],
    ).fetchall()
    total, length = con.execute(
        "SELECT count(*), coalesce(sum(length(body) + length(hints)), 0) FROM search_docs "
        "WHERE namespace=?",
        (args[0],),
    ).fetchone()
    docs: dict[int, tuple[Counter[str], Counter[str], int]] = {}
    df: Counter[str] = Counter()
    for i, r in enumerate(rows):
        body, hints = Counter(r[3].split()), Counter(r[4].split())
        docs[i] = (body, hints, sum(body.values()) + sum(hints.values()))
        df.update(set(terms) & (body.keys() | hints.keys()))
    avg_tokens = (length / 6.0 / total) if total else 1.0  # about 6 characters a token
    scores = bm25_scores(terms, docs, total_docs=total, avg_len=avg_tokens, doc_freq=df)
    ranked = sorted(scores.items(), key=lambda kv: (-kv[1], rows[kv[0]][0]))[:limit]
    return [
        SearchHit(doc_id=rows[i][0], session_id=rows[i][1], score=s, meta=json.loads(rows[i][2]))
        for i, s in ranked
    ]


__all__ = ["fts_search", "scan_search"]
