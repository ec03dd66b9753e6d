"""Search on the PostgreSQL store: FTS5's BM25, computed from the GIN-indexed tsvectors.

Three statements in one read-only transaction: the namespace's statistics (document count,
total length, document frequency of each query term, counted by the GIN index with the
namespace's tag; SQLite keeps one FTS5 index per namespace, hence per-namespace statistics), the
candidates
with the weighted frequency of every query term (``ts_rank_cd`` with :data:`TF_WEIGHTS` and a
one-lexeme query is exactly half the weighted count, in C), then the metadata of the winners.
Scores are computed here with the formula of :func:`contextfold.storage.text.bm25_scores`, so
a query ranks the same documents the same way as on SQLite.

One bound keeps a query over a big index fast: a term found in more than 5% of the documents
(and in more than 200) is common; when the query also has rarer terms, only documents containing
one of those are candidates (the common terms still add to their scores), as the embedded
evidence search does. A document matching only common terms could then be missing from the
results where SQLite would rank it low; when fewer than ``limit`` documents contain a rare term,
or every term is common, every match is scored.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from ..jsontypes import JSON, as_list, to_int
from .base import SearchHit, prefix_end
from .pg_schema import FOLD_DELTAS, TF_WEIGHTS, any_query, search_terms, tag, term_query
from .text import K1, B

if TYPE_CHECKING:
    from .pg_write import Conn

#: A term in more than this share of the namespace's documents (and more than COMMON_MIN of
#: them) does not by itself make a document a candidate when the query has rarer terms.
COMMON_SHARE = 0.05
COMMON_MIN = 200

_STATS = """
SELECT (SELECT coalesce(sum(docs), 0) FROM {s}.search_deltas WHERE namespace = %s),
       (SELECT coalesce(sum(tokens), 0) FROM {s}.search_deltas WHERE namespace = %s),
       (SELECT count(*) FROM {s}.search_deltas WHERE namespace = %s),
       ARRAY(SELECT (SELECT count(*) FROM {s}.search_docs d WHERE d.tsv @@ u.q)
             FROM unnest(%s::tsquery[]) WITH ORDINALITY AS u(q, i) ORDER BY u.i),
       -- for the candidates query that follows in this transaction: the GIN index finds
       -- them (a scan would decode every row's tsvector)
       set_config('enable_seqscan', 'off', true)
"""


def search(
    conn: Conn,
    s: str,
    namespace: str,
    query: str,
    *,
    scopes: Sequence[str] | None,
    session_id: str | None,
    limit: int,
) -> list[SearchHit]:
    """The best ``limit`` documents; folds the statistics' delta rows when they pile up."""
    hits, deltas = _search(
        conn, s, namespace, query, scopes=scopes, session_id=session_id, limit=limit
    )
    if deltas > FOLD_DELTAS:
        # one statement: the rows it sums are the rows it deletes (a concurrent fold finds
        # them gone and adds a zero row); rows committed meanwhile stay for the next fold
        conn.execute(
            f"WITH gone AS (DELETE FROM {s}.search_deltas WHERE namespace = %s "
            f"RETURNING docs, tokens) INSERT INTO {s}.search_deltas (namespace, docs, tokens) "
            "SELECT %s, coalesce(sum(docs), 0), coalesce(sum(tokens), 0) FROM gone",
            (namespace, namespace),
        )
    return hits


def _search(
    conn: Conn,
    s: str,
    namespace: str,
    query: str,
    *,
    scopes: Sequence[str] | None,
    session_id: str | None,
    limit: int,
) -> tuple[list[SearchHit], int]:
    terms = search_terms(query)
    if not terms or limit <= 0 or (scopes is not None and not scopes):
        return [], 0
    with conn.transaction():
        ns_tag = tag("n", namespace)
        # a term's documents in this namespace, counted by the GIN index alone
        per_term = [f"{term_query(t)} & {term_query(ns_tag)}" for t in terms]
        row = conn.execute(
            _STATS.replace("{s}", s), (namespace, namespace, namespace, per_term)
        ).fetchone()
        assert row is not None
        total, tokens, deltas = to_int(row[0]), to_int(row[1]), to_int(row[2])
        dfs = [to_int(x) for x in as_list(row[3])]
        present = [(t, df) for t, df in zip(terms, dfs) if df > 0]
        if not present:
            return [], deltas
        common = max(COMMON_MIN, COMMON_SHARE * total)
        rare = [t for t, df in present if df <= common]
        # the GIN index finds the candidates, tags included (namespace, session, scopes);
        # the columns are checked again on them only (kept out of the planner's reach: a
        # scan of the session's rows would decode every tsvector)
        narrow = [term_query(ns_tag)]
        where = "tsv @@ %s::tsquery AND (namespace || '') = %s"
        params: list[Any] = [namespace]
        if scopes is not None:
            narrow.append(any_query([tag("c", f"{namespace}/{c}") for c in scopes]))
            where += " AND (scope || '') = ANY(%s)"
            params.append(list(scopes))
        if session_id is not None:
            narrow.append(term_query(tag("s", f"{namespace}/{session_id}")))
            where += " AND (session_id || '') = %s"
            params.append(session_id)

        def match(words: list[str]) -> str:
            return " & ".join([f"({any_query(words)})", *(f"({n})" for n in narrow)])

        tfs = ", ".join(f"ts_rank_cd('{TF_WEIGHTS}', tsv, %s::tsquery, 0)" for _ in present)
        # the inner query decodes each candidate's tsvector once (the concatenation makes a
        # plain copy); the frequencies are then read from that copy, not re-fetched per term
        sql = (
            f"SELECT doc_id, doc_len, ARRAY[{tfs}] FROM (SELECT doc_id, doc_len, "
            f"tsv || ''::tsvector AS tsv FROM {s}.search_docs WHERE {where} OFFSET 0) AS c"
        )
        tqs = [term_query(t) for t, _ in present]
        rows: list[tuple[object, ...]] = []
        if rare and len(rare) < len(present):
            rows = conn.execute(sql, [*tqs, match(rare), *params]).fetchall()
        if len(rows) < limit:  # no rare term, or too few documents with one: score them all
            rows = conn.execute(sql, [*tqs, match([t for t, _ in present]), *params]).fetchall()
        # each row: the doc id, its length and its term frequencies (the columns of ``sql``)
        scored_rows = cast("list[tuple[str, int, list[float]]]", rows)
        n = max(total, 1)
        avg = max(tokens / n, 1.0) if total else 1.0
        idfs = [max(math.log((n - df + 0.5) / (df + 0.5)), 1e-6) for _, df in present]
        scored: list[tuple[float, str]] = []
        for doc_id, length, halves in scored_rows:
            norm = K1 * (1 - B + B * length / avg)
            score = 0.0
            for idf, half in zip(idfs, halves):
                if half:
                    tf = 2.0 * half
                    score += idf * tf * (K1 + 1) / (tf + norm)
            if score > 0:
                scored.append((score, str(doc_id)))
        best = heapq.nsmallest(limit, scored, key=lambda x: (-x[0], x[1]))
        if not best:
            return [], deltas
        meta = {
            str(r[0]): r
            for r in conn.execute(
                f"SELECT doc_id, session_id, meta FROM {s}.search_docs "
                "WHERE namespace = %s AND doc_id = ANY(%s)",
                (namespace, [d for _, d in best]),
            )
        }
    hits = [
        SearchHit(
            doc_id=d,
            session_id=str(meta[d][1]),
            score=score,
            meta=cast("Mapping[str, JSON]", meta[d][2]),  # (a jsonb object, decoded)
        )
        for score, d in best
        if d in meta
    ]
    return hits, deltas


def lookup(
    conn: Conn,
    s: str,
    namespace: str,
    session_id: str,
    keys: Sequence[str],
    prefixes: Sequence[str],
) -> list[tuple[str, str]]:
    """Exact keys and key prefixes of one session in one statement: each prefix is a range
    of the primary key (keys are in the "C" collation: code point order)."""
    wanted = sorted(set(keys))
    ranges = [(p, prefix_end(p)) for p in sorted(set(prefixes))]
    if not wanted and not ranges:
        return []
    select = (
        f"SELECT key, doc_id FROM {s}.search_keys WHERE session_id = %(sid)s "
        "AND namespace = %(ns)s AND "
    )
    rows = conn.execute(
        f"{select}key = ANY(%(keys)s::text[]) UNION ALL SELECT k.key, k.doc_id "
        "FROM unnest(%(lo)s::text[], %(hi)s::text[]) AS r(lo, hi) CROSS JOIN LATERAL "
        f'({select}key >= r.lo COLLATE "C" AND key < r.hi COLLATE "C") AS k '
        f"UNION ALL {select}key >= ANY(%(open)s::text[])",
        {
            "sid": session_id,
            "ns": namespace,
            "keys": wanted,
            "lo": [lo for lo, hi in ranges if hi is not None],
            "hi": [hi for lo, hi in ranges if hi is not None],
            "open": [lo for lo, hi in ranges if hi is None],
        },
    ).fetchall()
    return sorted({(str(k), str(d)) for k, d in rows})


__all__ = ["COMMON_MIN", "COMMON_SHARE", "lookup", "search"]
