"""Queries of the SQLite backend's search index: FTS5 ``bm25()``, or a LIKE scan ranked by the
shared BM25 when the database was made without FTS5."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .base import JSON, SearchHit, prefix_end
from .text import BODY_WEIGHT, HINT_WEIGHT, bm25_scores


class JsonMeta(Mapping[str, JSON]):
    """A hit's meta, parsed when first read (a search may fetch many it never looks at)."""

    __slots__ = ("_data", "_text")

    def __init__(self, text: str) -> None:
        self._text = text
        self._data: dict[str, JSON] | None = None

    def _get(self) -> dict[str, JSON]:
        if self._data is None:
            data = json.loads(self._text)
            self._data = data if isinstance(data, dict) else {}
        return self._data

    def __getitem__(self, key: str) -> JSON:
        return self._get()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())

    def __repr__(self) -> str:
        return repr(self._get())


def fts_search(
    con: sqlite3.Connection,
    table: str,
    terms: list[str],
    session_tag: str | None,
    where: str,
    args: list[object],
    limit: int,
    *,
    narrowed: bool = False,
) -> list[SearchHit]:
    """Any of ``terms`` (quoted: query syntax is inert), narrowed to one session's tag token.

    ``narrowed``: every row the MATCH finds passes ``where`` (the table is the namespace's and
    no scope is asked for): the best rows are then ranked in the FTS table alone and joined
    to their documents afterwards, which spares the join (and the metadata) for every other
    match. The order is the same: ``score`` descending, then ``doc_id``."""
    match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
    if session_tag is not None:
        match = f'({match}) AND tags:"{session_tag}"'
    if narrowed:
        hits = _ranked_first(con, table, match, where, args, limit)
        if hits is not None:
            return hits
    rows = con.execute(
        f"SELECT d.doc_id, d.session_id, d.meta, "
        f"-bm25({table}, {BODY_WEIGHT}, {HINT_WEIGHT}, 0.0) AS s FROM {table} "
        f"JOIN search_docs d ON d.id={table}.rowid WHERE {table} MATCH ? "
        f"AND {where} ORDER BY s DESC, d.doc_id LIMIT ?",
        [match, *args, limit],
    ).fetchall()
    return [
        SearchHit(doc_id=r[0], session_id=r[1], score=float(r[3]), meta=JsonMeta(r[2]))
        for r in rows
    ]


def _ranked_first(
    con: sqlite3.Connection, table: str, match: str, where: str, args: list[object], limit: int
) -> list[SearchHit] | None:
    """The best ``limit`` rows by score in the FTS table, every row tied with the last one
    included, then their documents; None when that cannot be told apart from the full query
    (more ties than fetched, or a row the ``where`` would drop)."""
    fetch = 2 * limit + 16
    ranked = con.execute(
        f"SELECT rowid, -bm25({table}, {BODY_WEIGHT}, {HINT_WEIGHT}, 0.0) AS s FROM {table} "
        f"WHERE {table} MATCH ? ORDER BY s DESC LIMIT ?",
        [match, fetch],
    ).fetchall()
    if len(ranked) > limit:
        cut = ranked[limit - 1][1]
        if len(ranked) == fetch and ranked[-1][1] >= cut:
            return None
        ranked = [r for r in ranked if r[1] >= cut]
    score = dict(ranked)
    docs: list[tuple[Any, ...]] = []
    ids = list(score)
    for i in range(0, len(ids), 500):
        chunk = ids[i : i + 500]
        docs += con.execute(
            f"SELECT d.id, d.doc_id, d.session_id, d.meta FROM search_docs d "
            f"WHERE d.id IN ({','.join('?' * len(chunk))}) AND {where}",
            [*chunk, *args],
        ).fetchall()
    if len(docs) != len(ids):
        return None
    docs.sort(key=lambda r: (-score[r[0]], r[1]))
    return [
        SearchHit(doc_id=r[1], session_id=r[2], score=float(score[r[0]]), meta=JsonMeta(r[3]))
        for r in docs[:limit]
    ]


def scan_search(
    con: sqlite3.Connection, terms: list[str], where: str, args: list[object], limit: int
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


#: Arms of one compound SELECT (SQLite allows 500) and values of one IN list.
_ARMS = 200
_CHUNK = 500


def key_lookup(
    con: sqlite3.Connection,
    namespace: str,
    session_id: str,
    keys: Sequence[str],
    prefixes: Sequence[str],
) -> list[tuple[str, str]]:
    """Exact keys (IN lists) and prefixes (key ranges of the primary key), one compound
    SELECT per batch of arms."""
    base = "SELECT key, doc_id FROM search_keys WHERE session_id=? AND namespace=? AND "
    arms: list[tuple[str, list[Any]]] = []
    wanted = sorted(set(keys))
    for i in range(0, len(wanted), _CHUNK):
        chunk = wanted[i : i + _CHUNK]
        arms.append((f"key IN ({','.join('?' * len(chunk))})", chunk))
    for prefix in sorted(set(prefixes)):
        end = prefix_end(prefix)
        arms.append(("key>=? AND key<?", [prefix, end]) if end else ("key>=?", [prefix]))
    found: set[tuple[str, str]] = set()
    for i in range(0, len(arms), _ARMS):
        sql = " UNION ALL ".join(base + cond for cond, _ in arms[i : i + _ARMS])
        args: list[Any] = []
        for _, values in arms[i : i + _ARMS]:
            args += [session_id, namespace, *values]
        found.update(con.execute(sql, args).fetchall())
    return sorted(found)


def doc_metas(
    con: sqlite3.Connection, namespace: str, doc_ids: Sequence[str]
) -> dict[str, dict[str, JSON]]:
    """The meta of documents by id (ValueError: a damaged one)."""
    wanted = list(dict.fromkeys(doc_ids))
    out: dict[str, dict[str, JSON]] = {}
    for i in range(0, len(wanted), _CHUNK):
        chunk = wanted[i : i + _CHUNK]
        rows = con.execute(
            f"SELECT doc_id, meta FROM search_docs WHERE namespace=? "
            f"AND doc_id IN ({','.join('?' * len(chunk))})",
            [namespace, *chunk],
        ).fetchall()
        for doc_id, text in rows:
            value = json.loads(text)
            out[doc_id] = value if isinstance(value, dict) else {}
    return out


__all__ = ["JsonMeta", "doc_metas", "fts_search", "key_lookup", "scan_search"]
