"""PostgreSQL side of the store: versioned migrations and the search-index encoding.

Migrations. Every table lives in one schema (``contextfold`` by default). ``schema_version``
records which migrations ran; :func:`migrate` applies the missing ones in one transaction under
a transaction-level advisory lock keyed by the schema name, so many workers opening the same
database for the first time at once apply each migration exactly once (the others wait, then
find nothing to do). A store whose database is newer than this release refuses to open.

Search encoding. Text is tokenized by :func:`contextfold.storage.text.tokenize` (the tokenizer
every backend shares: identifiers whole and split on ``_./:-`` and camelCase, CJK bigrams) and
written as a ``tsvector`` literal, so PostgreSQL stores exactly those tokens (no stemming, no
stop words of its own; the ``simple`` configuration's parser never runs). Positions carry no
meaning: a token seen ``n`` times gets positions ``1..n`` (capped at 256, PostgreSQL's limit),
so the term frequency survives; tokens of fields other than ``body`` carry weight ``A`` and
count double, as in the SQLite index. Three tag lexemes (:func:`doc_tags`) stand for the
document's namespace, session and scope, so the GIN index alone narrows a search (and counts a
term's documents) within a namespace, a session or some scopes.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

import psycopg

from ..errors import StorageError
from ..jsontypes import to_int
from .text import HINT_WEIGHT, clip, query_terms, tokenize

#: PostgreSQL keeps at most 256 positions per lexeme; lexemes are limited to 2 KB.
MAX_POSITIONS = 256
MAX_LEXEME_CHARS = 200
#: Query terms kept (the first ones win).
MAX_QUERY_TERMS = 64
#: Changed rows below which a table's planner statistics are left alone.
ANALYZE_MIN_ROWS = 1_000
#: Delta rows of the index statistics above which a search folds them into one.
FOLD_DELTAS = 1_000
#: ``ts_rank_cd`` with these weights ({D, C, B, A}) and a one-lexeme query returns half the
#: weighted term frequency: the sum over its positions of 0.5 (body) or 1.0 (hint fields).
TF_WEIGHTS = "{0.5,0.5,0.5,1.0}"


_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")

#: Heads up to this many bytes (as JSON text, with the entry's key: the session id and kind,
#: which the Store API does not bound) are in the covering index ``events_heads``.
HEAD_INDEX_MAX = 2000
_ENTRY = "octet_length(head::text) + octet_length(session_id) + octet_length(kind)"
SMALL_HEAD = f"(head IS NULL OR {_ENTRY} <= {HEAD_INDEX_MAX})"
BIG_HEAD = f"{_ENTRY} > {HEAD_INDEX_MAX}"

_MIGRATIONS: dict[int, Sequence[str]] = {
    1: (
        """CREATE TABLE {s}.sessions (
            session_id text PRIMARY KEY,
            agent_id text NOT NULL,
            title text NOT NULL DEFAULT '',
            created_at text NOT NULL,
            updated_at text NOT NULL,
            head bigint NOT NULL DEFAULT 0,
            messages bigint NOT NULL DEFAULT 0
        )""",
        "CREATE INDEX sessions_agent_updated ON {s}.sessions (agent_id, updated_at DESC)",
        "CREATE INDEX sessions_updated ON {s}.sessions (updated_at DESC)",
        # json, not jsonb: json keeps the text as written and accepts \\u0000 in strings
        """CREATE TABLE {s}.events (
            session_id text NOT NULL,
            seq bigint NOT NULL,
            kind text NOT NULL,
            ts text NOT NULL,
            data json NOT NULL,
            PRIMARY KEY (session_id, seq)
        )""",
        "CREATE INDEX events_kind ON {s}.events (session_id, kind, seq)",
        """CREATE TABLE {s}.documents (
            namespace text NOT NULL,
            key text NOT NULL,
            value json NOT NULL,
            updated_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (namespace, key)
        )""",
        """CREATE TABLE {s}.search_docs (
            namespace text NOT NULL,
            doc_id text NOT NULL,
            scope text NOT NULL,
            session_id text NOT NULL,
            meta json NOT NULL,
            doc_len integer NOT NULL,
            tsv tsvector NOT NULL,
            PRIMARY KEY (namespace, doc_id)
        )""",
        "CREATE INDEX search_docs_tsv ON {s}.search_docs USING gin (tsv)",
        # document count and total length of the index (BM25's N and average length) as
        # appended deltas, summed by readers and folded now and then: writers never wait
        """CREATE TABLE {s}.search_deltas (
            namespace text NOT NULL, docs bigint NOT NULL, tokens bigint NOT NULL
        )""",
        "CREATE INDEX search_deltas_namespace ON {s}.search_deltas (namespace)",
        "CREATE INDEX search_docs_session ON {s}.search_docs (namespace, session_id)",
        """CREATE TABLE {s}.blobs (
            sha256 text PRIMARY KEY,
            size bigint NOT NULL,
            data bytea NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now()
        )""",
    ),
    # each event may carry a small head (a message's position, uuid, role, call ids, tokens)
    # that reopening reads instead of every message; older events keep NULL
    2: ("ALTER TABLE {s}.events ADD COLUMN head json",),
    # exact lookup keys of search documents (and keys filed under any id of a session); the
    # "C" collation orders keys by code point, so a prefix is one range of the primary key
    3: (
        """CREATE TABLE {s}.search_keys (
            session_id text NOT NULL,
            namespace text NOT NULL,
            key text COLLATE "C" NOT NULL,
            doc_id text NOT NULL,
            PRIMARY KEY (session_id, namespace, key, doc_id)
        )""",
        "CREATE INDEX search_keys_doc ON {s}.search_keys (namespace, doc_id)",
    ),
    # message heads become compact arrays [pos, uuid, role, tokens, tool_call_id, call ids]
    # and what each call was about moves to its own column (read only for ordinal recall
    # questions): reopening decodes a fifth of the bytes. Heads of version 2 are converted here.
    4: (
        "ALTER TABLE {s}.events ADD COLUMN IF NOT EXISTS detail json",
        "UPDATE {s}.events SET detail = head->'calls', head = json_build_array(head->'pos', "
        "head->'uuid', head->'role', head->'tokens', head->'tool_call_id', "
        "(SELECT json_agg(c->'id') FROM json_array_elements(CASE WHEN "
        "json_typeof(head->'calls') = 'array' THEN head->'calls' END) c)) "
        "WHERE kind = 'message' AND head IS NOT NULL AND json_typeof(head) = 'object'",
        # the heads are read from an index alone (an index-only scan: the events' pages,
        # wide with their data, are not walked). A btree entry holds at most 2704 bytes: a
        # head longer than HEAD_INDEX_MAX (a message with very many calls) is kept out of it
        # and found through the second, small index instead (see PostgresStore.read_heads)
        "CREATE INDEX IF NOT EXISTS events_heads ON {s}.events (session_id, kind, seq) "
        f"INCLUDE (head) WHERE {SMALL_HEAD}",
        "CREATE INDEX IF NOT EXISTS events_big_heads ON {s}.events (session_id, kind, seq) "
        f"WHERE {BIG_HEAD}",
    ),
    # branches share their parent's events up to the fork point instead of copying them
    # (see storage/branches.py): the parent and the fork point, on the branch's row
    5: (
        "ALTER TABLE {s}.sessions ADD COLUMN IF NOT EXISTS parent_id text",
        "ALTER TABLE {s}.sessions ADD COLUMN IF NOT EXISTS fork_at bigint NOT NULL DEFAULT 0",
        "CREATE INDEX IF NOT EXISTS sessions_parent ON {s}.sessions (parent_id) "
        "WHERE parent_id IS NOT NULL",
    ),
    # the full-text index without its pending list: with ``fastupdate`` every new entry
    # waits in an unordered list (up to 4 MB, scanned by every search) that only a VACUUM
    # merges and frees, so a store that is not vacuumed keeps about three times the bytes of
    # the merged index; the entries waiting now are merged here. The tsvectors are compressed
    # with LZ4 where the server has it (from PostgreSQL 14; about 40% smaller than pglz
    # leaves them); a server without it keeps its default
    6: (
        "ALTER INDEX {s}.search_docs_tsv SET (fastupdate = off)",
        "SELECT gin_clean_pending_list('{s}.search_docs_tsv'::regclass)",
        "DO $$ BEGIN EXECUTE 'ALTER TABLE {s}.search_docs ALTER COLUMN tsv SET COMPRESSION lz4';"
        " EXCEPTION WHEN feature_not_supported OR syntax_error OR invalid_parameter_value"
        " THEN NULL; END $$",
    ),
}
#: The schema version this release writes and reads.
SCHEMA_VERSION = max(_MIGRATIONS)


def check_schema_name(schema: str) -> str:
    """``schema`` if it is a plain lowercase identifier (it is spliced into SQL)."""
    if not _SCHEMA_NAME.fullmatch(schema):
        raise StorageError(
            f"PostgreSQL schema name {schema!r} is not a plain identifier "
            "(lowercase letters, digits and underscores, at most 63 characters)"
        )
    return schema


def _current_version(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> int | None:
    """The schema's version, or None when the version table does not exist yet."""
    row = conn.execute("SELECT to_regclass(%s)", (f'"{schema}".schema_version',)).fetchone()
    if row is None or row[0] is None:
        return None
    got = conn.execute(f'SELECT max(version) FROM "{schema}".schema_version').fetchone()
    return to_int(got[0]) if got is not None and got[0] is not None else 0


