"""The documents one recall question meets and what its lookups found (for :mod:`.question`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..jsontypes import JSON
from .keys import rank_pointer
from .model import EvidencePointer
from .rank import QuerySpec


class Doc:
    """One document met by a question: what ranking reads of its pointer (``rank``, from the
    stored metadata; None for a tool output taken only to count an ordinal, known by a bare
    pointer until it is among the hits) and its place in the session's evidence. The pointer
    object is made when ranking asks for it (most documents met only count for recency)."""

    __slots__ = ("_pointer", "failed", "meta", "ord", "rank")

    def __init__(
        self,
        ord: int,
        *,
        meta: Mapping[str, JSON] | None = None,
        rank: Mapping[str, JSON] | None = None,
        failed: bool = False,
        pointer: EvidencePointer | None = None,
    ) -> None:
        self.ord = ord
        self.meta = meta
        self.rank = rank
        self.failed = failed
        self._pointer = pointer

    @property
    def pointer(self) -> EvidencePointer:
        if self._pointer is None:
            rank = self.rank or {}
            self._pointer = rank_pointer(rank) or EvidencePointer(
                id=str(rank.get("id")), created_at=self.created
            )
        return self._pointer

    @property
    def created(self) -> int:
        created = self.rank.get("createdAt") if self.rank is not None else None
        return created if type(created) is int else 0

    @property
    def call(self) -> str:
        """The tool call it answers (its own id for a message): what positions are of."""
        if self.rank is None:
            return self.pointer.tool_use_id or self.pointer.id
        use, own = self.rank.get("toolUseId"), self.rank.get("id")
        return use if isinstance(use, str) and use else str(own)

    @property
    def command(self) -> str:
        if self.rank is None:
            return self.pointer.command or ""
        command = self.rank.get("command")
        return command if isinstance(command, str) else ""


def doc_of(meta: Mapping[str, JSON] | None) -> Doc | None:
    rank = meta.get("rank") if meta is not None else None
    if meta is None or not isinstance(rank, Mapping) or not isinstance(rank.get("id"), str):
        return None
    ord_, fail = meta.get("ord"), meta.get("failed")
    if type(ord_) is not int or not isinstance(fail, bool):
        return None
    return Doc(ord_, meta=meta, rank=rank, failed=fail)


def ord_of(meta: Mapping[str, JSON]) -> int:
    ord_ = meta.get("ord")
    return ord_ if type(ord_) is int else -1


def after(key: str, prefix: str) -> tuple[str, str]:
    """``prefix<word> <rest>`` -> (word, rest)."""
    word, _, rest = key[len(prefix) :].partition(" ")
    return word, rest


@dataclass(kw_only=True, slots=True)
class Found:
    """What the lookups of one question found (documents by what led to them)."""

    by: Mapping[str, set[str]]
    #: normalized command -> its documents, and the word it is filed under
    commands: dict[str, set[str]] = field(default_factory=dict)
    filed: dict[str, str] = field(default_factory=dict)
    #: word -> commands ("cmdtok:") / anchors ("anctok:") that have it
    words_of: dict[str, set[str]] = field(default_factory=dict)
    anchor_words: dict[str, set[str]] = field(default_factory=dict)
    patterns: dict[str, set[str]] = field(default_factory=dict)
    exact: set[str] = field(default_factory=set)
    partial: set[str] = field(default_factory=set)
    #: commands named in part whose documents are still to be looked up
    more: set[str] = field(default_factory=set)
    #: anchor -> how many of the question's words it has
    anchors: dict[str, int] = field(default_factory=dict)
    strength: dict[str, int] = field(default_factory=dict)
    url_docs: set[str] = field(default_factory=set)
    pattern_docs: set[str] = field(default_factory=set)
    exc_docs: set[str] = field(default_factory=set)
    anchor_hits: dict[str, int] = field(default_factory=dict)
    #: doc -> (ord, failed, call id), every output, for an ordinal that names nothing
    outputs: dict[str, tuple[int, bool, str]] = field(default_factory=dict)
    tool_docs: set[str] = field(default_factory=set)
    err_docs: set[str] = field(default_factory=set)
    extra: dict[str, float] = field(default_factory=dict)
    #: outputs of the program kind asked for (a listing, an install, a linter), and the
    #: commands of that kind whose documents are still to be looked up
    kind_docs: set[str] = field(default_factory=set)
    kind_more: set[str] = field(default_factory=set)

    def docs_of(self, prefix: str, values: Iterable[str]) -> set[str]:
        return {d for v in values for d in self.by.get(prefix + v, ())}

    def strong(self) -> set[str]:
        """Documents found by a strong handle (a command, a path, a URL, a pattern, an error)."""
        paths = set(self.strength)
        named = self.exact | self.partial | paths | self.url_docs | self.pattern_docs
        return named | self.exc_docs | self.kind_docs

    def bulk(self, spec: QuerySpec) -> bool:
        """An ordinal that names nothing ("the first failing command"): every output counts."""
        named = self.exact or self.strength or self.exc_docs or self.kind_docs
        return spec.ordinal is not None and not named


def file_key(f: Found, key: str, ds: set[str]) -> None:
    """File one key of the first lookups under what it names."""
    if key.startswith("cmd:"):
        word, norm = after(key, "cmd:")
        f.commands.setdefault(norm, set()).update(ds)
        f.filed[norm] = word
    elif key.startswith("cmdtok:"):
        word, norm = after(key, "cmdtok:")
        f.words_of.setdefault(word, set()).add(norm)
    elif key.startswith("anctok:"):
        word, value = after(key, "anctok:")
        f.anchor_words.setdefault(word, set()).add(value)
    elif key.startswith("pat:"):
        _, pat = after(key, "pat:")
        f.patterns.setdefault(pat, set()).update(ds)


def preference(doc: Doc, wants_error: bool) -> float:
    """The preferences for tool results and failures as a factor; recency is applied at query time."""
    rank = doc.rank
    if rank is None:
        return 1.0
    factor = 1.0
    if rank.get("sourceScope") == "sub_agent":
        factor *= 1.15
    if rank.get("role") == "tool":
        factor *= 1.1
    if rank.get("errorish") is True:
        factor *= 1.2 if wants_error else 1.05
    if wants_error and doc.failed:
        factor *= 1.25
    return factor


__all__ = ["Doc", "Found", "after", "doc_of", "file_key", "ord_of", "preference"]
