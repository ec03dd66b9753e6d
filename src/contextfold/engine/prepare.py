"""Prepare: the view to send now, compacted when needed, as one typed result.

:func:`prepare` decides and runs the compaction (in a unit of work), checks the view fits the
window, and returns a :class:`PreparedView`: the neutral messages to send (with the evidence
injected before the newest user message, when there is some), their tokens, the compaction
record, and where the injection went. The library's ``prepare()``, the framework integrations
and the gateway all render from it (:meth:`PreparedView.openai`, :meth:`PreparedView.anthropic`,
or the messages themselves).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..compaction.pinned import pinned_indices
from ..core import telemetry
from ..core.messages import Message
from ..core.records import CompactionRecord, Tier
from ..core.view import HistoryView
from ..core.view_layout import VIEW_EVENT, layout
from ..core.wire import to_anthropic
from ..errors import ContextOverflowError
from ..jsontypes import JSON  # noqa: F401 (for get_type_hints of OpenAIView)
from ..storage import ConcurrentWriteError
from .context import SessionContext
from .reopen import save_state
from .surface import AnthropicView, OpenAIView

#: Tool schemas as sent with a request (OpenAI or Anthropic form).
ToolSchemas = Sequence[Mapping[str, object]]


@dataclass(frozen=True, kw_only=True, slots=True)
class Injection:
    """Evidence injected into the view: a user message at ``position`` of the messages."""

    position: int
    text: str
    tokens: int

    def message(self) -> Message:
        return Message(role="user", content=self.text, metadata={"cf_kind": "injection"})


@dataclass(kw_only=True, eq=False)
class PreparedView:
    """What ``prepare`` derived: render it before the session changes again."""

    #: estimated (calibrated) tokens of the view's messages, without schemas and injection
    tokens: int
    #: tokens of the tool schemas sent with it
    schema_tokens: int
    #: the record of this prepare (tier NONE when nothing was compacted)
    record: CompactionRecord
    #: the evidence injected before the newest user message, if any
    injection: Injection | None = None
    _view: HistoryView = field(repr=False)
    _messages: list[Message] | None = field(default=None, repr=False)

    @property
    def messages(self) -> list[Message]:
        """The view's messages as sent, the injected evidence included (built on first use:
        rendering OpenAI dicts does not need them)."""
        if self._messages is None:
            self._messages = self._view.view_messages()
        return self._messages

    def openai(self, *, copy: bool = False) -> OpenAIView:
        """Chat Completions message dicts (cached per message: read-only unless ``copy``)."""
        dicts = self._view.view_dicts(copy=copy)
        if self.injection is not None:
            dicts.insert(self.injection.position, {"role": "user", "content": self.injection.text})
        return dicts

    def anthropic(self) -> AnthropicView:
        """Keyword arguments for ``client.messages.create`` (``system`` apart)."""
        system, out = to_anthropic(self.messages)
        result: AnthropicView = {"messages": out}
        if system is not None:
            result["system"] = system
        return result


def compact_if_needed(ctx: SessionContext, extra: int) -> CompactionRecord:
    """Run the preset's compaction for a call adding ``extra`` tokens; never leave a view
    above the window (the emergency tier is the safety net of every preset)."""
    cfg, compactor = ctx.config, ctx.compactor
    record: CompactionRecord | None = None
    if cfg.summary is not None:
        record = compactor.run_trigger(cfg.summary, extra_tokens=extra)
    if cfg.tiers is not None:
        tier_record = compactor.run(extra_tokens=extra)
        if record is None or tier_record.tier is not Tier.NONE:
            record = tier_record
    elif record is None:
        record = compactor.run(extra_tokens=extra, force=Tier.NONE)
    if compactor.view_tokens(extra) > ctx.window:
        record = compactor.run(
            extra_tokens=extra, force=Tier.EMERGENCY, reason="safety net: view above the window"
        )
    return record


def finish(ctx: SessionContext, record: CompactionRecord) -> None:
    """Keep ``record`` as the last one; a compaction that changed the view is indexed as
    evidence and the compactor's state is saved (in the caller's unit of work)."""
    ctx.last_prepare = record
    ctx.last_estimate = ctx.view.view_tokens()
    ctx.last_prefix = ctx.view.range_tokens(0, ctx.view.prefix_len)
    if record.changed:
        ctx.last_record = record
        ctx.recovery.after_compaction(record)
        save_state(ctx)
        ctx.session.emit(VIEW_EVENT, layout(ctx.view))  # what the next calls are sent


def compact_now(ctx: SessionContext, extra: int) -> CompactionRecord:
    """prepare()'s compaction unit. A compaction is derived from the log, so when another
    writer appended meanwhile (ConcurrentWriteError: the session reloaded the latest log)
    it is decided again on that log, up to twice; staged writes a conflict dropped are
    never retried silently (the error says so)."""
    for attempt in range(3):
        staged = ctx.session.has_staged
        try:
            with ctx.units.unit():
                record = compact_if_needed(ctx, extra + ctx.recovery.injection_reserve())
                finish(ctx, record)
            return record
        except ConcurrentWriteError:
            if staged or attempt == 2:
                raise
    raise AssertionError("unreachable")


def check_fits(
    ctx: SessionContext, extra: int, schema_tokens: int, record: CompactionRecord
) -> None:
    """Never hand out a view above the window: say why it cannot fit instead."""
    need = ctx.compactor.view_tokens(extra)
    ctx.room = ctx.window - need
    if need <= ctx.window:
        return
    pinned = sum(ctx.view.tokens_of(i) for i in pinned_indices(ctx.compactor))
    raise ContextOverflowError(
        f"the smallest view is {need} tokens, over the {ctx.window}-token window: the "
        f"pinned messages (system prompt, first and newest user message), already shortened "
        f"to head and tail, take {pinned} tokens, tool schemas {schema_tokens}, the reserve "
        f"for the answer {ctx.config.reserve_output_tokens}, and the newest turn is kept "
        "whole; use a larger context_window or fewer/shorter tool schemas",
        record=record,
    )


def newest_user_position(messages: Sequence[Message]) -> int:
    """Where evidence goes: before the newest user message (at the end when there is none)."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == "user":
            return i
    return len(messages)