def migrate(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> int:
    """Bring ``schema`` to :data:`SCHEMA_VERSION`; returns how many migrations ran.

    ``conn`` must be in autocommit mode (each migration batch is its own transaction).
    """
    version = _current_version(conn, schema)
    if version == SCHEMA_VERSION:  # the common case: one round trip, no lock
        return 0
    with conn.transaction():
        # one writer per schema; the others wait here, then see the work done
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"contextfold:{schema}",))
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        conn.execute(
            f'CREATE TABLE IF NOT EXISTS "{schema}".schema_version ('
            "version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        version = _current_version(conn, schema) or 0
        if version > SCHEMA_VERSION:
            raise StorageError(
                f"PostgreSQL schema {schema!r} is at version {version}, newer than this "
                f"release of contextfold understands ({SCHEMA_VERSION}); upgrade contextfold"
            )
        ran = 0
        for number in range(version + 1, SCHEMA_VERSION + 1):
            for statement in _MIGRATIONS[number]:
                conn.execute(statement.replace("{s}", f'"{schema}"'))
            conn.execute(f'INSERT INTO "{schema}".schema_version (version) VALUES (%s)', (number,))
            ran += 1
        return ran


def analyze_stale(
    conn: psycopg.Connection[tuple[object, ...]],
    schema: str,
    stop: Callable[[], bool] | None = None,
) -> list[str]:
    """ANALYZE the schema's tables whose planner statistics are missing or stale (a fifth of
    the rows changed since); returns their names. Autovacuum normally does this, but plans of
    the log and search queries depend on it, and some servers run without autovacuum.
    ``conn`` must be in autocommit mode (VACUUM cannot run in a transaction). ``stop`` is
    asked before each table: True ends the run there (the store is closing)."""
    rows = conn.execute(
        "SELECT relname, n_mod_since_analyze > greatest(%s, n_live_tup / 5), "
        "n_ins_since_vacuum > greatest(%s, n_live_tup / 5) FROM pg_stat_user_tables "
        "WHERE schemaname = %s ORDER BY relname",
        (ANALYZE_MIN_ROWS, ANALYZE_MIN_ROWS, schema),
    ).fetchall()
    names: list[str] = []
    for name, stale, unvacuumed in rows:
        if stop is not None and stop():
            break
        # VACUUM also marks pages all-visible: counting a term's documents through the GIN
        # index need not visit the rows (search_docs), and the message heads are read from
        # their index alone (events); the other tables only need statistics
        if name in ("search_docs", "events") and (stale or unvacuumed):
            conn.execute(f'VACUUM (ANALYZE) "{schema}"."{name}"')
        elif stale:
            conn.execute(f'ANALYZE "{schema}"."{name}"')
        else:
            continue
        names.append(str(name))
    return names


# ------------------------------------------------------------------------ search encoding


def _quote(lexeme: str) -> str:
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def tag(kind: str, value: str) -> str:
    """A lexeme standing for a namespace, a session or a scope. ``#`` never starts a token of
    the tokenizer, so no word of a text can match it."""
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:20]
    return f"#{kind}{digest}"


