"""Branch sessions that share their parent's history instead of storing it again.

A branch (a regenerated answer, two clients continuing one conversation another way) is a
session whose first ``fork_at`` events *are* its parent's first ``fork_at`` events: the store
records the parent and the fork point, and keeps only the events appended to the branch itself
(seq ``fork_at`` on). Every read of a branch composes the two: the parent's prefix (itself
possibly a branch of another session) and the branch's own events, numbered as one log. What a
branch costs is what is new in it, never the shared past again.

Deleting a parent keeps its branches whole: the part of the parent a branch still shares is
moved into the branch (and the branch re-linked to the parent's own parent) in the same
transaction that deletes the parent.

The functions here are the backend-independent arithmetic; each backend walks its own rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ..errors import StorageError
from .base import JSON, SearchHit

#: A chain of links, the session first: ``(session_id, fork_at)``, then its parent with the
#: parent's own fork point, up to a session that is no branch (fork point 0).
Chain = list[tuple[str, int]]

#: deepest chain of branches followed (a guard: a link never points to a newer session)
MAX_DEPTH = 10_000


def walk_chain(session_id: str, link: Callable[[str], tuple[str | None, int] | None]) -> Chain:
    """The chain of ``session_id`` given ``link(sid) -> (parent_id, fork_at)`` (None when the
    session does not exist: then the chain is the session alone)."""
    chain: Chain = []
    sid: str | None = session_id
    while sid is not None:
        found = link(sid)
        if found is None or found[0] is None:
            chain.append((sid, 0))
            return chain
        chain.append((sid, int(found[1])))
        sid = found[0]
        if len(chain) > MAX_DEPTH:
            raise StorageError(f"session {session_id!r}: its chain of branches does not end")
    return chain


def segments(chain: Sequence[tuple[str, int]], start: int, stop: int | None) -> list[Segment]:
    """Where the events ``start <= seq < stop`` of the chain's session are stored: ``(owner,
    lo, hi)`` ranges (``hi`` None: to the end), oldest first. Seq numbers are the same in
    every owner: a branch's own events start at its fork point."""
    out: list[Segment] = []
    upper = stop
    start = max(start, 0)
    for sid, fork_at in chain:
        lo = max(start, fork_at)
        if upper is None or lo < upper:
            out.append((sid, lo, upper))
        upper = fork_at if upper is None else min(upper, fork_at)
        if upper <= start:
            break
    out.reverse()
    return out


Segment = tuple[str, int, "int | None"]


def check_branch(
    session_id: str,
    parent_id: object,
    at: object,
    *,
    parent_events: int | None,
    parent_agent: str | None,
    agent_id: str,
) -> int:
    """The arguments of :meth:`Transaction.branch` checked the same way by every backend
    (``parent_events``/``parent_agent``: the parent's, None when it does not exist); returns
    the fork point."""
    if not isinstance(parent_id, str) or not parent_id:
        raise StorageError(f"branch {session_id!r}: parent must be a session id, got {parent_id!r}")
    if parent_id == session_id:
        raise StorageError(f"session {session_id!r} cannot be a branch of itself")
    if parent_events is None or parent_agent is None:
        raise StorageError(f"branch {session_id!r}: no parent session {parent_id!r}")
    if isinstance(at, bool) or not isinstance(at, int) or not 0 <= at <= parent_events:
        raise StorageError(
            f"branch {session_id!r}: fork point must be an integer 0-{parent_events} (the "
            f"events of {parent_id!r}), got {at!r}"
        )
    if parent_agent != agent_id:
        raise StorageError(
            f"branch {session_id!r}: its parent {parent_id!r} belongs to agent "
            f"{parent_agent!r}, not {agent_id!r}"
        )
    return at


def relink(
    parent_fork: int, grandparent: str | None, child_fork: int
) -> tuple[str | None, int, int, int]:
    """How a branch forked at ``child_fork`` from a parent that is being deleted (the parent
    forked at ``parent_fork`` from ``grandparent``, None for a root) keeps its history:
    ``(new parent, new fork point, copy from, copy to)``: the parent's own events
    ``copy_from <= seq < copy_to`` move into the branch (none when equal)."""
    if grandparent is None:
        return None, 0, 0, child_fork
    if child_fork <= parent_fork:
        return grandparent, child_fork, child_fork, child_fork
    return grandparent, parent_fork, parent_fork, child_fork


def shared_seq(meta: Mapping[str, JSON]) -> int | None:
    """The event an index document was made from, from its meta (``event``: a message's,
    ``block``: an evidence block's); None when it names none."""
    for key in ("event", "block"):
        value = meta.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _bounds(chain: Sequence[tuple[str, int]]) -> list[tuple[str, int | None]]:
    """Each owner of the chain with the seq its documents must be below to be part of the
    session's past (None: the session itself, all of its documents)."""
    out: list[tuple[str, int | None]] = []
    bound: int | None = None
    for sid, fork_at in chain:
        if bound is not None and bound <= 0:
            break
        out.append((sid, bound))
        bound = fork_at if bound is None else min(bound, fork_at)
    return out


