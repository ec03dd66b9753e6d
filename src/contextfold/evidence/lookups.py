"""Where evidence search finds its exact keys, and the state a writer keeps of them.

:class:`IndexState` (the document ``evidence/<session>/index``) counts a session's blocks and
pointers so that neither a writer nor a search reads the blocks; its presence says that every
document of the session has its keys (:mod:`.keys`). A search reads keys and metadata from
:class:`StoreKeys`; a session written before keys existed gets them once, on its first search
(:func:`backfill`), or, when the store cannot be written, from :class:`MemoryKeys`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..jsontypes import JSON, as_list
from ..storage.base import Store
from ..storage.keys import KeyTable
from .keys import (
    NAMESPACE,
    STATE_NAMESPACE,
    Ords,
    block_keys,
    doc_id,
    fits,
    indexed,
    pointer_key,
    state_key,
    terms_id,
)
from .model import CompactBlock, EvidenceFormatError, EvidencePointer

STATE_VERSION = 1


@dataclass(kw_only=True, slots=True)
class IndexState:
    """What the writer of a session's evidence must know without reading its blocks: how
    many blocks and pointers there are, how many calls its documents answer, the newest
    ``created_at`` values, and up to which event (``seq``) they are counted. ``keyed``: every
    document of the session has its keys. Blocks counted by :meth:`fold` (appended by another
    writer after the state was stored) count every pointer as a new document."""

    seq: int = -1
    blocks: int = 0
    pointers: int = 0
    #: documents' calls (the next ``ord``)
    calls: int = 0
    max_created: int = 0
    newest: int = 0
    keyed: bool = False

    def fold(self, seq: int, block: Mapping[str, JSON]) -> None:
        """Count one more block (its event's data, as stored)."""
        evidence = as_list(block.get("evidence"))
        self.seq = max(self.seq, seq)
        self.blocks += 1
        self.pointers += len(evidence)
        self.calls += len(evidence)
        created = [p.get("createdAt") for p in evidence if isinstance(p, Mapping)]
        self.max_created = max([self.max_created, *(c for c in created if isinstance(c, int))])
        newest = block.get("createdAt")
        if isinstance(newest, int):
            self.newest = newest

    def add_block(
        self, seq: int, block: CompactBlock, placed: Mapping[str, int], calls: int
    ) -> None:
        """Count one more block (appended as event ``seq``): ``placed`` its pointers that
        became documents, ``calls`` the documents' calls after it (see :class:`Ords`)."""
        created = [p.created_at for p in block.evidence if p.id in placed]
        self.seq = max(self.seq, seq)
        self.blocks += 1
        self.pointers += len(block.evidence)
        self.calls = calls
        self.max_created = max([self.max_created, *created])
        self.newest = block.created_at

    def to_doc(self) -> dict[str, JSON]:
        return {
            "version": STATE_VERSION,
            "seq": self.seq,
            "blocks": self.blocks,
            "pointers": self.pointers,
            "calls": self.calls,
            "max_created": self.max_created,
            "newest": self.newest,
        }

    @classmethod
    def from_doc(cls, doc: Mapping[str, JSON] | None) -> IndexState | None:
        if doc is None or doc.get("version") != STATE_VERSION:
            return None
        names = ("seq", "blocks", "pointers", "calls", "max_created", "newest")
        values = [doc.get(k) for k in names]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            return None
        seq, blocks, pointers, calls, max_created, newest = (int(v) for v in values)  # type: ignore[arg-type]
        return cls(
            seq=seq,
            blocks=blocks,
            pointers=pointers,
            calls=calls,
            max_created=max_created,
            newest=newest,
            keyed=True,
        )


# --------------------------------------------------------------------------- key sources


class KeySource(Protocol):
    """Where a search finds exact keys and documents' metadata."""

    def lookup(
        self, keys: Sequence[str] = (), prefixes: Sequence[str] = ()
    ) -> list[tuple[str, str]]: ...

    def metas(self, doc_ids: Sequence[str]) -> Mapping[str, Mapping[str, JSON]]: ...

    def hit_meta(self, doc_id: str, meta: Mapping[str, JSON]) -> Mapping[str, JSON] | None:
        """The metadata to trust for a BM25 hit (None: not a document of this search)."""
        ...

    def full(self, metas: Mapping[str, Mapping[str, JSON]]) -> dict[str, EvidencePointer]:
        """The whole pointers of some documents (by their metadata), for the hits."""
        ...


class StoreKeys:
    """The store's keys of one session (the normal case)."""

    def __init__(self, store: Store, session_id: str) -> None:
        self.store = store
        self.session_id = session_id

    def lookup(
        self, keys: Sequence[str] = (), prefixes: Sequence[str] = ()
    ) -> list[tuple[str, str]]:
        if not keys and not prefixes:
            return []
        found: list[tuple[str, str]] = self.store.lookup(
            NAMESPACE, session_id=self.session_id, keys=keys, prefixes=prefixes
        )
        return found

    def metas(self, doc_ids: Sequence[str]) -> Mapping[str, Mapping[str, JSON]]:
        if not doc_ids:
            return {}
        found: Mapping[str, Mapping[str, JSON]] = self.store.metas(NAMESPACE, doc_ids)
        return found

    def hit_meta(self, doc_id: str, meta: Mapping[str, JSON]) -> Mapping[str, JSON] | None:
        return meta

    def full(self, metas: Mapping[str, Mapping[str, JSON]]) -> dict[str, EvidencePointer]:
        """Read from their documents (:func:`.keys.pointer_key`), else from the evidence
        event of their block."""
        out: dict[str, EvidencePointer] = {}
        by_block: dict[int, set[str]] = {}
        for d, meta in metas.items():
            pid = d.partition(":")[2]
            doc = self.store.get_doc(STATE_NAMESPACE, pointer_key(self.session_id, pid))
            raw = doc.get("pointer") if doc is not None else None
            if isinstance(raw, Mapping):
                try:
                    out[d] = EvidencePointer.from_dict(raw)
                    continue
                except (EvidenceFormatError, TypeError, ValueError):
                    pass
            seq = meta.get("block")
            if type(seq) is int and seq >= 0:
                by_block.setdefault(seq, set()).add(pid)
        for seq, ids in sorted(by_block.items()):
            for ev in self.store.read(self.session_id, start=seq, stop=seq + 1):
                block = ev.data.get("block") if ev.kind == "evidence" else None
                evidence = block.get("evidence") if isinstance(block, Mapping) else None
                for item in evidence if isinstance(evidence, list) else ():
                    got = item.get("id") if isinstance(item, Mapping) else None
                    if isinstance(got, str) and got in ids:
                        d = doc_id(self.session_id, got)
                        try:
                            out.setdefault(d, EvidencePointer.from_dict(item))
                        except (EvidenceFormatError, TypeError, ValueError):
                            continue
        return out


class MemoryKeys:
    """The same keys built in memory from the blocks: what a search uses when a session
    written before keys existed cannot get them stored (a read-only workspace)."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.table = KeyTable()
        self._metas: dict[str, dict[str, JSON]] = {}
        self._full: dict[str, EvidencePointer] = {}
        self.state = IndexState(keyed=True)
        self.ords = Ords()

    def add(
        self,
        blocks: Iterable[tuple[int, CompactBlock]],
        positions: Mapping[str, int] | None = None,
    ) -> None:
        """Index ``(event seq, block)`` pairs."""
        for seq, block in blocks:
            placed = self.ords.place(block)
            keys, terms, metas = block_keys(self.session_id, block, placed, seq, positions)
            for d, ks in keys.items():
                self.table.add(d, ks)
            self.table.add(terms_id(self.session_id), terms)
            self._metas.update(metas)
            self._full.update(
                (doc_id(self.session_id, p.id), p) for p in block.evidence if p.id in placed
            )
            self.state.add_block(seq, block, placed, self.ords.calls)

    def lookup(
        self, keys: Sequence[str] = (), prefixes: Sequence[str] = ()
    ) -> list[tuple[str, str]]:
        return self.table.lookup(keys, prefixes)

    def metas(self, doc_ids: Sequence[str]) -> Mapping[str, Mapping[str, JSON]]:
        return {d: self._metas[d] for d in doc_ids if d in self._metas}

    def hit_meta(self, doc_id: str, meta: Mapping[str, JSON]) -> Mapping[str, JSON] | None:
        return self._metas.get(doc_id)

    def full(self, metas: Mapping[str, Mapping[str, JSON]]) -> dict[str, EvidencePointer]:
        return {d: self._full[d] for d in metas if d in self._full}


def backfill(
    store: Store,
    session_id: str,
    blocks: Sequence[tuple[int, CompactBlock]],
    state: IndexState,
    positions: Mapping[str, int] | None = None,
) -> int:
    """Give the documents of a session written before keys existed their keys and metadata,
    and file its index state, in one transaction; returns how many documents that took.
    Raises StorageError when the store cannot be written."""
    keys: dict[str, list[str]] = {}
    terms: dict[str, None] = {}
    metas: dict[str, dict[str, JSON]] = {}
    whole: dict[str, EvidencePointer] = {}
    ords = Ords()
    for seq, block in blocks:
        placed = ords.place(block)
        k, t, m = block_keys(session_id, block, placed, seq, positions)
        keys.update(k)
        terms.update(dict.fromkeys(t))
        metas.update(m)
        whole.update((p.id, p) for p in block.evidence if p.id in placed)
    keys[terms_id(session_id)] = list(terms)
    with store.transaction() as txn:
        txn.add_keys(NAMESPACE, session_id, keys)
        txn.update_meta(NAMESPACE, metas)
        for pid, p in whole.items():
            txn.put_doc(STATE_NAMESPACE, pointer_key(session_id, pid), {"pointer": p.to_dict()})
        txn.put_doc(STATE_NAMESPACE, state_key(session_id), state.to_doc())
    return len(metas)


def seed(ords: Ords, store: Store, session_id: str, block: CompactBlock) -> None:
    """Tell ``ords`` which of the block's pointers and calls are stored already (a writer
    going on with a session it did not read)."""
    ids = [doc_id(session_id, p.id) for p in block.evidence if indexed(p) and p.id not in ords.seen]
    calls = {
        p.tool_use_id
        for p in block.evidence
        if indexed(p) and p.tool_use_id and p.tool_use_id not in ords.by_call
    }
    if not ids:
        return
    metas = dict(store.metas(NAMESPACE, ids))
    keys = [f"call:{c}" for c in calls if fits(f"call:{c}")]
    if keys:
        rows = store.lookup(NAMESPACE, session_id=session_id, keys=keys)
        more = [d for _, d in rows if d not in metas]
        metas.update(store.metas(NAMESPACE, more) if more else {})
    for meta in metas.values():
        rank, ord_ = meta.get("rank"), meta.get("ord")
        if not isinstance(rank, Mapping) or type(ord_) is not int:
            continue
        pid, call = rank.get("id"), rank.get("toolUseId") or rank.get("id")
        if isinstance(pid, str) and doc_id(session_id, pid) in ids:
            ords.seen.add(pid)
        if isinstance(call, str):
            ords.by_call.setdefault(call, ord_)


__all__ = ["IndexState", "KeySource", "MemoryKeys", "StoreKeys", "backfill", "seed"]
