"""Counters of what contextfold did in this process, for users who export metrics themselves
(the ``metrics`` extra: ``prometheus-client``).

    from prometheus_client import start_http_server
    from contextfold import metrics

    counters = metrics.enable()          # a registry of its own; or enable(registry=REGISTRY)
    start_http_server(9464, registry=counters.registry)

Every ``ContextManager`` of the process counts into it: compactions by tier, the tokens they
took out of the view, their time, evidence injections, restores, tool calls (``recall``,
``read_offloaded`` ...) by tool, summarizer calls and ``prepare`` time. The counts come from
the same places as the OpenTelemetry spans (:mod:`contextfold.core.telemetry` calls a hook when one
ends); until :func:`enable` runs nothing is counted and nothing costs anything. Labels are tiers
and tool names only, never a session, a key or a text.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

from .core import telemetry
from .errors import ConfigError
from .extras import needs_extra

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

#: seconds, for prepare and compaction times
BUCKETS: tuple[float, ...] = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5)
BUCKETS += (1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class LibraryMetrics:
    """The counters (``prometheus_client`` objects) in :attr:`registry`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        try:
            from prometheus_client import CollectorRegistry, Counter, Histogram
        except ImportError as exc:
            raise ConfigError(needs_extra("contextfold.metrics", "metrics", exc)) from None
        self.registry = registry if registry is not None else CollectorRegistry()
        reg = self.registry
        self.compactions = Counter(
            "contextfold_compactions_total", "Compactions that changed the view, by tier.",
            ["tier"], registry=reg,
        )  # fmt: skip
        self.tokens_saved = Counter(
            "contextfold_compaction_tokens_saved_total",
            "Tokens compactions took out of the view (before minus after).",
            registry=reg,
        )
        self.compaction_seconds = Histogram(
            "contextfold_compaction_seconds", "Time of each compaction, by tier.", ["tier"],
            registry=reg, buckets=BUCKETS,
        )  # fmt: skip
        self.prepare_seconds = Histogram(
            "contextfold_prepare_seconds", "Time of each prepare() (the view for a model call).",
            registry=reg, buckets=BUCKETS,
        )  # fmt: skip
        self.injections = Counter(
            "contextfold_evidence_injections_total",
            "Views given an evidence block (what left the view and matters now).",
            registry=reg,
        )
        self.restores = Counter(
            "contextfold_restores_total", "restore() calls (evidence brought back by query).",
            registry=reg,
        )  # fmt: skip
        self.tool_calls = Counter(
            "contextfold_tool_calls_total", "contextfold's agent tools answered, by tool.",
            ["tool"], registry=reg,
        )  # fmt: skip
        self.summarizer_calls = Counter(
            "contextfold_summarizer_calls_total", "Summarizer calls, by summarizer class.",
            ["summarizer"], registry=reg,
        )  # fmt: skip

    def unregister(self) -> None:
        """Take the counters out of the registry (a later :func:`enable` may use it again)."""
        for collector in (
            self.compactions, self.tokens_saved, self.compaction_seconds, self.prepare_seconds,
            self.injections, self.restores, self.tool_calls, self.summarizer_calls,
        ):  # fmt: skip
            with contextlib.suppress(KeyError):
                self.registry.unregister(collector)

    def __call__(self, name: str, attrs: Mapping[str, telemetry.Attr], seconds: float) -> None:
        """The hook :mod:`contextfold.core.telemetry` calls when a span ended."""
        if name == "contextfold.compaction":
            self._compaction(attrs, seconds)
        elif name == "contextfold.prepare":
            self.prepare_seconds.observe(seconds)
        elif name == "contextfold.evidence.inject":
            if int(attrs.get("contextfold.injected.chars", 0) or 0) > 0:
                self.injections.inc()
        elif name == "contextfold.restore":
            self.restores.inc()
        elif name == "contextfold.tool":
            self.tool_calls.labels(tool=str(attrs.get("gen_ai.tool.name", "?"))[:40]).inc()
        elif name == "contextfold.summarize":
            kind = str(attrs.get("contextfold.summarizer", "?"))[:40]
            self.summarizer_calls.labels(summarizer=kind).inc()

    def _compaction(self, attrs: Mapping[str, telemetry.Attr], seconds: float) -> None:
        tier = str(attrs.get("contextfold.tier", "none"))
        before = int(attrs.get("contextfold.tokens.before", 0) or 0)
        after = int(attrs.get("contextfold.tokens.after", 0) or 0)
        if tier == "none" and before == after:
            return  # decided there was nothing to do
        self.compactions.labels(tier=tier).inc()
        self.tokens_saved.inc(max(0, before - after))
        self.compaction_seconds.labels(tier=tier).observe(seconds)


_lock = threading.Lock()
_enabled: LibraryMetrics | None = None


def enable(registry: CollectorRegistry | None = None) -> LibraryMetrics:
    """Start counting (once per process; a second call returns the same counters). The
    counters go to ``registry`` (a ``prometheus_client.CollectorRegistry``) or a new one."""
    global _enabled
    with _lock:
        if _enabled is None:
            _enabled = LibraryMetrics(registry)
            telemetry.add_hook(_enabled)
        return _enabled


def disable() -> None:
    """Stop counting (the counters leave their registry; :func:`enable` makes new ones)."""
    global _enabled
    with _lock:
        if _enabled is not None:
            telemetry.remove_hook(_enabled)
            _enabled.unregister()
            _enabled = None


def enabled() -> LibraryMetrics | None:
    """The counters while counting, else None."""
    return _enabled


__all__ = ["BUCKETS", "LibraryMetrics", "disable", "enable", "enabled"]