def chain_search(
    chain: Sequence[tuple[str, int]],
    one: Callable[[str, int], list[SearchHit]],
    limit: int,
) -> list[SearchHit]:
    """A session-scoped search of a branch: its own documents, and its parents' documents made
    from events before the fork point (the shared past is indexed once, in the session that
    wrote it). ``one(owner, n)``: the backend's search of one session's documents."""
    hits: list[SearchHit] = []
    for sid, bound in _bounds(chain):
        if bound is None:
            hits += one(sid, limit)
            continue
        for hit in one(sid, limit * OVERFETCH):
            seq = shared_seq(hit.meta)
            if seq is not None and seq < bound:
                hits.append(
                    SearchHit(
                        doc_id=hit.doc_id, session_id=chain[0][0], score=hit.score, meta=hit.meta
                    )
                )
    hits.sort(key=lambda h: (-h.score, h.doc_id))
    return hits[:limit]


def chain_lookup(
    chain: Sequence[tuple[str, int]],
    one: Callable[[str], list[tuple[str, str]]],
    metas: Callable[[list[str]], Mapping[str, Mapping[str, JSON]]],
) -> list[tuple[str, str]]:
    """An exact lookup in a branch: its own keys, and its parents' keys of documents made
    before the fork point (``one(owner)``: the backend's lookup in one session)."""
    found: list[tuple[str, str]] = []
    for sid, bound in _bounds(chain):
        rows = one(sid)
        if bound is None:
            found += rows
            continue
        known = metas(list(dict.fromkeys(d for _, d in rows)))
        for key, doc_id in rows:
            seq = shared_seq(known.get(doc_id, {}))
            if seq is not None and seq < bound:
                found.append((key, doc_id))
    return sorted(set(found))


#: how many more hits a parent's search is asked for than the branch wants (some are from
#: after the fork point and are left out)
OVERFETCH = 4


class BranchSearch:
    """``search`` and ``lookup`` of a backend, branch-aware: the backend provides
    ``_chain_of(session_id)``, ``_search`` and ``_lookup`` (one session's documents, the
    arguments of :meth:`Store.search` / :meth:`Store.lookup`) and ``metas``."""

    def _chain_of(self, session_id: str) -> Chain:
        raise NotImplementedError

    def _search(
        self,
        namespace: str,
        query: str,
        *,
        scopes: Sequence[str] | None = None,
        session_id: str | None = None,
        limit: int = 10,
    ) -> list[SearchHit]:
        raise NotImplementedError

    def _lookup(
        self,
        namespace: str,
        *,
        session_id: str,
        keys: Sequence[str] = (),
        prefixes: Sequence[str] = (),
    ) -> list[tuple[str, str]]:
        raise NotImplementedError

    def metas(self, namespace: str, doc_ids: Sequence[str]) -> dict[str, dict[str, JSON]]:
        raise NotImplementedError

    def search(
        self,
        namespace: str,
        query: str,
        *,
        scopes: Sequence[str] | None = None,
        session_id: str | None = None,
        limit: int = 10,
    ) -> list[SearchHit]:
        """See :meth:`Store.search`; a branch's search covers its shared past too."""
        chain = self._chain_of(session_id) if session_id is not None else []
        if len(chain) > 1:
            return chain_search(
                chain,
                lambda sid, n: self._search(
                    namespace, query, scopes=scopes, session_id=sid, limit=n
                ),
                limit,
            )
        return self._search(namespace, query, scopes=scopes, session_id=session_id, limit=limit)

    def lookup(
        self,
        namespace: str,
        *,
        session_id: str,
        keys: Sequence[str] = (),
        prefixes: Sequence[str] = (),
    ) -> list[tuple[str, str]]:
        """See :meth:`Store.lookup`; a branch's lookup covers its shared past too."""
        chain = self._chain_of(session_id)
        if len(chain) > 1:
            return chain_lookup(
                chain,
                lambda sid: self._lookup(namespace, session_id=sid, keys=keys, prefixes=prefixes),
                lambda ids: self.metas(namespace, ids),
            )
        return self._lookup(namespace, session_id=session_id, keys=keys, prefixes=prefixes)


__all__ = [
    "MAX_DEPTH",
    "BranchSearch",
    "Chain",
    "Segment",
    "chain_lookup",
    "chain_search",
    "check_branch",
    "relink",
    "segments",
    "shared_seq",
    "walk_chain",
]
