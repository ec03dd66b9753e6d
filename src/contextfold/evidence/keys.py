"""The exact keys of evidence documents: what a question can name, filed in the store next to
the BM25 index (:meth:`contextfold.storage.base.Store.lookup`), and the metadata ranking reads.

Every pointer's search document carries its keys, written with its block in the same unit of
work; the words that lead to a command or an anchor are filed once per session, under the id
``<session>:#terms``. Keys of one session (namespace ``"evidence"``)::

    cmd:<longest word> <command>   a normalized command, and its first line
    anc:<anchor>                   an anchor's value, lowercased (4 characters or more)
    path:<suffix>  full:<path>     every suffix of a path the call named; the whole path
    url:<url>  tool:<name>  exc:<ExceptionType>  call:<tool call id>
    pat:<longest word> <pattern>   a search pattern, as lowercase words
    out:<0|1><ord> <call id>       a tool output in evidence order (1: it failed)
    err:<created_at>               an output showing an error, a stack trace or test output
    under <session>:#terms:  cmdtok:<word> <command>, anctok:<word> <anchor>, tools:<name>

``ord`` numbers the calls the documents answer, in evidence order (:class:`Ords`). A
document's meta (:func:`meta_of`) holds what ranking reads of its pointer, its ``ord``, the
call's position in the session when known, and the seq of its block's event. The whole pointer
of each document is also a small document of its own (``evidence/<session>/ev/<id>``,
:func:`pointer_key`), read for the hits only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import cast

from ..jsontypes import JSON
from ..storage.base import MAX_KEY_BYTES, SearchDoc
from .classify import normalize_command
from .fields import command_head, is_own_tool, path_suffixes, pattern_key
from .model import CompactBlock, EvidencePointer
from .text import tokenize

NAMESPACE = "evidence"
#: Documents namespace of the per-session index state (:class:`.lookups.IndexState`).
STATE_NAMESPACE = "evidence"
ERROR_TYPES = frozenset({"stack_trace", "error", "test_output"})


def doc_id(session_id: str, pointer_id: str) -> str:
    return f"{session_id}:{pointer_id}"


def terms_id(session_id: str) -> str:
    return f"{session_id}:#terms"


def state_key(session_id: str) -> str:
    return f"{session_id}/index"


def pointer_key(session_id: str, pointer_id: str) -> str:
    """The document holding a pointer whole (for the hits: ranking reads the meta only)."""
    return f"{session_id}/ev/{pointer_id}"


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


def rank_pointer(rank: Mapping[str, JSON]) -> EvidencePointer | None:
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
        or any(type(x) is not str for x in cast("list[JSON]", patterns))
        or scope not in ("main_agent", "sub_agent")
    ):
        return None
    return EvidencePointer(
        id=pid,
        tool_use_id=cast("str | None", use),
        command=cast("str | None", command),
        tool_name=cast("str | None", tool),
        role=role,
        created_at=created,
        patterns=tuple(cast("list[str]", patterns)),
        lines=cast("str | None", lines),
        action=cast("str | None", action),
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


def command_key(command: str | None) -> str:
    """One index token standing for a normalized command (finds every run of it)."""
    norm = normalize_command(command or "")
    if not norm:
        return ""
    return "cmdx" + hashlib.sha256(norm.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def block_terms(block: CompactBlock) -> list[str]:
    return list(dict.fromkeys(k for p in block.evidence if indexed(p) for k in term_keys(p)))


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


__all__ = [
    "ERROR_TYPES",
    "NAMESPACE",
    "STATE_NAMESPACE",
    "Ords",
    "anchor_values",
    "block_keys",
    "block_terms",
    "cmd_key",
    "command_key",
    "command_norms",
    "doc_id",
    "doc_keys",
    "failed",
    "fits",
    "indexed",
    "longest_token",
    "meta_of",
    "pointer_key",
    "rank_pointer",
    "search_docs",
    "state_key",
    "term_keys",
    "terms_id",
]
