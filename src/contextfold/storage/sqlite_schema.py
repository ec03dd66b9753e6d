"""The embedded store's schema: tables, versioned migrations, FTS5 naming.

A new database gets the version-1 tables, then every migration in order; an existing one gets
the migrations it lacks, in one write transaction (two processes opening an old workspace at
once: the second waits for the first and finds nothing left to do). ``store_meta`` holds the
version; a database newer than this release is refused with a clear error.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Sequence

DB_NAME = "store.sqlite"

_BASE = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY, agent_id TEXT NOT NULL, created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL, title TEXT NOT NULL DEFAULT '', events INTEGER NOT NULL,
    messages INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS sessions_agent ON sessions(agent_id, updated_at);
CREATE TABLE IF NOT EXISTS events (
    session_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, ts TEXT NOT NULL,
    data TEXT NOT NULL, PRIMARY KEY (session_id, seq));
CREATE TABLE IF NOT EXISTS docs (
    namespace TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
    PRIMARY KEY (namespace, key));
CREATE TABLE IF NOT EXISTS search_docs (
    id INTEGER PRIMARY KEY, namespace TEXT NOT NULL, doc_id TEXT NOT NULL, scope TEXT NOT NULL,
    session_id TEXT NOT NULL, meta TEXT NOT NULL, body TEXT NOT NULL, hints TEXT NOT NULL,
    tags TEXT NOT NULL, UNIQUE (namespace, doc_id));
CREATE INDEX IF NOT EXISTS search_docs_session ON search_docs(namespace, session_id);
CREATE TABLE IF NOT EXISTS store_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

#: Version -> the statements that bring a database from the version before to it.
MIGRATIONS: dict[int, Sequence[str]] = {
    # each event may carry a small head (a message's position, uuid, role, call ids, tokens)
    # that reopening reads instead of every message; older events keep NULL
    # (the index covers the heads: reading them never walks the events' data pages)
    2: (
        "ALTER TABLE events ADD COLUMN head TEXT",
        "CREATE INDEX IF NOT EXISTS events_heads ON events(session_id, kind, seq, head)",
    ),
    # exact lookup keys of search documents (and keys filed under any id of a session), for
    # Store.lookup: the primary key serves the lookups (one session and namespace, a key or a
    # key range, BINARY collation: code point order); the second index replaces a document's
    3: (
        "CREATE TABLE IF NOT EXISTS search_keys (session_id TEXT NOT NULL, namespace TEXT "
        "NOT NULL, key TEXT NOT NULL, doc_id TEXT NOT NULL, "
        "PRIMARY KEY (session_id, namespace, key, doc_id)) WITHOUT ROWID",
        "CREATE INDEX IF NOT EXISTS search_keys_doc ON search_keys(namespace, doc_id)",
    ),
    # message heads become compact arrays [pos, uuid, role, tokens, tool_call_id, call ids]
    # and what each call was about moves to its own column (read only for ordinal recall
    # questions): reopening decodes a fifth of the bytes. Heads of version 2 are converted here.
    4: (
        "ALTER TABLE events ADD COLUMN detail TEXT",
        # (as PostgreSQL's: calls that are not a list give no call ids, an item that is not
        # an object a null id, a head that is not JSON is left alone; the details stay JSON)
        "UPDATE events SET detail = CASE WHEN json_type(head, '$.calls') <> 'null' "
        "THEN json_quote(json_extract(head, '$.calls')) END, head = json_array("
        "json_extract(head, '$.pos'), json_extract(head, '$.uuid'), "
        "json_extract(head, '$.role'), json_extract(head, '$.tokens'), "
        "json_extract(head, '$.tool_call_id'), (SELECT CASE WHEN count(*) = 0 THEN NULL "
        "ELSE json_group_array(CASE WHEN type = 'object' THEN json_extract(value, '$.id') END) "
        "END FROM json_each(events.head, '$.calls') "
        "WHERE json_type(events.head, '$.calls') = 'array')) "
        "WHERE kind = 'message' AND CASE WHEN json_valid(head) THEN json_type(head) = 'object' END",
        # the index covers the details too: reading them never walks the events' data
        # (a big event's data spans overflow pages that would all be read to reach a column
        # after it); it serves every lookup events_kind did
        "DROP INDEX IF EXISTS events_heads",
        "CREATE INDEX events_heads ON events(session_id, kind, seq, head, detail)",
        "DROP INDEX IF EXISTS events_kind",
    ),
    # branches share their parent's events up to the fork point instead of copying them
    # (see storage/branches.py): the parent and the fork point, on the branch's row
    5: (
        "ALTER TABLE sessions ADD COLUMN parent_id TEXT",
        "ALTER TABLE sessions ADD COLUMN fork_at INTEGER NOT NULL DEFAULT 0",
        "CREATE INDEX IF NOT EXISTS sessions_parent ON sessions(parent_id) "
        "WHERE parent_id IS NOT NULL",
    ),
    # a long indexed text is kept once however many documents index it (a tool output is a
    # session message and a piece of evidence): see storage/sqlite_bodies.py. Rows written
    # before keep their body inline (a NULL body_id), as short ones still do
    6: (
        # (ids in the order of writing fill the table's pages; the hash finds a text again)
        "CREATE TABLE IF NOT EXISTS search_bodies (id INTEGER PRIMARY KEY, "
        "hash INTEGER NOT NULL, body NOT NULL)",
        "CREATE UNIQUE INDEX IF NOT EXISTS search_bodies_hash ON search_bodies(hash)",
        "ALTER TABLE search_docs ADD COLUMN body_id INTEGER",
        "CREATE INDEX IF NOT EXISTS search_docs_body ON search_docs(body_id) "
        "WHERE body_id IS NOT NULL",
    ),
}
#: The schema version this release writes and reads.
SCHEMA_VERSION = max(MIGRATIONS)

#: One FTS5 table per namespace (``{table}``): the session messages of a whole workspace do not
#: weigh on evidence or memory queries, and BM25 statistics are per corpus.
FTS = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS {table} USING fts5(body, hints, tags, content='', "
    "tokenize=\"unicode61 remove_diacritics 0 tokenchars '._/:-'\")"
)


def version_of(con: sqlite3.Connection) -> int | None:
    """The database's schema version (None: not a contextfold store, or no version yet)."""
    try:
        row = con.execute("SELECT value FROM store_meta WHERE key='schema'").fetchone()
    except sqlite3.OperationalError:
        return None
    return int(row[0]) if row is not None else None


