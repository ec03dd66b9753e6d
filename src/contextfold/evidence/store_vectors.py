"""Semantic vectors filed after the answer: what a compaction indexes is searchable by its words
at once, and by its meaning once its vectors are computed, off the request's path.

Encoding an output's vector (:mod:`.embed`) is by far the costliest part of filing evidence: a
first request carrying a long history removes thousands of outputs at once. So a block's
vectors are not computed in the compaction's unit of work; that unit writes a *pending record*
instead (namespace ``evidence-vectors-pending``, key ``<session>/<block>``, the exact texts the
vectors are computed from), committed with the block, so a crash before the vectors exist
loses nothing: whoever finds the record files it. :func:`file_pending` computes the vectors of
every pending record of a session and, in one transaction per block, writes them and removes
the record (filing twice writes the same document: each text is encoded alone).

Who files: the gateway after each answer, in a thread of its own, without the conversation's
lock; and a search, synchronously, before it reads the vectors (a search that arrives before
the filing has finished files what is still pending itself, so it never ranks without them).
The texts and the vectors are exactly those filing in the unit would have written.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from ..errors import ContextFoldError
from . import embed, semantic
from .model import CompactBlock, EvidencePointer

if TYPE_CHECKING:
    import numpy as np

    from ..storage import Store
    from ..storage.session import SessionStore

    #: rows of vectors, one a text (as :mod:`.embed` names it)
    Matrix = np.ndarray[tuple[int, int], np.dtype[np.float32]]

log = logging.getLogger(__name__)

PENDING = "evidence-vectors-pending"
#: texts encoded between two checks of ``stop`` outside the encoder (it also calls ``stop``
#: after each layer of each text, a few milliseconds apart: a request that arrives meanwhile
#: waits for at most one layer)
CHUNK = 16


def defer_block(
    session: SessionStore,
    block: CompactBlock,
    texts: Mapping[str, str],
    indexed: Sequence[EvidencePointer],
) -> int:
    """Record (in the current unit of work) that the vectors of ``indexed`` are to be filed;
    how many (0 without the extra)."""
    if not indexed or not semantic.enabled():
        return 0
    session.put_doc(
        PENDING,
        semantic.block_key(session.session_id, block.id),
        {
            "ids": [p.id for p in indexed],
            "texts": [semantic.describe(p, texts.get(p.id, p.preview)) for p in indexed],
        },
    )
    return len(indexed)


def pending_blocks(store: Store, session_id: str) -> dict[str, dict[str, object]]:
    """The committed pending records of a session (key -> record)."""
    docs = store.docs(PENDING, prefix=f"{session_id}/")
    return {key: dict[str, object](doc) for key, doc in docs.items()}


class _Stopped(Exception):
    """``stop()`` said to give up, within a text."""


class TextEncoder(Protocol):
    """What encodes the texts: :class:`.embed.Encoder` in this process, or
    :class:`.embed_worker.WorkerEncoder` in a child process (the same vectors)."""

    def encode(self, texts: Sequence[str], between: Callable[[], None] | None = None) -> Matrix:
        """One unit vector per text; ``between`` is called between steps."""
        ...


def _encode(
    texts: list[str], stop: Callable[[], bool], encoder: TextEncoder | None = None
) -> list[object] | None:
    """The vectors of ``texts`` in chunks (each text is encoded alone, so chunking changes
    nothing); None when the model is missing, fails, or ``stop()`` says to give up."""
    enc = encoder if encoder is not None else embed.encoder()
    if enc is None:
        return None
    parts: list[object] = []
    t0 = time.perf_counter()

    def between() -> None:
        if stop():
            raise _Stopped

    for i in range(0, len(texts), CHUNK):
        if stop():
            return None
        try:
            parts.append(enc.encode(texts[i : i + CHUNK], between))
        except _Stopped:
            return None
        except Exception as exc:  # the model is optional: never a reason to fail a request
            if stop():  # the gateway is closing (its encoder with it): they stay pending
                log.debug("semantic vectors left pending at shutdown: %s", exc)
            else:
                log.warning("semantic vectors not computed: %s", exc)
            return None
    semantic.STATS["vectors"] += len(texts)
    semantic.STATS["seconds"] += time.perf_counter() - t0
    return parts


def _file_one(
    store: Store,
    key: str,
    record: Mapping[str, object],
    stop: Callable[[], bool],
    encoder: TextEncoder | None,
) -> int:
    ids, texts = record.get("ids"), record.get("texts")
    if not isinstance(ids, list) or not isinstance(texts, list) or len(ids) != len(texts):
        with store.transaction() as txn:
            txn.delete_doc(PENDING, key)  # damaged: that block ranks by its words alone
        return 0
    parts = _encode([str(t) for t in texts], stop, encoder)
    if parts is None:
        return -1
    with store.transaction() as txn:
        txn.put_doc(semantic.NAMESPACE, key, {"ids": [str(i) for i in ids], "v": _pack(parts)})
        txn.delete_doc(PENDING, key)
    return len(ids)


def _pack(parts: list[object]) -> str:
    import base64

    import numpy as np

    arr = np.concatenate([np.asarray(p) for p in parts])
    return base64.b64encode(arr.astype("<f2").tobytes()).decode("ascii")


def _never() -> bool:
    return False


def file_pending(
    store: Store,
    session_id: str,
    stop: Callable[[], bool] = _never,
    encoder: TextEncoder | None = None,
) -> int:
    """Compute and write the vectors of every pending block of the session; how many vectors
    were filed. Fails open: a storage error, a failed encoder, or ``stop()`` (a shutdown)
    between chunks, leaves the records for the next try. ``encoder``: what computes them
    (None: the model in this process)."""
    if not semantic.enabled():
        return 0
    filed = 0
    try:
        for key, record in sorted(pending_blocks(store, session_id).items()):
            got = _file_one(store, key, record, stop, encoder)
            if got < 0:  # stopped, or the encoder failed: the rest stays pending too
                break
            filed += got
    except ContextFoldError as exc:
        log.warning("semantic vectors of session %s not filed yet: %s", session_id, exc)
    return filed


__all__ = ["PENDING", "TextEncoder", "defer_block", "file_pending", "pending_blocks"]
