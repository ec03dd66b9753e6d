"""A conversation the client compacted itself, recognized by content.

When an agent compacts its own history (Claude Code's auto-compact and ``/compact``), it asks
the model for a summary of the conversation (through the gateway, as one more turn of it) and
starts its next requests with that summary as the first user message. The gateway's
conversation key is made from the start of the conversation, so that request would open a new
session, which holds none of the old outputs. The rewrite is the client's own, of the same
conversation: the gateway recognizes it because the new first message holds the text of an
answer it relayed in the old conversation (line by line: a client may re-wrap it, as Claude
Code turns ``<summary>`` into ``Summary:``), and continues the old session, where the
request is reconciled as a rewrite (the summarized messages are retracted, kept and
recoverable).

What is recognized: at least half of the answer's lines of :data:`MIN_LINE` characters or
more, and :data:`MIN_MATCHED` characters of them, in the new conversation's first user
message, for the same provider credentials. The index is kept in memory (the last
:data:`MAX_LINES` answer lines) and, given a store, in the store too: each answer's line
digests are exact lookup keys (namespace :data:`NAMESPACE`, filed per credential hash) and its
conversation a document, so after a restart, or on another replica than the one that relayed
the summary, the continuation still finds the old session. A store that fails is logged and
left out: the continuation then opens a new session, as without one.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator

from ..core.messages import Message
from ..errors import ContextFoldError
from ..storage.base import Store
from .convert import Conversation
from .turn import log_event

#: a line shorter than this (after markup is taken out) is not evidence
MIN_LINE = 24
#: an answer shorter than this (characters in its long lines) is never looked for
MIN_MATCHED = 200
#: answer lines remembered (oldest forgotten first)
MAX_LINES = 50_000
#: conversation keys whose verdict is remembered
MAX_KEYS = 20_000

#: the store's namespace of the persisted index (keys and documents)
NAMESPACE = "gateway_continuations"
#: lines of a new conversation's first message looked up in the store at most
MAX_LOOKUP = 400

_TAG = re.compile(r"</?[A-Za-z][\w-]*>")


def _text(message: Message) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "\n".join(str(b.get("text")) for b in content or () if isinstance(b.get("text"), str))


def _lines(text: str) -> Iterator[tuple[str, int]]:
    """(digest, length) of the text's long lines, markup tags and outer spaces taken out."""
    for raw in text.splitlines():
        line = " ".join(_TAG.sub(" ", raw).split())
        if len(line) >= MIN_LINE:
            yield hashlib.blake2b(line.encode(), digest_size=12).hexdigest(), len(line)


