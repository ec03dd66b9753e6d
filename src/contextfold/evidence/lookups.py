"""The exact lookups of evidence search, kept in the store next to its BM25 index.

Every pointer's search document carries exact keys (what a question can name), written with
its block in the same unit of work; the words that lead to a command or an anchor are filed
once per session, under the id ``<session>:#terms``. A question looks up only the keys it
names, then reads the metadata of the documents found: nothing is rebuilt when a session is
reopened. Keys of one session (namespace ``"evidence"``)::

    cmd:<longest word> <command>   a normalized command, and its first line
    anc:<anchor>                   an anchor's value, lowercased (4 characters or more)
    path:<suffix>  full:<path>     every suffix of a path the call named; the whole path
    url:<url>  tool:<name>  exc:<ExceptionType>  call:<tool call id>
    pat:<longest word> <pattern>   a search pattern, as lowercase words
    out:<0|1><ord> <call id>       a tool output in evidence order (1: it failed)
    err:<created_at>               an output showing an error, a stack trace or test output
    under <session>:#terms:  cmdtok:<word> <command>, anctok:<word> <anchor>, tools:<name>

``ord`` numbers the calls the documents answer, in evidence order (:class:`Ords`). A
document's meta (:func:`meta_of`) holds what ranking reads of its pointer, its ``ord``, and
the seq of its block's event, where the whole pointer is read for the hits. The per-session document
``evidence/<session>/index`` (:class:`IndexState`) counts blocks and pointers; its presence
says that every document of the session has its keys. Sessions written before keys existed
get them once, on their first search (:func:`backfill`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..storage.base import JSON, MAX_KEY_BYTES, SearchDoc
from ..storage.keys import KeyTable
from .classify import normalize_command
from .fields import command_head, is_own_tool, path_suffixes, pattern_key
from .model import CompactBlock, EvidenceFormatError, EvidencePointer
from .text import tokenize

NAMESPACE = "evidence"
#: Documents namespace of the per-session :class:`IndexState`.
STATE_NAMESPACE = "evidence"
STATE_VERSION = 1
ERROR_TYPES = frozenset({"stack_trace", "error", "test_output"})


def doc_id(session_id: str, pointer_id: str) -> str:
    return f"{session_id}:{pointer_id}"


def terms_id(session_id: str) -> str:
    return f"{session_id}:#terms"


def state_key(session_id: str) -> str:
    return f"{session_id}/index"


def fits(key: str) -> bool:
    """Whether a key can be stored (no NUL, valid UTF-8, short enough for an index entry);
    one that cannot is left out, on both the writing and the asking side."""
    if "\x00" in key:
        return False
    try:
        return len(key.encode("utf-8")) <= MAX_KEY_BYTES
    except UnicodeEncodeError:
        return False


def longest_token(text: str) -> str:
    """The word a command (or a pattern) is filed under: its longest token."""
    toks = set(tokenize(text))
    return max(sorted(toks), key=len) if toks else ""


def command_norms(command: str | None) -> list[str]:
    """A command as compared, and its first line (how a heredoc or a script is named)."""
    if not command:
        return []
    return [n for n in dict.fromkeys((normalize_command(command), command_head(command))) if n]


def cmd_key(norm: str) -> str:
    return f"cmd:{longest_token(norm)} {norm}"


def anchor_values(p: EvidencePointer) -> list[str]:
    out: dict[str, None] = {}
    for anchor in p.anchors:
        if not anchor.startswith(("command:", "exit_code:")):
            value = anchor.partition(":")[2].lower()
            if len(value) >= 4:
                out[value] = None
    return list(out)


def failed(p: EvidencePointer) -> bool:
    """A non-zero exit code; when the output reports none, a stack trace."""
    code = next((a for a in p.anchors if a.startswith("exit_code:")), None)
    if code is not None:
        return code != "exit_code:0"
    return "stack_trace" in p.content_types


def doc_keys(p: EvidencePointer, ord_: int) -> list[str]:
    """The exact keys of one pointer's document."""
    keys = [cmd_key(n) for n in command_norms(p.command)]
    keys += [f"anc:{v}" for v in anchor_values(p)]
    for path in p.paths:
        sufs = path_suffixes(path)
        keys += [f"path:{s}" for s in sufs]
        if sufs:
            keys.append(f"full:{sufs[0]}")
    keys += [f"url:{u}" for u in p.urls]
    for pat in p.patterns:
        key = pattern_key(pat)
        if key:
            keys.append(f"pat:{max(key.split(), key=len)} {key}")
    if p.tool_name:
        keys.append(f"tool:{p.tool_name}")
    keys += [f"exc:{a[10:]}" for a in p.anchors if a.startswith("exception:")]
    if p.tool_use_id:
        keys.append(f"call:{p.tool_use_id}")
    if p.role == "tool":
        keys.append(f"out:{int(failed(p))}{ord_:010d} {p.tool_use_id or p.id}")
    if ERROR_TYPES & set(p.content_types):
        keys.append(f"err:{p.created_at:012d}")
    return [k for k in dict.fromkeys(keys) if fits(k)]


