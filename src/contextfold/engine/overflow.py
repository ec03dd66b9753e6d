"""Overflow handling: a provider said the request was over its context window.

:func:`recover` learns what the error says (the window, the prompt size the provider
counted), compacts (for a stated window as the tiers would for it when the newest turns fit,
else hard) and returns the record; :func:`retry_view` also gives the view to
retry with, never the request that just failed. Manual compaction (``/compact``) is here too:
it is the same forced run of the compactor.
"""

from __future__ import annotations

import json

from ..core.overflow import is_context_overflow
from ..core.records import CompactionRecord, Tier
from ..core.wire import to_openai
from ..errors import ConfigError, ContextOverflowError
from ..providers.limits import learn_from_overflow
from .context import SessionContext
from .prepare import PreparedView, ToolSchemas, finish, render


def recover(ctx: SessionContext, exc: Exception, tools: ToolSchemas | None) -> CompactionRecord:
    """When ``exc`` is a context-overflow error, learn what it says and compact hard now (in
    one unit of work) so the next view is smaller; any other error (or recovery turned off)
    is raised again."""
    if not ctx.config.overflow_recovery or not is_context_overflow(exc):
        raise exc
    with ctx.units.unit():
        note, learned = learn_from_overflow(ctx, exc)
        if learned is not None:
            ctx.set_window(learned)
        extra = ctx.extra_tokens(tools)
        # a window the error stated (an inferred one only bounds it from above), for a session
        # with tiers (the harness preset keeps its own recovery)
        stated = learned is not None and bool(learned.kind) and ctx.config.tiers is not None
        record = ctx.compactor.recover_overflow(extra_tokens=extra, note=note, learned=stated)
        if ctx.compactor.view_tokens(extra) > ctx.window:
            # the same safety net as prepare(): the retry never goes out above the window
            finish(ctx, record)
            record = ctx.compactor.run(
                extra_tokens=extra,
                force=Tier.EMERGENCY,
                reason="overflow recovery: view still above the window",
            )
        finish(ctx, record)
    return record


def retry_view(
    ctx: SessionContext, exc: Exception, tools: ToolSchemas | None, failed: PreparedView
) -> PreparedView:
    """Overflow recovery for ``call``: compact hard (:func:`recover`) and give the view to
    retry with; ContextOverflowError when it would be the request that just failed."""
    sent = _key(failed)
    with ctx.units.lock:
        record = recover(ctx, exc, tools)
        view = render(ctx, record, ctx.schema_tokens(tools))
    if _key(view) == sent:
        raise ContextOverflowError(
            "the model reports a context overflow and nothing is left to compact: the "
            "system prompt, the newest user message and the tool schemas alone are too large "
            f"({exc})",
            record=record,
            cause=exc,
        ) from exc
    return view


def _key(view: PreparedView) -> str:
    """The request's messages as they went out."""
    return json.dumps([to_openai(m) for m in view.messages], sort_keys=True, default=str)


def raise_overflow(exc: Exception, record: CompactionRecord) -> None:
    """After a retry failed again: a second overflow becomes ContextOverflowError."""
    if is_context_overflow(exc):
        raise ContextOverflowError(
            f"the model still reports a context overflow after recovery ({exc})",
            record=record,
            cause=exc,
        ) from exc


def manual_tier(ctx: SessionContext, force: bool, tier: str | Tier | None) -> Tier | None:
    """The tier of a manual ``compact()``: ``tier`` when given, else Full (or Emergency with
    ``manual_compact="emergency"``) when forced, else None (the normal decision)."""
    if tier is not None:
        try:
            return Tier(tier)
        except ValueError:
            raise ConfigError(
                f"tier must be one of {[t.value for t in Tier]}, got {tier!r}"
            ) from None
    if force:
        return Tier.EMERGENCY if ctx.config.manual_compact == "emergency" else Tier.FULL
    return None


def compact(ctx: SessionContext, force: bool, tier: str | Tier | None) -> CompactionRecord:
    """Manual /compact (in one unit of work)."""
    chosen = manual_tier(ctx, force, tier)
    with ctx.units.unit():
        record = ctx.compactor.run(force=chosen, reason="manual /compact" if force else "")
        finish(ctx, record)
    return record


__all__ = ["compact", "manual_tier", "raise_overflow", "recover", "retry_view"]
