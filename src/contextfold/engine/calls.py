"""The facade's calls on records, agent tools, evidence and the session state (a mixin of
:class:`~contextfold.ContextManager`): each one runs under the session's lock or in one unit
of work, and delegates to the open session's parts."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from ..core import telemetry
from ..core.records import CompactionRecord, OffloadEntry, Tier
from ..core.tools import ToolBox
from ..core.usage import extract_input_tokens
from ..errors import ConfigError, ContextFoldError
from ..evidence.model import EvidencePointer
from ..jsontypes import JSON, JSONObject, need_object, to_json
from ..recovery.hooks import RestoreHit
from . import ahead
from . import overflow as overflow_handling
from . import prepare as preparing
from .context import SessionContext
from .prepare import ToolSchemas
from .reopen import save_state
from .state import SessionState
from .state import save_state as save_session_snapshot


class SessionCalls:
    """Records, tools, evidence and state of the open session ``_ctx``; the window, the
    calibration, manual compaction and overflow recovery."""

    _ctx: SessionContext
    on_compaction: Callable[[CompactionRecord], None] | None

    def _announce(self, record: CompactionRecord) -> None:
        """After the compaction's unit committed."""
        if record.changed and self.on_compaction is not None:
            self.on_compaction(record)

    def reset_window(self) -> None:
        """Forget a window learned from overflow errors (e.g. after switching to a bigger
        model): ``context_window`` applies again."""
        with self._ctx.units.lock:
            self._ctx.set_window(None)
            try:
                with self._ctx.units.unit():
                    save_state(self._ctx)
            except ContextFoldError as exc:
                self._ctx.recovery.note_problem(f"saving compactor state failed: {exc}")

    # ------------------------------------------------------------------ manual compaction
    def compact(self, force: bool = True, *, tier: str | Tier | None = None) -> CompactionRecord:
        """Manual /compact. ``force=True`` summarizes the whole head now with the configured
        summarizer (Full tier) whatever the ratio, or with ``manual_compact="emergency"`` runs
        CompactForce (the emergency tier); ``tier="emergency"`` truncates without an LLM
        (forced compaction); ``force=False`` runs the normal tier decision."""
        with self._ctx.units.lock:
            overflow_handling.manual_tier(self._ctx, force, tier)  # bad input: nothing done
            record = overflow_handling.compact(self._ctx, force, tier)
        self._announce(record)
        return record

    # ------------------------------------------------------------------ compaction ahead
    def _fresh(self) -> None:
        raise NotImplementedError  # the facade's: reload after a write that could not

    def compaction_due(
        self, lookahead_tokens: int = 0, *, tools: ToolSchemas | None = None
    ) -> bool:
        """Whether the next :meth:`prepare` would compact, its turn adding ``lookahead_tokens``."""
        ctx = self._ctx
        with ctx.units.lock:
            self._fresh()
            extra = ctx.extra_tokens(tools) + max(0, lookahead_tokens)
            return ahead.due(ctx.compactor, ctx.config, extra + ctx.recovery.injection_reserve())

    def compact_ahead(
        self, lookahead_tokens: int = 0, *, tools: ToolSchemas | None = None
    ) -> CompactionRecord | None:
        """After :meth:`add_response`, while the agent runs its tool: compact now when the
        next :meth:`prepare` would (:meth:`compaction_due`), so that call finds its view ready
        (see :mod:`contextfold.engine.ahead`). None when nothing was due or changed. The history is
        never changed; a storage failure is raised with the session as before."""
        ctx = self._ctx
        with ctx.units.lock:
            if not self.compaction_due(lookahead_tokens, tools=tools):
                return None
            record = preparing.compact_now(ctx, ctx.extra_tokens(tools) + max(0, lookahead_tokens))
            ctx.view.view_dicts()  # rendered now: the next prepare() reuses these
        self._announce(record)
        return record if record.changed else None

    # ------------------------------------------------------------------ usage / calibration
    def report_usage(self, input_tokens: int | None = None, *, response: object = None) -> float:
        """Feed the provider-reported input tokens of the last call; returns the new scale."""
        ctx = self._ctx
        if input_tokens is None and response is not None:
            input_tokens = extract_input_tokens(response)
        if input_tokens is None or ctx.last_estimate <= 0:
            return ctx.calibration.scale
        if (
            isinstance(input_tokens, bool)
            or not isinstance(input_tokens, int | float)
            or not math.isfinite(input_tokens)
        ):
            raise ConfigError(f"input_tokens must be a finite number, got {input_tokens!r}")
        # the fixed prefix (leading system messages, tool schemas) and the messages after it
        # (with the injected evidence) are calibrated apart
        fixed = ctx.last_prefix + ctx.last_schema
        messages = ctx.last_estimate - ctx.last_prefix + ctx.last_injection
        if messages <= 0:
            return ctx.calibration.scale
        with self._ctx.units.lock:
            scale = ctx.calibration.observe(messages, int(input_tokens), fixed=fixed)
            try:
                ctx.save_calibration()
            except ContextFoldError as exc:  # the scale is re-learned from the next calls
                ctx.recovery.note_problem(f"saving the calibration failed: {exc}")
            return scale

    def recover_from_overflow(
        self, exc: Exception, *, tools: ToolSchemas | None = None
    ) -> CompactionRecord:
        """For frameworks that own the retry loop (the integrations): when ``exc`` is a
        context-overflow error, learn what it says (window, token count) and compact hard now
        so the next ``prepare()`` is smaller; returns the record. Any other error (or recovery
        turned off) is raised again."""
        with self._ctx.units.lock:
            record = overflow_handling.recover(self._ctx, exc, tools)
        self._announce(record)
        return record

    def notification(self, record: CompactionRecord) -> str:
        """The compaction notice of ``record`` in the configured ``locale``."""
        return record.notification(locale=self._ctx.config.locale)

    def records(self) -> list[CompactionRecord]:
        """Every persisted CompactionRecord of this session, oldest first."""
        with self._ctx.units.lock:
            return self._ctx.record_store.list(self._ctx.session_id)

    @property
    def toolbox(self) -> ToolBox:
        return self._ctx.recovery.toolbox

    def tool_schemas(self, format: Literal["openai", "anthropic"] = "openai") -> list[JSONObject]:
        return [need_object(to_json(schema)) for schema in self.toolbox.schemas(format)]

    def handle_tool_call(self, call: Mapping[str, JSON]) -> JSONObject:
        """Run one of contextfold's agent tools; returns the tool message (errors included)."""
        name = call.get("name") if isinstance(call, Mapping) else None
        function = call.get("function") if isinstance(call, Mapping) else None
        if name is None and isinstance(function, Mapping):
            name = function.get("name")
        attrs = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name if isinstance(name, str) else None,
            "gen_ai.conversation.id": self._ctx.session_id,
        }
        with self._ctx.units.lock, telemetry.span("contextfold.tool", attrs):
            return self.toolbox.handle(call)

    def restore(self, query: str, k: int = 5) -> list[RestoreHit]:
        """Evidence that left the view, best match first, with its original text."""
        attrs: dict[str, telemetry.Attr | None] = {
            "gen_ai.conversation.id": self._ctx.session_id,
            "contextfold.k": k,
        }
        with self._ctx.units.lock, telemetry.span("contextfold.restore", attrs) as current:
            hits = self._ctx.recovery.restore(query, k)
            telemetry.set_attributes(current, {"contextfold.hits": len(hits)})
            return hits

    def add_subagent_output(
        self,
        run_id: str,
        messages_or_text: str | Sequence[Mapping[str, JSON]],
        parent_message_uuid: str | None = None,
    ) -> list[EvidencePointer]:
        with self._ctx.units.unit():
            return self._ctx.recovery.add_subagent_output(
                run_id, messages_or_text, parent_message_uuid
            )

    def recover_tool_result(self, tool_call_id: str) -> str | None:
        with self._ctx.units.lock:
            return self._ctx.recovery.recover_tool_result(tool_call_id)

    @property
    def state(self) -> SessionState:
        return self._ctx.session_state

    def save_session_state(self) -> None:
        """Store the session state (plan mode, todos, tasks, permissions) as a snapshot."""
        with self._ctx.units.unit():
            save_session_snapshot(self._ctx.session, self._ctx.session_state)

    def offloaded(self) -> dict[str, OffloadEntry]:
        return self._ctx.offload.entries()


__all__ = ["SessionCalls"]