def term_keys(p: EvidencePointer) -> list[str]:
    """The words that lead to the pointer's commands and anchors, and its tool's name."""
    keys: list[str] = []
    for norm in command_norms(p.command):
        keys += [f"cmdtok:{t} {norm}" for t in set(tokenize(norm))]
    for value in anchor_values(p):
        keys += [f"anctok:{t} {value}" for t in set(tokenize(value))]
    if p.tool_name:
        keys.append(f"tools:{p.tool_name}")
    return [k for k in dict.fromkeys(keys) if fits(k)]


def meta_of(
    p: EvidencePointer, ord_: int, block_seq: int, positions: Mapping[str, int] | None = None
) -> dict[str, JSON]:
    """A document's metadata: its place, whether it failed, the event of its block (where
    the whole pointer is) and what ranking reads of the pointer (:func:`rank_pointer`).

    ``positions``: the session's calls by id when known (:class:`.calls.CallLog`); then
    ``pos`` is the call's position (None: not a call of the session). A call keeps its
    position once made, so a question that counts no ordinal needs no call log."""
    rank: dict[str, JSON] = {"id": p.id, "role": p.role, "createdAt": p.created_at}
    optional: dict[str, JSON] = {
        "toolUseId": p.tool_use_id,
        "command": p.command,
        "toolName": p.tool_name,
        "patterns": list(p.patterns) or None,
        "lines": p.lines,
        "action": p.action,
        "shell": p.shell or None,
        "sourceScope": p.source_scope if p.source_scope != "main_agent" else None,
        "errorish": bool(ERROR_TYPES & set(p.content_types)) or None,
        "primary": next((a[10:] for a in p.anchors if a.startswith("exception:")), None),
    }
    rank.update((k, v) for k, v in optional.items() if v is not None)
    meta: dict[str, JSON] = {"ord": ord_, "failed": failed(p), "block": block_seq, "rank": rank}
    if positions is not None:
        meta["pos"] = positions.get(p.tool_use_id or p.id)
    return meta


def rank_pointer(rank: Mapping[str, Any]) -> EvidencePointer | None:
    """The part of a pointer ranking reads, from :func:`meta_of`'s ``rank`` (None when it is
    not in that form). Its primary exception is its only anchor."""
    get = rank.get
    pid, role, created = get("id"), get("role"), get("createdAt")
    use, command, tool = get("toolUseId"), get("command"), get("toolName")
    lines, action, primary = get("lines"), get("action"), get("primary")
    patterns, scope = get("patterns") or (), get("sourceScope") or "main_agent"
    for value in (use, command, tool, lines, action, primary):
        if value is not None and type(value) is not str:
            return None
    if (
        type(pid) is not str
        or type(role) is not str
        or type(created) is not int
        or type(patterns) not in (list, tuple)
        or any(type(x) is not str for x in patterns)
        or scope not in ("main_agent", "sub_agent")
    ):
        return None
    return EvidencePointer(
        id=pid,
        tool_use_id=use,
        command=command,
        tool_name=tool,
        role=role,
        created_at=created,
        patterns=tuple(patterns),
        lines=lines,
        action=action,
        shell=get("shell") is True,
        source_scope="sub_agent" if scope == "sub_agent" else "main_agent",
        anchors=(f"exception:{primary}",) if primary else (),
    )