def doc_tags(namespace: str, session_id: str, scope: str) -> list[str]:
    """The tags stored with a document: its namespace, its session (within the namespace)
    and its scope (within the namespace). Searches narrow to them in the GIN index."""
    return [
        tag("n", namespace),
        tag("s", f"{namespace}/{session_id}"),
        tag("c", f"{namespace}/{scope}"),
    ]


#: ``"1,2,3A"``: the positions of a lexeme seen (light, heavy) times, by count pair
_POSITIONS: dict[tuple[int, int], str] = {}


def _positions(light: int, heavy: int) -> str:
    key = (light, heavy)
    text = _POSITIONS.get(key)
    if text is None:
        light = min(light, MAX_POSITIONS)
        heavy = min(heavy, MAX_POSITIONS - light)
        positions = [str(i) for i in range(1, light + 1)]
        positions.extend(f"{i}A" for i in range(light + 1, light + heavy + 1))
        text = ",".join(positions)
        if len(_POSITIONS) < 4096:
            _POSITIONS[key] = text
    return text


def encode_fields(fields: Mapping[str, str], tags: Sequence[str] = ()) -> tuple[str, int]:
    """A ``tsvector`` literal of the fields' tokens (and ``tags``) and the document's length in
    tokens (unweighted, as FTS5 counts it, plus one for the tags column of the SQLite index)."""
    light: Counter[str] = Counter()
    heavy: Counter[str] = Counter()
    order: dict[str, None] = {}  # lexemes in the order first seen
    length = 1
    for name, text in sorted(fields.items()):
        tokens = tokenize(clip(text))
        length += len(tokens)
        (light if name == "body" else heavy).update(tokens)
        order.update(dict.fromkeys(tokens))
    parts: list[str] = []
    for token in order:
        if len(token) > MAX_LEXEME_CHARS:
            continue
        positions = _positions(light.get(token, 0), heavy.get(token, 0))
        parts.append(f"{_quote(token)}:{positions}")
    parts.extend(f"{_quote(t)}:1" for t in tags)
    return " ".join(parts), length


def search_terms(query: str) -> list[str]:
    """The distinct tokens of a query (as every backend takes them), at most 64."""
    return [t for t in query_terms(query) if len(t) <= MAX_LEXEME_CHARS][:MAX_QUERY_TERMS]


def term_query(term: str) -> str:
    """A ``tsquery`` literal matching exactly one lexeme."""
    return _quote(term)


def any_query(terms: Sequence[str]) -> str:
    """A ``tsquery`` literal matching any of the lexemes."""
    return " | ".join(_quote(t) for t in terms)


__all__ = [
    "FOLD_DELTAS",
    "HINT_WEIGHT",
    "SCHEMA_VERSION",
    "TF_WEIGHTS",
    "analyze_stale",
    "any_query",
    "check_schema_name",
    "doc_tags",
    "encode_fields",
    "migrate",
    "search_terms",
    "tag",
    "term_query",
]
