"""Reconciling a client's request with a stored session by content.

A client's request is its current view of the conversation. Most turns it is the stored
conversation plus what is new; but clients that own their prompt rewrite it: aider summarizes
old turns (``ChatSummary``: the oldest turns become one "I spoke to you previously about a
number of things" message) and rebuilds its files block after the conversation every turn
(with the reminder stuffed into the newest user message, which is resent without it the next
turn); Claude Code changes its ``<system-reminder>`` blocks and compacts; mini-swe-agent adds
format reminders. :func:`plan` tells which of three things a request is, against the stored
conversation's fingerprints *as the client last had it* (retracted messages left out, the
answer not written yet included):

- ``append``: the stored conversation is a prefix of the request (the common case, O(new));
- ``rewrite``: the client kept part of the stored conversation, in order, and dropped or
  replaced the rest itself: it still holds the stored newest message (moved after rewritten
  ones, or kept), or it replaced older turns (its own compaction, an edited old message).
  The session continues: the dropped messages are retracted (kept, recoverable) and the rest
  of the request appended;
- ``fork``: the same past continued another way: the request keeps the stored conversation
  up to its newest user request and continues differently after it (a regenerated answer, a
  second client answering the same request), or it continues what an earlier rewrite of this
  session retracted (the other line of a conversation two clients continue). Only then a
  branch is made.

The history is append-only, so what the request has after its first message that is not in
the stored conversation (in order) is appended, copies of stored messages included (aider's
previous answer, after its rewritten request).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence, Set
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from .convert import Conversation

Kind = Literal["append", "rewrite", "fork"]


@dataclass(frozen=True, slots=True)
class Plan:
    kind: Kind
    #: request messages kept from the stored conversation (request[:kept] are stored)
    kept: int
    #: indices (into the stored conversation given to :func:`plan`) the client dropped
    dropped: list[int] = field(default_factory=list)
    #: indices of the stored conversation matched by request[:kept], in order
    matched: Sequence[int] = field(default_factory=list)
    #: for a fork: messages the request shares with the stored conversation from the start
    common: int = 0


#: fingerprints compared per slice by :func:`common_prefix` (in C) before the loop in Python
_BLOCK = 512


def common_prefix(a: Sequence[str], b: Sequence[str]) -> int:
    """How many leading fingerprints ``a`` and ``b`` share. Compared a block at a time as
    list slices (in C; the same string objects compare by identity), so a long history
    costs no loop in Python."""
    n = min(len(a), len(b))
    i = 0
    if isinstance(a, list) and isinstance(b, list):
        while i < n:
            j = min(n, i + _BLOCK)
            if a[i:j] != b[i:j]:
                break
            i = j
    while i < n and a[i] == b[i]:
        i += 1
    return i


def plan(
    stored: Sequence[str],
    request: Sequence[str],
    *,
    newest_user: int = -1,
    retracted: Set[str] = frozenset(),
) -> Plan:
    """How ``request`` (fingerprints) continues ``stored`` (fingerprints of the conversation
    as the client last had it). ``newest_user``: the index in ``stored`` of its newest user
    message (-1: none); ``retracted``: fingerprints of the messages earlier rewrites of the
    session took out."""
    k = common_prefix(stored, request)
    if k == len(stored):
        return Plan("append", kept=k, matched=range(k))
    # the longest prefix of the request that is a subsequence of the stored conversation
    # (greedy, leftmost: identical messages such as aider's "Ok." replies match the earliest)
    where: dict[str, list[int]] = {}
    for i, fp in enumerate(stored):
        where.setdefault(fp, []).append(i)
    matched: list[int] = []
    j = 0
    for fp in request:
        found = where.get(fp)
        if not found:
            break
        at = bisect.bisect_left(found, j)
        if at == len(found):
            break
        matched.append(found[at])
        j = found[at] + 1
    kept = len(matched)
    taken = set(matched)
    dropped = [i for i in range(len(stored)) if i not in taken]
    newest = len(stored) - 1
    rest = set(request[kept:])
    if newest in taken or stored[newest] in rest:
        return Plan("rewrite", kept=kept, dropped=dropped, matched=matched)
    resumes = kept < len(request) and request[kept] in retracted
    if resumes or (k == kept and k > newest_user >= 0):
        return Plan("fork", kept=kept, dropped=dropped, matched=matched, common=k)
    return Plan("rewrite", kept=kept, dropped=dropped, matched=matched)


def at_a_cut(p: Plan, conv: Conversation) -> Plan:
    """``p`` with its kept part ending where the history may continue: a tool result the
    client changed (an old output it cleared or shortened) is appended with the assistant
    message that made the call, the stored ones retracted (a result follows its call)."""
    kept = p.kept
    while kept > 0 and kept < len(conv.neutral) and conv.neutral[kept].role == "tool":
        kept -= 1
    if kept == p.kept:
        return p
    matched = p.matched[:kept]
    taken = set(matched)
    dropped = sorted({*p.dropped, *(i for i in p.matched[kept:] if i not in taken)})
    return replace(p, kept=kept, matched=matched, dropped=dropped)


__all__ = ["Kind", "Plan", "at_a_cut", "common_prefix", "plan"]
