"""Everything that makes compaction recoverable, for one session (a RecoveryContext): the
evidence index (restore, intent-triggered injection, ``recall``), the memory flush before a
compaction, the session and ``read_offloaded`` tools. Each hook is fail-open: a failure
here is recorded, never raised into the agent loop."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..core import telemetry
from ..core.anchors import Anchor
from ..core.messages import Message
from ..core.records import CompactionRecord, OffloadEntry, Tier
from ..core.scaffolding import strip_scaffolding
from ..core.tools import Tool, ToolBox
from ..errors import ContextFoldError, StorageError, ToolArgumentsError
from ..evidence.calls import load_calls
from ..evidence.fields import call_fields
from ..evidence.inject import build_injection
from ..evidence.intents import Intent, detect_intent
from ..evidence.model import CompactBlock, EvidencePointer
from ..evidence.rank import CallLog
from ..evidence.search import EvidenceSearch, Hit
from ..evidence.store import EvidenceStore
from ..evidence.tools import recall_tool
from ..jsontypes import JSON
from .context import RecoveryContext
from .deferred import DEFER_MIN, DeferredEvidence, recall_lines
from .memory import MemoryStore, choose_fact_extractor, memory_tools
from .memory_admin import memory_admin_tools
from .offload_tool import read_offloaded_tool
from .sessions.index import SessionIndex
from .sessions.tools import session_tools


@dataclass(frozen=True, kw_only=True, slots=True)
class RestoreHit:
    """One ranked result of ``ContextManager.restore``: the original text and its pointer."""

    pointer: EvidencePointer
    score: float
    text: str
    source: str
    sha256_ok: bool | None
    problem: str | None = None
    #: why recall picked it: what matched, which of several it is
    why: str = ""


class Recovery:
    def __init__(
        self,
        ctx: RecoveryContext,
        *,
        fact_extractor: object = None,
        view_tokens: Callable[[], int],
        compactions: Callable[[], int],
    ) -> None:
        self.ctx = ctx
        #: the view's tokens now (calibrated) and how many compactions ran, from the compactor
        self.view_tokens = view_tokens
        self.compactions = compactions
        self.problems: list[str] = []
        self._store: EvidenceStore | None = None
        self._search: EvidenceSearch | None = None
        self._index: SessionIndex | None = None
        # other sessions' queued jobs, run before a search of them (session, agents)
        self.index_before: Callable[[str | None, Sequence[str] | None], object] | None = None
        self._memory: MemoryStore | None = None
        self._toolbox: ToolBox | None = None
        self.fact_extractor = choose_fact_extractor(fact_extractor, ctx.summarizer)
        self._injection_key: tuple[str, int] | None = None
        self._injection: str | None = None
        self._intent_cache: tuple[str, Intent | None] | None = None
        self._calls = CallLog()
        self._calls_seen = 0
        #: history index -> its calls' fields as stored with the message (a reopened log)
        self.stored_calls: dict[int, JSON] = {}
        #: reads ``stored_calls`` the first time the call log is wanted (a lazy reopen)
        self.read_stored_calls: Callable[[], dict[int, JSON]] | None = None
        #: positions below this without stored calls make no calls (known from the heads)
        self.calls_known = 0
        #: the block of a range summarized by the running compaction, appended when it is done
        self._pending_block: CompactBlock | None = None
        #: history messages the public flush_memory() already extracted facts from
        self.memory_flushed = 0
        #: indexing deferred past the answer (a long first request), run before any read
        self.deferred = DeferredEvidence(self)

    def session_calls(self) -> CallLog:
        """Every tool call of the session in order (ordinals in recall questions count these,
        also the runs still in view); grown from the history on demand."""
        history = self.ctx.view.history
        if self.read_stored_calls is not None and self._calls_seen < len(history):
            self.stored_calls = self.read_stored_calls()  # kept for a retry if this fails
            self.read_stored_calls = None
        stored = self.stored_calls
        for i in range(self._calls_seen, len(history)):
            raw = stored.pop(i, None)
            if raw is None and i < self.calls_known:
                continue  # its head says it makes no calls
            known = load_calls(raw)
            if known is not None and i < self.calls_known:
                for call_id, fields in known:  # the head was written with the message
                    self._calls.add(call_id, fields)
                continue
            msg = history[i]
            if not msg.tool_calls:
                continue
            if known is not None and [c for c, _ in known] == [c.id for c in msg.tool_calls]:
                for call_id, fields in known:
                    self._calls.add(call_id, fields)
                continue
            for call in msg.tool_calls:
                self._calls.add(call.id, call_fields(call.name, call.arguments))
        self._calls_seen = len(history)
        return self._calls

    def note_problem(self, problem: str) -> None:
        self.problems.append(problem)

    # ------------------------------------------------------------------ lazy parts
    @property
    def enabled(self) -> bool:
        rc = self.ctx.config.recovery
        return rc is not None and rc.index_evidence

    @property
    def store(self) -> EvidenceStore:
        if self._store is None:
            self._store = EvidenceStore(
                self.ctx.session,
                transcript_lookup=self._transcript,
                offload_lookup=self._offloaded_bytes,
                # the call ids alone (from the view): what each call was about is read only
                # when a question counts calls
                call_positions=lambda: self.ctx.view.call_positions(),
            )
        return self._store

    def visible_uuids(self) -> set[str]:
        """Uuids of the messages the view shows as they are (not a placeholder, not folded
        into the summary): evidence of those is never injected."""
        return {
            m.uuid
            for m in self.ctx.view.view_messages()
            if not m.metadata.get("cf_replaced") and m.metadata.get("cf_kind") != "compaction"
        }

    @property
    def search(self) -> EvidenceSearch:
        if self.deferred.active:
            self.deferred.run()  # a query never runs on an index lacking what it should find
        if self._search is None:
            self._search = EvidenceSearch(
                self.store, calls=self.session_calls, visible=self.visible_uuids
            )
        self._search.sync()
        return self._search

    @property
    def memory(self) -> MemoryStore:
        if self._memory is None:
            self._memory = MemoryStore(
                self.ctx.session,
                read_agents=self.ctx.config.allow_agents,
                share=self.ctx.share_memory,
            )
        return self._memory

    @property
    def index(self) -> SessionIndex:
        if self.deferred.active:
            self.deferred.run()  # the full-text rows of a long first request
        if self._index is None:
            self._index = SessionIndex(self.ctx.store, before=self.index_before)
        return self._index

    def _offloaded_bytes(self, path: str) -> bytes | None:
        for store in self.ctx.stores():
            entry = store.find(path)
            if entry is not None:
                try:
                    return self.ctx.session.blob(entry.sha256)
                except StorageError:
                    return None
        return None

    def _transcript(self, message_uuid: str) -> str | None:
        idx = self.ctx.view.uuids.get(message_uuid)
        return None if idx is None else self.ctx.message_at(idx).text

    # ------------------------------------------------------------------ compaction hooks
    def before_summarize(self, msgs: Sequence[Message]) -> None:
        """Flush before compacting: facts go to memory before their messages leave the view."""
        if self.fact_extractor is None or not self.ctx.config.flushes_before_compact:
            return
        facts = self.fact_extractor.extract(list(msgs))
        if facts:
            self.memory.flush(facts)

    def index_range(
        self,
        removed: Sequence[Message],
        offloaded: Sequence[OffloadEntry],
        anchors: Sequence[Anchor],
        summary: str,
        tier: Tier,
    ) -> list[str]:
        if not self.enabled:
            return []
        items = [(a.type.value, item) for a in anchors for item in a.items()]
        self.flush_pending_block()
        if len(removed) >= DEFER_MIN or self.deferred.active:
            return self.deferred.defer_range(removed, items, summary, tier.value)
        block = self.store.build_compaction_block(
            messages=removed,
            offloaded=self.offload_map(removed),
            summary_items_source=items,
            known_calls=self.owners(removed),
            token_before=self.view_tokens(),
            token_after=0,
            boundary_uuid=None,
            natural_summary=summary,
            tier=tier.value,
            strategy="progressive",
        )
        # appended once the compaction is done (after_compaction), with the record's boundary
        # and token count; in the same unit of work
        self._pending_block = block
        return recall_lines(block)

    def owners(self, msgs: Sequence[Message]) -> list[Message]:
        """The assistant messages whose calls the tool results in ``msgs`` answer."""
        view = self.ctx.view
        seen: set[int] = set()
        out: list[Message] = []
        for m in msgs:
            idx = view.call_owner(m.tool_call_id) if m.tool_call_id else None
            if idx is not None and idx not in seen:
                seen.add(idx)
                out.append(view.history[idx])
        return out

    def offload_map(self, msgs: Sequence[Message]) -> dict[str, OffloadEntry]:
        entries = self.ctx.offload_entries()
        return {
            m.tool_call_id: entries[m.tool_call_id]
            for m in msgs
            if m.tool_call_id and m.tool_call_id in entries
        }

    def flush_pending_block(self, record: CompactionRecord | None = None) -> None:
        """Append the block of the latest summarized range, with ``record``'s boundary and
        tokens after the compaction when given."""
        block, self._pending_block = self._pending_block, None
        self.deferred.flush(record)
        if block is None:
            return
        if record is not None:
            block = dataclasses.replace(
                block,
                compact_boundary_uuid=record.boundary_uuid,
                token_after=record.tokens_after,
            )
        self.store.append_block(block)

    def index_ingest(self, index: int, entry: OffloadEntry) -> None:
        """A result offloaded on arrival left the view at once: make it evidence now."""
        if not self.enabled:
            return
        view = self.ctx.view
        msgs = [view.history[index]]
        if self.deferred.active:  # behind the queued indexing
            return self.deferred.queue_messages(
                msgs, boundary_uuid=msgs[0].uuid, strategy=entry.policy
            )
        try:
            self.store.index_compaction(
                messages=msgs,
                offloaded=self.offload_map(msgs),
                summary_items_source=[],
                known_calls=self.owners(msgs),
                token_before=0,
                token_after=0,
                boundary_uuid=msgs[0].uuid,
                natural_summary="",
                tier="none",
                strategy=entry.policy,
            )
        except ContextFoldError as exc:
            self.note_problem(f"evidence indexing failed: {exc}")

    def after_compaction(self, record: CompactionRecord) -> None:
        """Outputs a compaction offloaded but left in the view as a placeholder (any tier, not
        only warn) summarize nothing, yet what they moved out is evidence too. Those already
        indexed (offloaded inside a summarized range) are not indexed twice."""
        self.flush_pending_block(record)
        if not self.enabled or not record.offloaded:
            return
        offloaded = {e.tool_call_id for e in record.offloaded}
        wanted = offloaded - self.deferred.covered
        wanted -= self.store.indexed_calls(wanted)
        if not wanted:
            return
        view = self.ctx.view
        found = sorted(i for i in map(view.result_index, wanted) if i is not None)
        msgs = [view.history[i] for i in found]
        if self.deferred.active:  # behind the queued indexing
            return self.deferred.queue_messages(msgs, record=record)
        try:
            self.store.index_compaction(
                messages=msgs,
                offloaded=self.offload_map(msgs),
                summary_items_source=[],
                known_calls=self.owners(msgs),
                token_before=record.tokens_before,
                token_after=record.tokens_after,
                boundary_uuid=record.boundary_uuid,
                natural_summary="",
                tier=record.tier.value,
                strategy="offload",
            )
        except ContextFoldError as exc:
            self.note_problem(f"evidence indexing failed: {exc}")

    # ------------------------------------------------------------------ restore / inject
    def restore(self, query: str, k: int = 5) -> list[RestoreHit]:
        if not isinstance(query, str) or not query.strip():
            raise ToolArgumentsError("restore needs a non-empty query")
        out = []
        for hit in self.search.search(query, k=k):
            restored = self.store.restore(hit.pointer)
            out.append(
                RestoreHit(
                    pointer=hit.pointer,
                    score=hit.score,
                    text=restored.text,
                    source=restored.source,
                    sha256_ok=restored.sha256_ok,
                    problem=restored.problem,
                    why=hit.why,
                )
            )
        return out

    def _recent_failures(self, k: int) -> list[Hit]:
        """When the question names nothing searchable ("what was the exact error just now?",
        often in another language than the logs), the newest failures are the best answer."""
        shown = self.visible_uuids()
        failing = [
            p for p in self.search.recent_failures(k + len(shown)) if p.message_uuid not in shown
        ][:k]
        return [Hit(pointer=p, score=0.0, text_preview=p.preview) for p in failing]

    def add_subagent_output(
        self, run_id: str, messages_or_text: object, parent_message_uuid: str | None
    ) -> list[EvidencePointer]:
        from ..core.wire import from_openai

        payload = messages_or_text
        if not isinstance(payload, str | list | tuple):
            raise ToolArgumentsError(
                f"sub-agent output must be text or a list of messages, got {type(payload).__name__}"
            )
        if not isinstance(payload, str):
            payload = [from_openai(m, i) for i, m in enumerate(payload)]
        return self.store.add_subagent_output(run_id, payload, parent_message_uuid)

    def recover_tool_result(self, tool_call_id: str) -> str | None:
        for store in self.ctx.stores():
            if store.get(tool_call_id) is not None:
                try:
                    return store.read(tool_call_id)
                except StorageError as exc:
                    self.note_problem(str(exc))
        for p in self.search.by_call(tool_call_id):
            restored = self.store.restore(p)
            if restored.sha256_ok:
                return restored.text
        return None

    def injection_reserve(self) -> int:
        rc = self.ctx.config.recovery
        if rc is None or not rc.inject or self.compactions() == 0:
            return 0
        newest = self.ctx.view.newest_user
        if newest is None or self._intent(self.ctx.view.history[newest]) is None:
            return 0
        return int(rc.injection_budget_ratio * self.ctx.window)

    def _intent(self, msg: Message) -> Intent | None:
        """detect_intent, once per newest user message (prepare() is called every turn)."""
        if self._intent_cache is None or self._intent_cache[0] != msg.uuid:
            question = question_text(msg)
            self._intent_cache = (msg.uuid, detect_intent(question) if question else None)
        return self._intent_cache[1]

    def safe_injection(self) -> str | None:
        """:meth:`injection`, fail-open: an unreadable evidence store never breaks prepare()."""
        try:
            with telemetry.span("contextfold.evidence.inject") as current:
                text = self.injection()
                telemetry.set_attributes(
                    current, {"contextfold.injected.chars": len(text) if text else 0}
                )
                return text
        except (ContextFoldError, OSError, ValueError) as exc:
            self.note_problem(f"evidence injection skipped: {exc}")
            return None

    def injection(self) -> str | None:
        """Evidence for the newest user message, when it asks for it (intent-triggered)."""
        rc = self.ctx.config.recovery
        view = self.ctx.view
        if rc is None or not rc.inject or view.newest_user is None:
            return None
        if rc.inject_requires_summary and view.compaction is None:
            return None  # no compact summary in the view yet
        msg = view.history[view.newest_user]
        intent = self._intent(msg)  # cached per message: the common case does no I/O at all
        if intent is None:
            return None
        blocks = self.store.state().blocks
        if self.compactions() == 0 and not blocks:
            return None
        key = (msg.uuid, blocks)
        if key == self._injection_key:
            return self._injection
        text: str | None = None
        try:
            question = question_text(msg)
            hits = self.search.search(question, k=5, removed_only=True) or self._recent_failures(3)
            text = build_injection(
                question,
                hits,
                self.store.restore,
                budget_tokens=int(rc.injection_budget_ratio * self.ctx.window),
                count_tokens=self.ctx.counter.count_text,
                intent=intent,
            )
        except ContextFoldError as exc:
            self.note_problem(f"evidence injection failed: {exc}")
        self._injection_key, self._injection = key, text
        return text

    # ------------------------------------------------------------------ tools
    @property
    def toolbox(self) -> ToolBox:
        if self._toolbox is None:
            box = ToolBox([self._read_offloaded_tool()])
            for tool in session_tools(
                lambda: self.index,  # opened when a session tool runs
                agent_id=self.ctx.agent_id,
                allow_agents=self.ctx.config.allow_agents,
            ):
                box.register(tool)
            for tool in [
                *memory_tools(self.memory),
                *memory_admin_tools(self, self.ctx.units, lambda: list(self.ctx.view.history)),
            ]:
                box.register(tool)
            box.register(recall_tool(lambda: self.search, self.store))  # read when first used
            self._toolbox = box
        return self._toolbox

    def _read_offloaded_tool(self) -> Tool:
        return read_offloaded_tool(self.ctx.stores)

    def forget_session(self) -> None:
        self._store = None
        self._search = None
        self._calls = CallLog()
        self._calls_seen = 0
        self.stored_calls = {}
        self.read_stored_calls = None
        self.calls_known = 0
        self._injection_key = None
        self._injection = None
        self._intent_cache = None


def question_text(msg: Message) -> str:
    """The user's question in ``msg``: the agent's scaffolding (Claude Code's reminders,
    Codex's environment context, ...) cut, so it is never the evidence query."""
    return strip_scaffolding(msg.text)