def indexed(p: EvidencePointer) -> bool:
    """contextfold's own tool results (recall, session_*, memory_*) are never indexed."""
    return not (p.role == "tool" and is_own_tool(p.tool_name))


class Ords:
    """Which pointers become documents, and their ``ord``: a pointer id indexed before is
    not indexed again (the first copy is kept), and ``ord`` numbers the calls the documents
    answer in evidence order (two documents of one tool call share it; a message counts as
    its own call). Seeded with what is already stored when a writer goes on."""

    def __init__(self, calls: int = 0) -> None:
        self.calls = calls
        self.seen: set[str] = set()
        self.by_call: dict[str, int] = {}

    def place(self, block: CompactBlock) -> dict[str, int]:
        """pointer id -> ord, for the block's pointers that become documents."""
        out: dict[str, int] = {}
        for p in block.evidence:
            if not indexed(p) or p.id in self.seen or p.id in out:
                continue
            call = p.tool_use_id or p.id
            ord_ = self.by_call.get(call)
            if ord_ is None:
                ord_ = self.by_call[call] = self.calls
                self.calls += 1
            out[p.id] = ord_
        self.seen.update(out)
        return out


def search_docs(
    session_id: str,
    owner: str,
    block: CompactBlock,
    text_of: Callable[[EvidencePointer], str],
    *,
    ords: Mapping[str, int] | None = None,
    block_seq: int = -1,
    positions: Mapping[str, int] | None = None,
) -> list[SearchDoc]:
    """The index rows of a block's pointers (body, command, hints, command key, exact keys).
    ``ords`` (from :meth:`Ords.place`) says which pointers get one; by default every pointer
    of the block, as if it were the session's first. ``block_seq``: the seq of the block's
    event (where a hit's whole pointer is read); ``positions``: see :func:`meta_of`."""
    from .store import command_key  # store imports this module

    if ords is None:
        ords = Ords().place(block)
    docs = []
    for p in block.evidence:
        ord_ = ords.get(p.id)
        if ord_ is None:
            continue
        hints = " ".join(
            (p.tool_name or "", *p.paths, *p.patterns, *p.urls, *p.anchors, *p.content_types)
        )
        docs.append(
            SearchDoc(
                namespace=NAMESPACE,
                doc_id=doc_id(session_id, p.id),
                scope=owner,
                session_id=session_id,
                fields={
                    "body": text_of(p),
                    "command": p.command or "",
                    "hints": hints,
                    "key": command_key(p.command),
                },
                meta=meta_of(p, ord_, block_seq, positions),
                keys=doc_keys(p, ord_),
            )
        )
    return docs


def block_terms(block: CompactBlock) -> list[str]:
    return list(dict.fromkeys(k for p in block.evidence if indexed(p) for k in term_keys(p)))


