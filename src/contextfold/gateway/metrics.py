"""The gateway's metrics through the standard Prometheus client (``prometheus_client``).

Each :class:`Metrics` has a registry of its own (two gateways in one process, as in tests,
never mix their counts). A series appears once it has happened (a counter is created with its
first increment), so a scrape shows what the gateway did, not a wall of zeros.

With ``contextfold serve --workers N`` every worker process counts for itself, in the client's
multiprocess mode: ``serve`` points ``PROMETHEUS_MULTIPROC_DIR`` at a fresh folder (or keeps
the one the user set) before the workers start, and ``/metrics``, whichever worker answers,
adds up the files of all of them.

Labels are routes, HTTP statuses, compaction tiers, outcomes and store operations only: never a
key, a token, a URL or a session name.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Literal

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

#: upstream and added latency, seconds
LATENCY_BUCKETS: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

Kind = Literal["counter", "histogram"]

#: name -> (kind, help, label names)
SPECS: dict[str, tuple[Kind, str, tuple[str, ...]]] = {
    "contextfold_gateway_requests_total": (
        "counter",
        "Requests handled, by route and HTTP status.",
        ("route", "status"),
    ),
    "contextfold_gateway_compactions_total": (
        "counter",
        "Compactions run by the gateway, by tier.",
        ("tier",),
    ),
    "contextfold_gateway_compactions_ahead_total": (
        "counter",
        "Compactions prepared ahead (after an answer, while the agent ran its tool), of those "
        "counted in compactions_total.",
        (),
    ),
    "contextfold_gateway_history_tokens_total": (
        "counter",
        "Estimated tokens of the full histories the clients sent (into the view).",
        (),
    ),
    "contextfold_gateway_view_tokens_total": (
        "counter",
        "Estimated tokens of the views forwarded upstream (out of the view).",
        (),
    ),
    "contextfold_gateway_tokens_saved_total": (
        "counter",
        "History tokens not sent thanks to compaction.",
        (),
    ),
    "contextfold_gateway_evidence_injections_total": (
        "counter",
        "Views sent with an evidence block (what left the view and matters now) injected.",
        (),
    ),
    "contextfold_gateway_gateway_tool_calls_total": (
        "counter",
        "recall / read_offloaded calls answered inside the gateway.",
        (),
    ),
    "contextfold_gateway_recalls_total": (
        "counter",
        "Gateway tool calls answered inside the gateway, by tool.",
        ("tool",),
    ),
    "contextfold_gateway_overflow_retries_total": (
        "counter",
        "Upstream context-overflow errors retried after hard compaction, by outcome.",
        ("outcome",),
    ),
    "contextfold_gateway_branches_total": (
        "counter",
        "Branch sessions started because a client continued a stored conversation another "
        "way (a regenerated answer, a second client).",
        (),
    ),
    "contextfold_gateway_client_rewrites_total": (
        "counter",
        "Requests in which a client rewrote its own history (summarized, moved or refreshed "
        "messages); the session continued.",
        (),
    ),
    "contextfold_gateway_upstream_errors_total": (
        "counter",
        "Upstream failures passed back, by HTTP status.",
        ("status",),
    ),
    "contextfold_gateway_upstream_latency_seconds": (
        "histogram",
        "Upstream time to the first byte.",
        (),
    ),
    "contextfold_gateway_added_latency_seconds": (
        "histogram",
        "Latency the gateway adds before the first byte reaches the client (upstream wait "
        "excluded).",
        (),
    ),
    "contextfold_gateway_store_seconds": (
        "histogram",
        "Time of the session store's work for a request, by operation (sync: reading and "
        "staging what is new; commit: writing it; record: writing the answer).",
        ("op",),
    ),
}


class Metrics:
    """Counters and histograms of one gateway, with labels; thread-safe."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._lock = threading.Lock()
        self._made: dict[str, Any] = {}

    def _metric(self, name: str) -> Any:
        metric = self._made.get(name)
        if metric is not None:
            return metric
        kind, help_text, labels = SPECS[name]
        with self._lock:
            metric = self._made.get(name)
            if metric is None:
                if kind == "counter":
                    metric = Counter(name, help_text, labels, registry=self.registry)
                else:
                    metric = Histogram(
                        name, help_text, labels, registry=self.registry, buckets=LATENCY_BUCKETS
                    )
                self._made[name] = metric
        return metric

    def inc(self, name: str, value: float = 1.0, **labels: str) -> None:
        if value < 0:
            return
        metric = self._metric(name)
        (metric.labels(**labels) if labels else metric).inc(value)

    def observe(self, name: str, seconds: float, **labels: str) -> None:
        metric = self._metric(name)
        (metric.labels(**labels) if labels else metric).observe(max(0.0, seconds))

    def value(self, name: str, **labels: str) -> float:
        """A counter's value in this process (0 before its first increment)."""
        found = self.registry.get_sample_value(name, labels or None)
        return float(found) if found is not None else 0.0

    def render(self) -> str:
        """The Prometheus text format: this gateway's registry, or with ``--workers N``
        (multiprocess mode) the sum over every worker process."""
        folder = os.environ.get(MULTIPROC_ENV)
        if folder and os.path.isdir(folder):
            merged = CollectorRegistry()
            MultiProcessCollector(merged, path=folder)  # type: ignore[no-untyped-call]
            return generate_latest(merged).decode("utf-8")
        return generate_latest(self.registry).decode("utf-8")


__all__ = ["LATENCY_BUCKETS", "MULTIPROC_ENV", "SPECS", "Metrics"]
