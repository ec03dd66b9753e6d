"""Memory by hand: extract facts from given messages, flush the session's facts now, add /
edit / delete one fact. Works whatever the compaction settings (memory does not wait for a
summary); the agent gets the same as the ``memory_add`` / ``memory_edit`` / ``memory_delete`` /
``memory_flush`` tools.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from ..core.messages import Message
from ..core.tools import Tool
from ..core.units import Units
from ..core.wire import from_openai
from ..errors import ToolArgumentsError
from .memory import MemoryStore, StoredFact
from .memory_extract import KINDS, ExtractiveFactExtractor, Fact, FactExtractor


class MemoryOwner(Protocol):
    """Whose memory the calls work on (a session's recovery): its store, its fact extractor
    (None: automatic extraction is off), and how far the session's messages were flushed."""

    memory_flushed: int

    @property
    def memory(self) -> MemoryStore: ...

    @property
    def fact_extractor(self) -> FactExtractor | None: ...


class MemorySession(Protocol):
    """An open session as the memory calls see it."""

    units: Units

    @property
    def recovery(self) -> MemoryOwner: ...


def _messages(items: Iterable[Mapping[str, object] | Message]) -> list[Message]:
    out: list[Message] = []
    for i, item in enumerate(items):
        if isinstance(item, Message):
            out.append(item)
        elif isinstance(item, Mapping):
            out.append(from_openai(item, i))
        else:
            raise ToolArgumentsError(
                f"message {i}: expected a message dict or Message, got {type(item).__name__}"
            )
    return out


def extractor_of(owner: MemoryOwner) -> FactExtractor:
    """The session's fact extractor; the extractive one when automatic extraction is off."""
    chosen = owner.fact_extractor
    return chosen if chosen is not None else ExtractiveFactExtractor()


def extract_facts(
    owner: MemoryOwner,
    units: Units,
    messages: Iterable[Mapping[str, object] | Message],
    *,
    store: bool = True,
) -> list[Fact]:
    """The facts of ``messages``; stored in the agent's memory when ``store``."""
    msgs = _messages(messages)
    facts = extractor_of(owner).extract(msgs)
    if store and facts:
        with units.unit():
            owner.memory.flush(facts)
    return facts


def flush_memory(owner: MemoryOwner, units: Units, history: Callable[[], list[Message]]) -> int:
    """Extract the facts of the session's messages not flushed by this call before and store
    them now; how many facts were new."""
    with units.lock:
        messages = history()
        start = min(owner.memory_flushed, len(messages))
        facts = extractor_of(owner).extract(messages[start:])
        new = 0
        with units.unit():
            if facts:
                new = owner.memory.flush(facts)
        owner.memory_flushed = len(messages)
        return new


def memory_admin_tools(
    owner: MemoryOwner, units: Units, history: Callable[[], list[Message]]
) -> list[Tool]:
    """``memory_add`` {text, kind?, topic?}, ``memory_edit`` {id, text, kind?, topic?},
    ``memory_delete`` {id}, ``memory_flush`` {}."""

    def unit(fn: Callable[[], str]) -> str:
        with units.unit():
            return fn()

    def text_arg(args: Mapping[str, object], name: str, key: str) -> str:
        value = args.get(key)
        if not isinstance(value, str) or not value.strip():
            raise ToolArgumentsError(f"{name}: {key!r} must be a non-empty string")
        return value

    def opt(args: Mapping[str, object], name: str, key: str) -> str | None:
        value = args.get(key)
        if value is not None and not isinstance(value, str):
            raise ToolArgumentsError(f"{name}: {key!r} must be a string")
        return value or None

    def memory_add(args: Mapping[str, object]) -> str:
        text = text_arg(args, "memory_add", "text")
        kind = opt(args, "memory_add", "kind") or "conclusion"
        topic = opt(args, "memory_add", "topic")
        fid = unit(lambda: owner.memory.add(text, kind=kind, topic=topic))
        return f"Stored fact {fid}."

    def memory_edit(args: Mapping[str, object]) -> str:
        fid = text_arg(args, "memory_edit", "id")
        text = text_arg(args, "memory_edit", "text")
        kind = opt(args, "memory_edit", "kind")
        topic = opt(args, "memory_edit", "topic")
        new = unit(lambda: owner.memory.edit(fid, text, kind=kind, topic=topic))
        return f"Fact {fid} now reads as given (id {new})."

    def memory_delete(args: Mapping[str, object]) -> str:
        fid = text_arg(args, "memory_delete", "id")
        with units.unit():
            owner.memory.delete(fid)
        return f"Deleted fact {fid}."

    def memory_flush(args: Mapping[str, object]) -> str:
        return f"{flush_memory(owner, units, history)} new fact(s) stored from this session."

    kinds = list(KINDS)
    fact_props: dict[str, Any] = {
        "text": {"type": "string", "description": "The fact, one sentence."},
        "kind": {"type": "string", "enum": kinds, "description": "Kind (conclusion)."},
        "topic": {"type": "string", "description": "Topic file (by kind when omitted)."},
    }
    id_prop = {"type": "string", "description": "The fact's id (memory_search shows it)."}
    return [
        Tool(
            name="memory_add",
            description="Store a fact in long-term memory.",
            parameters={"type": "object", "properties": fact_props, "required": ["text"]},
            handler=memory_add,
        ),
        Tool(
            name="memory_edit",
            description="Correct a fact of long-term memory by its id.",
            parameters={
                "type": "object",
                "properties": {"id": id_prop, **fact_props},
                "required": ["id", "text"],
            },
            handler=memory_edit,
        ),
        Tool(
            name="memory_delete",
            description="Remove a fact from long-term memory by its id.",
            parameters={"type": "object", "properties": {"id": id_prop}, "required": ["id"]},
            handler=memory_delete,
        ),
        Tool(
            name="memory_flush",
            description="Extract the facts of this session so far into long-term memory now.",
            parameters={"type": "object", "properties": {}, "required": []},
            handler=memory_flush,
        ),
    ]


class MemoryCalls:
    """The ContextManager's memory calls (a mixin over its open session, ``_ctx``)."""

    _ctx: MemorySession

    def extract_facts(
        self, messages: Iterable[Mapping[str, object] | Message], *, store: bool = True
    ) -> list[Fact]:
        """The facts (requirements, configuration, file changes, conclusions, constraints) of
        ``messages`` (OpenAI dicts or Messages), stored in this agent's memory unless
        ``store=False``. Works with compaction off."""
        ctx = self._ctx
        return extract_facts(ctx.recovery, ctx.units, messages, store=store)

    def flush_memory(self) -> int:
        """Store the facts of this session's messages now (those not flushed by an earlier
        call); how many were new. Works with compaction off."""
        ctx = self._ctx
        return flush_memory(ctx.recovery, ctx.units, self._history)

    def _history(self) -> list[Message]:
        raise NotImplementedError  # the manager gives its (reloaded) history

    def add_fact(self, text: str, *, kind: str = "conclusion", topic: str | None = None) -> str:
        """Store one fact in this agent's memory; its id."""
        with self._ctx.units.unit():
            return self._ctx.recovery.memory.add(text, kind=kind, topic=topic)

    def edit_fact(
        self,
        fact_id: str,
        text: str,
        *,
        kind: str | None = None,
        topic: str | None = None,
    ) -> str:
        """Replace a fact's text (and kind / topic); its id (new when the text changed)."""
        with self._ctx.units.unit():
            return self._ctx.recovery.memory.edit(fact_id, text, kind=kind, topic=topic)

    def delete_fact(self, fact_id: str) -> None:
        """Remove a fact from this agent's memory."""
        with self._ctx.units.unit():
            self._ctx.recovery.memory.delete(fact_id)

    def facts(self) -> list[StoredFact]:
        """The facts this agent can read, oldest first."""
        with self._ctx.units.lock:
            return self._ctx.recovery.memory.facts()


__all__ = [
    "MemoryCalls",
    "MemoryOwner",
    "MemorySession",
    "extract_facts",
    "extractor_of",
    "flush_memory",
    "memory_admin_tools",
]
