"""Bringing back what left the view, through the library's own restore paths: an offloaded
tool result (its blob, checked against the sha256 its entry holds), an evidence item (the
evidence store's restore, which checks the pointer's sha256), a message of the log, and the
evidence index searched as ``recall`` would."""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict
from typing import Any

from ..core.paths import check_session_id
from ..engine.manager import ContextManager
from ..engine.session_ops import get_session, show_session
from ..errors import ConfigError, StorageError, UnsafeIdError
from ..jsontypes import JSONObject
from ..recovery.memory import NAMESPACE as MEMORY_NAMESPACE
from ..recovery.memory import SHARED_SCOPE
from ..storage import Store

EVIDENCE_ID = re.compile(r"^ev-[0-9a-f]{6,64}$")
#: a tool call id as providers write them
CALL_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,200}$")
#: the most characters one restore returns (a bigger body says so and is cut)
MAX_TEXT = 2_000_000
#: the most hits a recall or memory search returns
MAX_HITS = 50
MAX_QUERY = 500
#: sessions whose manager is kept open between requests
CACHED = 4


def sha256_of(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def checked_query(query: str) -> str:
    q = query.strip()
    if not q:
        raise ConfigError("the search needs some words")
    if len(q) > MAX_QUERY:
        raise ConfigError(f"a search is at most {MAX_QUERY} characters, got {len(q)}")
    return q


def checked_k(k: int) -> int:
    if not 1 <= k <= MAX_HITS:
        raise ConfigError(f"k must be between 1 and {MAX_HITS}, got {k}")
    return k


def _body(text: str, expected: str | None, source: str, ok: bool | None) -> dict[str, Any]:
    actual = sha256_of(text)
    if ok is None and expected:
        ok = actual == expected
    return {
        "text": text[:MAX_TEXT],
        "truncated": len(text) > MAX_TEXT,
        "chars": len(text),
        "sha256": actual,
        "expected_sha256": expected,
        "sha256_ok": ok,
        "source": source,
    }


class Recoverer:
    """Read-only ContextManagers over one store, reopened when their session has grown."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._open: OrderedDict[str, tuple[int, ContextManager]] = OrderedDict()

    def manager(self, session_id: str) -> ContextManager:
        try:
            check_session_id(session_id)
        except UnsafeIdError as exc:
            raise ConfigError(str(exc)) from None
        info = get_session(self.store, session_id)
        head = self.store.head(session_id)
        with self._lock:
            got = self._open.get(session_id)
            if got is not None and got[0] == head:
                self._open.move_to_end(session_id)
                return got[1]
            cm = ContextManager(store=self.store, session_id=session_id, agent_id=info.agent_id)
            self._open[session_id] = (head, cm)
            while len(self._open) > CACHED:
                self._open.popitem(last=False)[1][1].close()
            return cm

    def forget(self, session_id: str) -> None:
        with self._lock:
            got = self._open.pop(session_id, None)
        if got is not None:
            got[1].close()

    def restore_offload(self, session_id: str, tool_call_id: str) -> JSONObject:
        if not CALL_ID.match(tool_call_id):
            raise ConfigError(f"not a tool call id: {tool_call_id[:80]!r}")
        cm = self.manager(session_id)
        for store in (cm.offload, cm.eviction_store):
            entry = store.get(tool_call_id)
            if entry is None:
                continue
            try:
                text = store.read(tool_call_id)
            except StorageError as exc:
                return {"error": str(exc), "sha256_ok": False, "expected_sha256": entry.sha256}
            body = _body(text, entry.sha256, f"offload {entry.path}", None)
            body["path"] = entry.path
            return body
        raise ConfigError(f"no offloaded result for tool call {tool_call_id!r} in {session_id!r}")

    def restore_evidence(self, session_id: str, evidence_id: str) -> JSONObject:
        if not EVIDENCE_ID.match(evidence_id):
            raise ConfigError(f"not an evidence id: {evidence_id[:80]!r}")
        cm = self.manager(session_id)
        pointer = cm.recovery.search.get(evidence_id)
        if pointer is None:
            raise ConfigError(f"no evidence {evidence_id!r} in session {session_id!r}")
        restored = cm.recovery.store.restore(pointer)
        body = _body(restored.text, pointer.sha256, restored.source, restored.sha256_ok)
        body["problem"] = restored.problem
        body["command"] = pointer.command
        return body

    def message(self, session_id: str, position: int) -> JSONObject:
        """A message of the log as stored (the full history is never changed)."""
        info = get_session(self.store, session_id)
        if not 0 <= position < info.messages:
            raise ConfigError(
                f"session {session_id!r} has messages 0-{info.messages - 1}; no message {position}"
            )
        entry = show_session(self.store, session_id, start=position, stop=position + 1)[0]
        msg = entry.message
        text = msg.text
        calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in msg.tool_calls]
        body = _body(text, None, "log", None)
        body.update(
            {"position": position, "role": msg.role, "tool_calls": calls, "uuid": entry.uuid}
        )
        return body

    def recall(self, session_id: str, query: str, k: int) -> list[JSONObject]:
        """The evidence index searched as ``recall`` (and ``contextfold restore``) would."""
        cm = self.manager(session_id)
        hits = cm.restore(checked_query(query), k=checked_k(k))
        return [
            {
                "id": h.pointer.id,
                "score": round(h.score, 4),
                "command": h.pointer.command,
                "tool_call_id": h.pointer.tool_use_id,
                "types": list(h.pointer.content_types),
                "source": h.source,
                "sha256_ok": h.sha256_ok,
                "text": h.text[:4000],
                "chars": len(h.text),
            }
            for h in hits
        ]

    def memory(self, session_id: str, query: str = "", k: int = 20) -> list[JSONObject]:
        """The memory facts this session's agent reads (ranked by ``query`` when given)."""
        cm = self.manager(session_id)
        if query.strip():
            hits = cm.recovery.memory.search(checked_query(query), limit=checked_k(k))
            return [{"topic": h.topic, "kind": h.kind, "text": h.text} for h in hits]
        agent = cm.agent_id
        facts: list[dict[str, Any]] = []
        for scope in (agent, SHARED_SCOPE):
            docs = self.store.docs(MEMORY_NAMESPACE, prefix=f"agent:{scope}/")
            facts.extend(docs.values())
        facts.sort(key=lambda f: str(f.get("ts", "")))
        return [
            {
                "topic": str(f.get("file") or "misc.md")[:-3],
                "kind": str(f.get("kind", "")),
                "text": str(f.get("text", "")),
            }
            for f in facts[-checked_k(k) :]
        ]

    def close(self) -> None:
        with self._lock:
            items = list(self._open.values())
            self._open.clear()
        for _, cm in items:
            cm.close()
