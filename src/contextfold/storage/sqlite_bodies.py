"""The embedded store's shared search texts: a document's indexed body kept once per text.

With FTS5 the contentless index needs a document's text back only to take the document out,
so the text is kept compressed beside it. The same text is often indexed in two namespaces
(a tool output is a session message and a piece of evidence, byte for byte): a body of at
least :data:`SHARE_MIN` characters is then kept once, in ``search_bodies`` (found again by
the first 8 bytes of its sha256), and each document names its row in ``body_id`` (its own
``body`` is empty). A shorter body, a database without FTS5 (whose scan reads ``body`` as
text), a row written by an older release and the rare text whose hash prefix another took keep
their body inline. A shared body
goes when the last document naming it does.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterable, Sequence

from .util import pack, unpack

#: Bodies shorter than this (characters) stay inline: a row of their own would cost more.
SHARE_MIN = 256

#: The statement reading a document's FTS row back (``{where}`` filters ``search_docs d``).
READ_ROWS = (
    "SELECT d.id, coalesce(b.body, d.body), d.hints, d.tags, d.body_id FROM search_docs d "
    "LEFT JOIN search_bodies b ON b.id = d.body_id WHERE {where}"
)


def body_key(text: str) -> int:
    """What a shared body is found by: the first 8 bytes of its sha256, as a signed integer."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def share(con: sqlite3.Connection, bodies: Sequence[str]) -> list[tuple[str | bytes, int | None]]:
    """What each body's document stores: ``(body column, body_id)``. A long body is filed in
    ``search_bodies`` (once per text) and its column left empty."""
    out: list[tuple[str | bytes, int | None]] = []
    for text in bodies:
        packed = pack(text)
        if len(text) < SHARE_MIN:
            out.append((packed, None))
            continue
        digest = body_key(text)
        row = con.execute("SELECT id, body FROM search_bodies WHERE hash=?", (digest,)).fetchone()
        if row is None:
            cur = con.execute(
                "INSERT INTO search_bodies(hash, body) VALUES (?, ?)", (digest, packed)
            )
            out.append(("", cur.lastrowid))
        elif unpack(row[1]) == text:
            out.append(("", int(row[0])))
        else:  # another text of the same hash prefix
            out.append((packed, None))
    return out


#: A document's row as the FTS index was given it: ``(id, body, hints, tags, body_id)``.
IndexedRow = tuple[int, str, str, str, int | None]


def read_rows(con: sqlite3.Connection, where: str, args: Sequence[object]) -> list[IndexedRow]:
    """The rows of the documents ``where`` selects (``d.``-prefixed columns), each body
    unpacked."""
    rows = con.execute(READ_ROWS.format(where=where), list(args)).fetchall()
    return [(int(r[0]), unpack(r[1]), r[2], r[3], r[4]) for r in rows]


def release(con: sqlite3.Connection, keys: Iterable[int | None]) -> None:
    """After documents were deleted: the shared bodies among ``keys`` no document names now."""
    wanted = sorted({k for k in keys if k is not None})
    con.executemany(
        "DELETE FROM search_bodies WHERE id=? AND NOT EXISTS "
        "(SELECT 1 FROM search_docs WHERE body_id=?)",
        [(k, k) for k in wanted],
    )


__all__ = ["SHARE_MIN", "IndexedRow", "body_key", "read_rows", "release", "share"]