def create_or_migrate(con: sqlite3.Connection, fts5: bool) -> int:
    """Create the tables or bring them to :data:`SCHEMA_VERSION` (inside the caller's write
    transaction); returns how many migrations ran. A newer database is left untouched."""
    for statement in _BASE.split(";"):
        if statement.strip():
            con.execute(statement)
    con.execute("INSERT OR IGNORE INTO store_meta VALUES ('fts5', ?)", ("1" if fts5 else "0",))
    version = version_of(con)
    if version is None:  # a new database: version 1 tables, then every migration
        version = 1
        con.execute("INSERT INTO store_meta VALUES ('schema', '1')")
    if version >= SCHEMA_VERSION:
        return 0
    ran = 0
    for number in range(version + 1, SCHEMA_VERSION + 1):
        for statement in MIGRATIONS[number]:
            _run(con, statement)
        ran += 1
    con.execute("UPDATE store_meta SET value=? WHERE key='schema'", (str(SCHEMA_VERSION),))
    return ran


def _run(con: sqlite3.Connection, statement: str) -> None:
    """One migration statement; a column that is there already (a store whose version number
    was put back by hand) is kept as it is."""
    try:
        con.execute(statement)
    except sqlite3.OperationalError as exc:
        if not (statement.startswith("ALTER TABLE") and "duplicate column" in str(exc)):
            raise


#: SQLite's result codes for a database that cannot be written here: READONLY, CANTOPEN, PERM
_NO_WRITE = (8, 14, 3)


def cannot_write(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` says the database cannot be written here (a read-only file or mount),
    as opposed to a failed write (a full disk, a damaged file)."""
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    if code is not None:
        return (code & 0xFF) in _NO_WRITE
    text = str(exc).lower()
    return "readonly" in text or "read-only" in text or "unable to open" in text


def tag(kind: str, value: str) -> str:
    """One index token standing for a namespace or a session: MATCH narrows to it first, so a
    common word is not ranked across every other session of the workspace."""
    return kind + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def session_tag(namespace: str, session_id: str) -> str:
    return tag("ss", f"{namespace}/{session_id}")


def fts_table(namespace: str) -> str:
    return "fts_" + hashlib.sha256(namespace.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def fts5_available() -> bool:
    try:
        con = sqlite3.connect(":memory:")
        try:
            con.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
        finally:
            con.close()
    except sqlite3.Error:
        return False
    return True
