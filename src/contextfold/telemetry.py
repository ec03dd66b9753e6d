"""OpenTelemetry spans for what contextfold does (the ``otel`` extra: opentelemetry-api).

Spans: ``contextfold.prepare``, ``contextfold.compaction`` with one child per stage
(``contextfold.compaction.offload``, ``.summarize``, ``.truncate``), ``contextfold.summarize``
(each summarizer call), ``contextfold.restore``, ``contextfold.tool`` (``recall`` and the
other agent tools), ``contextfold.evidence.inject`` and ``contextfold.gateway.turn``. They
carry the GenAI semantic-convention attributes where they apply (``gen_ai.operation.name``,
``gen_ai.provider.name``, ``gen_ai.request.model``, ``gen_ai.usage.input_tokens``,
``gen_ai.usage.output_tokens``, ``gen_ai.conversation.id``, ``gen_ai.tool.name``) and
contextfold's own (``contextfold.tier``, ``contextfold.tokens.before``/``after``,
``contextfold.removed``, ``contextfold.offloaded``, ...).

Without opentelemetry installed every span is one shared no-op context (no import, no
allocation); with the API but no SDK configured, OpenTelemetry's own no-op tracer. Configure
an SDK ``TracerProvider`` as usual and the spans go wherever it exports.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .records import CompactionRecord

try:
    from opentelemetry import trace as _trace
except ImportError:  # the otel extra is not installed: spans cost nothing
    _trace = None  # type: ignore[assignment]

TRACER = "contextfold"
Attr = str | int | float | bool
_NONE: AbstractContextManager[Any] = contextlib.nullcontext(None)


def enabled() -> bool:
    """Whether the OpenTelemetry API is importable (spans may be recorded)."""
    return _trace is not None


def span(
    name: str, attributes: Mapping[str, Attr | None] | None = None
) -> AbstractContextManager[Any]:
    """A span around a block (the current span's child); yields the span, or None without
    OpenTelemetry. Attributes that are None are left out."""
    if _trace is None:
        return _NONE
    attrs = {k: v for k, v in (attributes or {}).items() if v is not None}
    return _trace.get_tracer(TRACER).start_as_current_span(name, attributes=attrs)


def recording(current: Any) -> bool:
    """Whether a span from :func:`span` records (worth computing attributes for)."""
    return current is not None and bool(current.is_recording())


def set_attributes(current: Any, attributes: Mapping[str, Attr | None]) -> None:
    """Add attributes to a span from :func:`span` (nothing when it does not record)."""
    if not recording(current):
        return
    for key, value in attributes.items():
        if value is not None:
            current.set_attribute(key, value)


def compaction_attributes(record: CompactionRecord) -> dict[str, Attr | None]:
    return {
        "contextfold.tier": record.tier.value,
        "contextfold.tokens.before": record.tokens_before,
        "contextfold.tokens.after": record.tokens_after,
        "contextfold.removed": record.summarized,
        "contextfold.offloaded": len(record.offloaded),
        "contextfold.offloaded.bytes": record.offloaded_bytes,
        "contextfold.compression_ratio": record.compression_ratio,
        "contextfold.strategy": record.strategy,
        "contextfold.error": record.error or None,
    }


def finished_span(
    name: str, seconds_ago: float, attributes: Mapping[str, Attr | None] | None = None
) -> None:
    """A span for something that started ``seconds_ago`` and ends now (a gateway turn, whose
    start and end live in different callbacks)."""
    if _trace is None:
        return
    attrs = {k: v for k, v in (attributes or {}).items() if v is not None}
    start = time.time_ns() - int(max(0.0, seconds_ago) * 1e9)
    _trace.get_tracer(TRACER).start_span(name, attributes=attrs, start_time=start).end()


__all__ = [
    "compaction_attributes",
    "enabled",
    "finished_span",
    "recording",
    "set_attributes",
    "span",
]