# --------------------------------------------------------------------------- index state


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

    def fold(self, seq: int, block: Mapping[str, Any]) -> None:
        """Count one more block (its event's data, as stored)."""
        evidence = block.get("evidence") or []
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
    def from_doc(cls, doc: Mapping[str, Any] | None) -> IndexState | None:
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

    def metas(self, doc_ids: Sequence[str]) -> dict[str, Mapping[str, Any]]: ...

    def hit_meta(self, doc_id: str, meta: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The metadata to trust for a BM25 hit (None: not a document of this search)."""
        ...

    def full(self, metas: Mapping[str, Mapping[str, Any]]) -> dict[str, EvidencePointer]:
        """The whole pointers of some documents (by their metadata), for the hits."""
        ...


class StoreKeys:
    """The store's keys of one session (the normal case)."""

    def __init__(self, store: Any, session_id: str) -> None:
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

    def metas(self, doc_ids: Sequence[str]) -> dict[str, Mapping[str, Any]]:
        if not doc_ids:
            return {}
        found: dict[str, Mapping[str, Any]] = self.store.metas(NAMESPACE, doc_ids)
        return found

    def hit_meta(self, doc_id: str, meta: Mapping[str, Any]) -> Mapping[str, Any] | None:
        return meta

    def full(self, metas: Mapping[str, Mapping[str, Any]]) -> dict[str, EvidencePointer]:
        """Read from the evidence events of their blocks (one event per block)."""
        by_block: dict[int, set[str]] = {}
        for d, meta in metas.items():
            seq = meta.get("block")
            if isinstance(seq, int) and seq >= 0:
                by_block.setdefault(seq, set()).add(d.partition(":")[2])
        out: dict[str, EvidencePointer] = {}
        for seq, ids in sorted(by_block.items()):
            for ev in self.store.read(self.session_id, start=seq, stop=seq + 1):
                block = ev.data.get("block") if ev.kind == "evidence" else None
                evidence = block.get("evidence") if isinstance(block, Mapping) else None
                for raw in evidence if isinstance(evidence, list) else ():
                    pid = raw.get("id") if isinstance(raw, Mapping) else None
                    if pid in ids and doc_id(self.session_id, pid) not in out:
                        try:
                            out[doc_id(self.session_id, pid)] = EvidencePointer.from_dict(raw)
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

    def metas(self, doc_ids: Sequence[str]) -> dict[str, Mapping[str, Any]]:
        return {d: self._metas[d] for d in doc_ids if d in self._metas}

    def hit_meta(self, doc_id: str, meta: Mapping[str, Any]) -> Mapping[str, Any] | None:
        return self._metas.get(doc_id)

    def full(self, metas: Mapping[str, Mapping[str, Any]]) -> dict[str, EvidencePointer]:
        return {d: self._full[d] for d in metas if d in self._full}


def block_keys(
    session_id: str,
    block: CompactBlock,
    placed: Mapping[str, int],
    block_seq: int,
    positions: Mapping[str, int] | None = None,
) -> tuple[dict[str, list[str]], list[str], dict[str, dict[str, JSON]]]:
    """A block's keys by document, its session-wide words, and its documents' metadata
    (``placed``: from :meth:`Ords.place`; ``block_seq``: the seq of the block's event)."""
    keys: dict[str, list[str]] = {}
    metas: dict[str, dict[str, JSON]] = {}
    for p in block.evidence:
        ord_ = placed.get(p.id)
        if ord_ is not None:
            keys[doc_id(session_id, p.id)] = doc_keys(p, ord_)
            metas[doc_id(session_id, p.id)] = meta_of(p, ord_, block_seq, positions)
    return keys, block_terms(block), metas


def backfill(
    store: Any,
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
    ords = Ords()
    for seq, block in blocks:
        k, t, m = block_keys(session_id, block, ords.place(block), seq, positions)
        keys.update(k)
        terms.update(dict.fromkeys(t))
        metas.update(m)
    keys[terms_id(session_id)] = list(terms)
    with store.transaction() as txn:
        txn.add_keys(NAMESPACE, session_id, keys)
        txn.update_meta(NAMESPACE, metas)
        txn.put_doc(STATE_NAMESPACE, state_key(session_id), state.to_doc())
    return len(metas)


__all__ = [
    "NAMESPACE",
    "IndexState",
    "KeySource",
    "MemoryKeys",
    "Ords",
    "StoreKeys",
    "backfill",
    "block_keys",
    "block_terms",
    "cmd_key",
    "command_norms",
    "doc_keys",
    "failed",
    "fits",
    "longest_token",
    "meta_of",
    "rank_pointer",
    "search_docs",
    "term_keys",
]