def render(ctx: SessionContext, record: CompactionRecord, schema_tokens: int) -> PreparedView:
    """The view as it stands now, with the evidence the newest user message asks for when it
    fits in the room left (evidence never pushes the view over the window)."""
    ctx.last_fixed = schema_tokens
    ctx.last_injection = 0
    text = ctx.recovery.safe_injection()
    injection = None
    messages = None
    if text is not None:
        tokens = ctx.counter.count_text(text)
        if tokens <= ctx.room:
            messages = ctx.view.view_messages()
            injection = Injection(position=newest_user_position(messages), text=text, tokens=tokens)
            messages.insert(injection.position, injection.message())
            ctx.last_fixed += tokens
            ctx.last_injection = tokens
    return PreparedView(
        tokens=ctx.compactor.view_tokens(),
        schema_tokens=schema_tokens,
        record=record,
        injection=injection,
        _view=ctx.view,
        _messages=messages,
    )


def prepare(ctx: SessionContext, tools: ToolSchemas | None) -> tuple[CompactionRecord, int]:
    """Compact as needed for a call with ``tools``; the record and the schemas' tokens. The
    caller announces the record, then runs :func:`check_fits` and :func:`render`."""
    ctx.last_schema = ctx.raw_schema_tokens(tools)
    schema_tokens = ctx.schema_tokens(tools)
    extra = ctx.config.reserve_output_tokens + schema_tokens
    return compact_now(ctx, extra), schema_tokens


def prepare_view(
    ctx: SessionContext,
    tools: ToolSchemas | None,
    announce: Callable[[CompactionRecord], None],
) -> PreparedView:
    """The whole prepare (under the caller's lock): compact as needed, ``announce`` the
    record, check the view fits and render it, in one telemetry span."""
    attrs = {"gen_ai.conversation.id": ctx.session_id, "contextfold.agent.id": ctx.agent_id}
    with telemetry.span("contextfold.prepare", attrs) as current:
        record, schema_tokens = prepare(ctx, tools)
        announce(record)
        check_fits(ctx, ctx.extra_tokens(tools), schema_tokens, record)
        view = render(ctx, record, schema_tokens)
        if telemetry.recording(current):
            telemetry.set_attributes(current, telemetry.compaction_attributes(record))
            telemetry.set_attributes(current, {"contextfold.view.tokens": view.tokens})
        return view


__all__ = [
    "Injection",
    "PreparedView",
    "ToolSchemas",
    "check_fits",
    "compact_if_needed",
    "compact_now",
    "finish",
    "newest_user_position",
    "prepare",
    "prepare_view",
    "render",
]