class Continuations:
    """Answers the gateway relayed, by line, and the conversations found to continue one."""

    def __init__(self, store: Store | None = None) -> None:
        self._store = store
        self._mutex = threading.Lock()
        #: line digest -> (answer id, conversation key, credentials)
        self._lines: OrderedDict[str, tuple[str, str, str]] = OrderedDict()
        #: answer id -> (its long lines, their characters)
        self._answers: dict[str, tuple[int, int]] = {}
        #: conversation key -> the key it continues (itself when it continues none)
        self._verdicts: OrderedDict[str, str] = OrderedDict()

    def remember(self, key: str, identity: str, message: Message) -> None:
        """Index an answer relayed in conversation ``key``."""
        lines = dict(_lines(_text(message)))
        chars = sum(lines.values())
        if chars < MIN_MATCHED:
            return
        answer = hashlib.blake2b("|".join(sorted(lines)).encode(), digest_size=12).hexdigest()
        with self._mutex:
            self._answers[answer] = (len(lines), chars)
            for digest in lines:
                self._lines[digest] = (answer, key, identity)
                self._lines.move_to_end(digest)
            while len(self._lines) > MAX_LINES:
                self._lines.popitem(last=False)
            if len(self._answers) > MAX_KEYS:  # answers whose lines were all forgotten
                live = {a for a, _, _ in self._lines.values()}
                self._answers = {a: v for a, v in self._answers.items() if a in live}
        self._persist(key, identity, answer, lines, chars)

    def _persist(
        self, key: str, identity: str, answer: str, lines: dict[str, int], chars: int
    ) -> None:
        """The answer's lines as lookup keys of the credential, its conversation a document."""
        if self._store is None:
            return
        try:
            with self._store.transaction() as txn:
                txn.put_doc(
                    NAMESPACE, _doc_key(identity, answer), {"key": key, "n": len(lines), "c": chars}
                )
                txn.add_keys(NAMESPACE, _owner(identity), {answer: sorted(lines)})
        except ContextFoldError as exc:
            log_event("continuation_not_stored", conversation=key, why=str(exc))

    def _stored_hits(
        self, key: str, identity: str, lines: dict[str, int]
    ) -> dict[tuple[str, str], tuple[int, int]]:
        """(answer, conversation) -> (lines, characters) found in the store."""
        if self._store is None or not lines:
            return {}
        digests = sorted(lines)[:MAX_LOOKUP]
        try:
            found = self._store.lookup(NAMESPACE, session_id=_owner(identity), keys=digests)
            hits: dict[tuple[str, str], tuple[int, int]] = {}
            convs: dict[str, str | None] = {}
            for digest, answer in found:
                if answer not in convs:
                    doc = self._store.get_doc(NAMESPACE, _doc_key(identity, answer))
                    convs[answer] = self._learn(
                        answer, None if doc is None else dict[str, object](doc)
                    )
                old = convs[answer]
                if old is None or old == key:
                    continue
                n, chars = hits.get((answer, old), (0, 0))
                hits[(answer, old)] = (n + 1, chars + lines[digest])
            return hits
        except ContextFoldError as exc:
            log_event("continuation_not_read", conversation=key, why=str(exc))
            return {}

    def _learn(self, answer: str, doc: dict[str, object] | None) -> str | None:
        """The conversation of a stored answer (its size remembered here), None if unknown."""
        if doc is None:
            return None
        old, n, chars = doc.get("key"), doc.get("n"), doc.get("c")
        if not (isinstance(old, str) and isinstance(n, int) and isinstance(chars, int)):
            return None
        with self._mutex:
            self._answers.setdefault(answer, (n, chars))
        return old

    def resolve(self, key: str, identity: str, conv: Conversation) -> str:
        """The key of the conversation ``conv`` continues (``key`` itself when none)."""
        with self._mutex:
            known = self._verdicts.get(key)
        if known is not None:
            return known
        found = self._find(key, identity, conv)
        with self._mutex:
            self._verdicts[key] = found
            while len(self._verdicts) > MAX_KEYS:
                self._verdicts.popitem(last=False)
        if found != key:
            log_event("client_compaction_continued", conversation=found, new_key=key)
        return found

    def _find(self, key: str, identity: str, conv: Conversation) -> str:
        first = next((m for m in conv.neutral if m.role == "user"), None)
        if first is None:
            return key
        lines = dict(_lines(_text(first)))
        hits: dict[tuple[str, str], tuple[int, int]] = {}
        with self._mutex:
            for digest, length in lines.items():
                entry = self._lines.get(digest)
                if entry is None or entry[2] != identity or entry[1] == key:
                    continue
                n, chars = hits.get(entry[:2], (0, 0))
                hits[entry[:2]] = (n + 1, chars + length)
        if not hits:  # relayed before a restart, or by another replica
            hits = self._stored_hits(key, identity, lines)
        with self._mutex:
            best = None
            for (answer, old), (n, chars) in hits.items():
                total, _ = self._answers.get(answer, (0, 0))
                enough = total and 2 * n >= total and chars >= MIN_MATCHED
                if enough and (best is None or chars > best[1]):
                    best = (old, chars)
        return best[0] if best is not None else key


def _owner(identity: str) -> str:
    """The id the store files a credential's answer lines under."""
    return f"continuations:{identity}"


def _doc_key(identity: str, answer: str) -> str:
    return f"{identity}/{answer}"


__all__ = ["MAX_LINES", "MIN_LINE", "MIN_MATCHED", "NAMESPACE", "Continuations"]
