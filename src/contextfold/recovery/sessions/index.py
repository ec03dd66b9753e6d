"""Search and listing over every session of a store (``session_search``, ``session_list``).

Nothing here is a separate index any more: each message's index row is written with the
message itself (same unit of work, see :mod:`contextfold.recovery.sessions.log`), so the index can
never lag, duplicate or lose rows, and nothing is rebuilt on open. Ranking is the store's
BM25; snippets are cut from the stored message around the query words.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ...errors import StorageError
from ...jsontypes import to_int
from ...storage.base import Store
from ...storage.text import query_terms
from .log import INDEX_CHARS, INDEX_TOOL_CHARS, NAMESPACE, SessionMeta, entry_of
from .text import make_snippet, message_search_text


@dataclass(frozen=True, kw_only=True, slots=True)
class SearchHit:
    session_id: str
    agent_id: str
    seq: int
    role: str
    ts: str
    #: Matching text with the hits in [brackets] and … where text was cut.
    snippet: str
    #: Higher is better (BM25).
    score: float


class SessionIndex:
    """Session search and listing over a store."""

    def __init__(
        self,
        store: Store,
        *,
        before: Callable[[str | None, Sequence[str] | None], object] | None = None,
    ) -> None:
        self.store = store
        #: run before each search with its session (None: every session) and the agents it
        #: covers (None: all): the indexing jobs queued in the sessions searched (a long first
        #: request's rows, written later)
        self.before = before
        #: Warnings (damaged events skipped while making snippets), newest last.
        self.problems: list[str] = []

    def list_sessions(self, agent_id: str | None) -> list[SessionMeta]:
        infos = self.store.sessions(None if agent_id is None else [agent_id])
        return [SessionMeta.of(i) for i in infos]

    def session_agent(self, session_id: str) -> str | None:
        info = self.store.session(session_id)
        return info.agent_id if info is not None else None

    def search(
        self,
        query: str,
        *,
        agent_id: str | None = None,
        limit: int = 10,
        session_id: str | None = None,
        agent_ids: Sequence[str] | None = None,
    ) -> list[SearchHit]:
        scopes: Sequence[str] | None = agent_ids
        if agent_id is not None:
            scopes = [agent_id]
        if self.before is not None:
            self.before(session_id, scopes)
        hits = self.store.search(
            NAMESPACE, query, scopes=scopes, session_id=session_id, limit=limit
        )
        owners: dict[str, str] = {}
        terms = [w for w in query.split() if any(c.isalnum() for c in w)] + query_terms(query)
        out: list[SearchHit] = []
        for h in hits:
            if h.session_id not in owners:
                owners[h.session_id] = self.session_agent(h.session_id) or ""
            snippet = ""
            event = h.meta.get("event")
            if isinstance(event, int):
                try:
                    got = list(self.store.read(h.session_id, start=event, stop=event + 1))
                    if got:
                        msg = entry_of(got[0]).message
                        text = message_search_text(
                            msg, max_chars=INDEX_CHARS, max_tool_chars=INDEX_TOOL_CHARS
                        )
                        snippet = make_snippet(text, terms)
                except StorageError as exc:
                    self.problems.append(str(exc))
            out.append(
                SearchHit(
                    session_id=h.session_id,
                    agent_id=owners[h.session_id],
                    seq=to_int(h.meta.get("seq", -1)),
                    role=str(h.meta.get("role", "")),
                    ts=str(h.meta.get("ts", "")),
                    snippet=snippet,
                    score=round(h.score, 4),
                )
            )
        return out


__all__ = ["SearchHit", "SessionIndex"]
