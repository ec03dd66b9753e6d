"""Candidate retrieval over the evidence of a session.

BM25 over each evidence body plus its hints (command, tool, paths, patterns, URLs, anchors,
content types, all from :func:`.fields.evidence_fields`' sources), and exact lookups for what a
question can name: a command (in backticks or verbatim, also by its first line), a file path in
any form (by path suffix), a URL, a search pattern, a tool, an exception type. The candidates
and what matched go to :func:`.rank.rerank`, which decides the order (match level, ordinal,
recency, the preferences for tool results and failures).

Both are persisted in the store, written with each block (:mod:`.lookups`): BM25 is the
store's index, the exact lookups are keys of the same documents. A question looks up only the
keys it names and reads the metadata of the documents found; nothing is built when a session
is reopened, and the cost of a question does not grow with the session's evidence (except an
ordinal that names nothing, which counts every output). Bodies are read for the top hits only.
contextfold's own tool results (recall, read_offloaded, session_*, memory_*) are never indexed.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping

from ..errors import StorageError
from ..jsontypes import JSON
from . import semantic, store_vectors
from .fields import CallFields
from .keys import fits, indexed
from .lookups import KeySource, MemoryKeys, StoreKeys, backfill
from .model import EvidencePointer
from .qdocs import ord_of
from .question import BM25_FETCH, Hit, Question
from .rank import CallLog
from .store import NAMESPACE, EvidenceStore
from .text import tokenize

#: Hits fetched beyond ``k`` to make up for those still in view.
VISIBLE_EXTRA = 20


class EvidenceSearch:
    """Evidence search of one session: the store's BM25 plus its exact lookups by what a
    question names."""

    def __init__(
        self,
        store: EvidenceStore,
        *,
        calls: Callable[[], CallLog | None] | None = None,
        visible: Callable[[], Collection[str]] | None = None,
    ) -> None:
        self.store = store
        #: The session's calls in order (ordinals count them); None: the indexed ones only.
        self.calls = calls
        #: Uuids of the messages the view still shows as they are (None: not known): their
        #: evidence is never a hit when evidence that left the view matches.
        self.visible = visible
        self._source: KeySource | None = None
        self._vectors: semantic.SessionVectors | None = None
        self._internal: tuple[int, CallLog] | None = None

    def __len__(self) -> int:
        return len(self.pointers())

    # ----------------------------------------------------------------- the lookups

    def sync(self) -> int:
        """Make sure the session's exact lookups exist: a session written before they did gets
        them once (in one transaction; in memory only when the store cannot be written).
        Returns how many documents that took (0: nothing to do)."""
        if isinstance(self._source, StoreKeys):
            return 0
        state = self.store.state()
        session = self.store.session
        if state.keyed or not state.blocks:
            self._source = StoreKeys(session.store, session.session_id)
            return 0
        blocks = self.store.numbered_blocks()
        if isinstance(self._source, MemoryKeys):  # grown since: index the new blocks only
            log = self.calls() if self.calls is not None else None
            self._source.add(
                blocks[self._source.state.blocks :], log.positions if log is not None else None
            )
            return 0
        log = self.calls() if self.calls is not None else None
        positions = log.positions if log is not None else None
        try:
            done = backfill(session.store, session.session_id, blocks, state, positions)
        except StorageError:
            memory = MemoryKeys(session.session_id)
            memory.add(blocks, positions)
            self._source = memory
            return memory.state.pointers
        state.keyed = True
        self._source = StoreKeys(session.store, session.session_id)
        return done

    def _keys(self) -> KeySource:
        self.sync()
        assert self._source is not None
        return self._source

    def get(self, evidence_id: str) -> EvidencePointer | None:
        src = self._keys()
        doc_id = f"{self.store.session.session_id}:{evidence_id}"
        meta = src.metas([doc_id]).get(doc_id)
        if meta is None:
            return None
        return src.full({doc_id: meta}).get(doc_id) or self.store.find(evidence_id)

    def _full(self, doc_ids: list[str]) -> list[EvidencePointer]:
        src = self._keys()
        metas = src.metas(doc_ids)
        full = src.full(metas)
        return [full[d] for d in doc_ids if d in full]

    def by_call(self, call_id: str) -> list[EvidencePointer]:
        """The evidence of one tool call (its result), oldest first."""
        key = f"call:{call_id}"
        rows = self._keys().lookup([key]) if fits(key) else []
        metas = self._keys().metas([d for _, d in rows])
        order = sorted(metas, key=lambda d: (ord_of(metas[d]), d))
        return self._full(order)

    def recent_failures(self, k: int) -> list[EvidencePointer]:
        """The ``k`` newest outputs showing an error, a stack trace or test output."""
        rows = self._keys().lookup(prefixes=["err:"])
        return self._full([d for _, d in sorted(rows, reverse=True)[: max(k, 0)]])

    def pointers(self) -> list[EvidencePointer]:
        """Every indexed pointer (reads every block: not for the hot path)."""
        seen: dict[str, EvidencePointer] = {}
        for p in self.store.pointers():
            if indexed(p):
                seen.setdefault(p.id, p)
        return list(seen.values())

    def internal_log(self) -> CallLog:
        """The indexed pointers' calls in order: what ordinals count over when the session's
        calls are not known (reads every block, only for such a question)."""
        blocks = self.store.state().blocks
        if self._internal is None or self._internal[0] != blocks:
            log = CallLog()
            for p in self.pointers():
                log.add(
                    p.tool_use_id or p.id,
                    CallFields(
                        tool=p.tool_name or "",
                        command=p.command or "",
                        paths=p.paths,
                        action=p.action or "other",
                        shell=p.shell,
                    ),
                )
            self._internal = (blocks, log)
        return self._internal[1]

    def vectors(self) -> semantic.SessionVectors | None:
        """The session's semantic vectors (None without the ``semantic`` extra, or when they
        cannot be read: recall then ranks by words alone)."""
        if not semantic.enabled():
            return None
        session = self.store.session
        # vectors still pending (filed after the answer, or left by a crash): filed now, so a
        # search never ranks without them
        if store_vectors.file_pending(session.store, session.session_id):
            self._vectors = None
        if self._vectors is None:
            self._vectors = semantic.SessionVectors(session)
        try:
            self._vectors.load(self.store.state().blocks)
        except StorageError:
            return None
        return self._vectors

    # ----------------------------------------------------------------- BM25

    def bm25(
        self, src: KeySource, terms: Iterable[str], limit: int = BM25_FETCH
    ) -> dict[str, tuple[float, Mapping[str, JSON]]]:
        """BM25 scores (and metadata) from the store's index, this session's evidence only."""
        return self.bm25_all(src, terms, limit)[0]

    def bm25_all(
        self, src: KeySource, terms: Iterable[str], limit: int = BM25_FETCH
    ) -> tuple[dict[str, tuple[float, Mapping[str, JSON]]], bool]:
        """:meth:`bm25`, and whether those are all the documents with any of ``terms`` (the
        store found fewer than ``limit``)."""
        words = list(terms)
        if not words:
            return {}, True
        session = self.store.session
        hits = session.store.search(
            NAMESPACE, " ".join(words), session_id=session.session_id, limit=limit
        )
        out: dict[str, tuple[float, Mapping[str, JSON]]] = {}
        for h in hits:
            meta = src.hit_meta(h.doc_id, h.meta)
            if meta is not None:
                out[h.doc_id] = (h.score, meta)
        return out, len(hits) < limit

    # ----------------------------------------------------------------- querying

    def search(self, query: str, k: int = 5, *, removed_only: bool = False) -> list[Hit]:
        """The ``k`` best pieces of evidence for ``query``, best first. Evidence of a message
        the view still shows comes only when nothing that left the view matches, and never
        with ``removed_only`` (what automatic injection uses). The ``recall`` tool and the
        injection both rank here, so they agree."""
        if k <= 0:
            return []
        src = self._keys()
        state = self.store.state() if not isinstance(src, MemoryKeys) else src.state
        if not state.pointers:
            return []
        shown = set(self.visible()) if self.visible is not None else set()
        want = k + min(len(shown), VISIBLE_EXTRA) if shown else k

        def pick(hits: Iterator[Hit]) -> list[Hit]:
            """The k best that left the view (read only as far as those are found); when
            none did, the k best (none with ``removed_only``)."""
            seen: list[Hit] = []
            gone: list[Hit] = []
            for h in hits:
                seen.append(h)
                if not shown or not _in_view(h.pointer, shown):
                    gone.append(h)
                    if len(gone) == k:
                        break
            return gone if gone or removed_only else seen[:k]

        return Question(self, src, query, max(1, state.max_created)).answer(want, pick)


def _in_view(pointer: EvidencePointer, shown: set[str]) -> bool:
    """True when the message the evidence comes from is still shown as it is."""
    uuid = pointer.message_uuid or pointer.parent_message_uuid
    return pointer.source_scope != "sub_agent" and uuid is not None and uuid in shown


__all__ = ["VISIBLE_EXTRA", "EvidenceSearch", "Hit", "tokenize"]
