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
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard

if TYPE_CHECKING:
    from .records import CompactionRecord

try:
    from opentelemetry import trace as _trace
except ImportError:  # the otel extra is not installed: spans cost nothing
    _trace = None  # type: ignore[assignment]

TRACER = "contextfold"
Attr = str | int | float | bool
_NONE: AbstractContextManager[None] = contextlib.nullcontext(None)


def enabled() -> bool:
    """Whether the OpenTelemetry API is importable (spans may be recorded)."""
    return _trace is not None


#: ``hook(span name, attributes, seconds)`` for each span that ended without an error (see
#: :func:`add_hook`; :mod:`contextfold.metrics` counts with one)
Hook = Callable[[str, Mapping[str, Attr], float], None]
_HOOKS: list[Hook] = []


def add_hook(hook: Hook) -> None:
    """Call ``hook`` with every span's name, final attributes and duration once it ended
    without an error (with or without OpenTelemetry). A hook that raises is ignored."""
    if hook not in _HOOKS:
        _HOOKS.append(hook)


def remove_hook(hook: Hook) -> None:
    if hook in _HOOKS:
        _HOOKS.remove(hook)


class SpanLike(Protocol):
    """What :func:`span` yields: an OpenTelemetry span, or the attributes noted for the hooks."""

    def is_recording(self) -> bool: ...

    def set_attribute(self, key: str, value: Attr) -> None: ...


class _Noted:
    """The span a block sees while hooks listen: keeps the attributes (and passes them to the
    OpenTelemetry span, if one records)."""

    __slots__ = ("attributes", "inner")

    def __init__(self, attributes: dict[str, Attr], inner: Any) -> None:
        self.attributes = attributes
        self.inner = inner

    def is_recording(self) -> bool:
        return True

    def set_attribute(self, key: str, value: Attr) -> None:
        self.attributes[key] = value
        if self.inner is not None and self.inner.is_recording():
            self.inner.set_attribute(key, value)


@contextlib.contextmanager
def _noted(name: str, attrs: dict[str, Attr]) -> Iterator[_Noted]:
    started = time.perf_counter()
    if _trace is None:
        noted = _Noted(attrs, None)
        yield noted
    else:
        with _trace.get_tracer(TRACER).start_as_current_span(name, attributes=attrs) as inner:
            noted = _Noted(dict(attrs), inner)
            yield noted
    seconds = time.perf_counter() - started
    for hook in list(_HOOKS):
        with contextlib.suppress(Exception):  # counting never breaks the work counted
            hook(name, noted.attributes, seconds)


def span(
    name: str, attributes: Mapping[str, Attr | None] | None = None
) -> AbstractContextManager[SpanLike | None]:
    """A span around a block (the current span's child); yields the span, or None without
    OpenTelemetry and without hooks. Attributes that are None are left out."""
    if _trace is None and not _HOOKS:
        return _NONE
    attrs = {k: v for k, v in (attributes or {}).items() if v is not None}
    if _HOOKS:
        return _noted(name, attrs)
    assert _trace is not None
    return _trace.get_tracer(TRACER).start_as_current_span(name, attributes=attrs)


def recording(current: SpanLike | None) -> TypeGuard[SpanLike]:
    """Whether a span from :func:`span` records (worth computing attributes for)."""
    return current is not None and bool(current.is_recording())


def set_attributes(current: SpanLike | None, attributes: Mapping[str, Attr | None]) -> None:
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
    "Hook",
    "SpanLike",
    "add_hook",
    "compaction_attributes",
    "enabled",
    "finished_span",
    "recording",
    "remove_hook",
    "set_attributes",
    "span",
]
