"""Prometheus text-format metrics, kept in process (no client library needed)."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable
from typing import ClassVar

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

Labels = tuple[tuple[str, str], ...]


def _fmt_labels(labels: Labels, extra: Iterable[tuple[str, str]] = ()) -> str:
    items = list(labels) + list(extra)
    if not items:
        return ""
    body = ",".join(
        f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
        for k, v in items
    )
    return "{" + body + "}"


class _Histogram:
    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts = [0] * len(buckets)
        self.total = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        i = bisect.bisect_left(self.buckets, value)
        if i < len(self.counts):
            self.counts[i] += 1
        self.total += 1
        self.sum += value


class Metrics:
    """Counters and latency histograms with labels; thread-safe."""

    HELP: ClassVar[dict[str, str]] = {
        "contextfold_gateway_requests_total": "Requests handled, by route and HTTP status.",
        "contextfold_gateway_compactions_total": "Compactions run by the gateway, by tier.",
        "contextfold_gateway_compactions_ahead_total": "Compactions prepared ahead (after an "
        "answer, while the agent ran its tool), of those counted in compactions_total.",
        "contextfold_gateway_history_tokens_total": "Estimated tokens of the full histories "
        "the clients sent (into the view).",
        "contextfold_gateway_view_tokens_total": "Estimated tokens of the views forwarded "
        "upstream (out of the view).",
        "contextfold_gateway_tokens_saved_total": "History tokens not sent thanks to compaction.",
        "contextfold_gateway_gateway_tool_calls_total": "recall / read_offloaded calls answered "
        "inside the gateway.",
        "contextfold_gateway_overflow_retries_total": "Upstream context-overflow errors retried "
        "after hard compaction, by outcome.",
        "contextfold_gateway_branches_total": "Branch sessions started because a client "
        "continued a stored conversation another way (a regenerated answer, a second client).",
        "contextfold_gateway_client_rewrites_total": "Requests in which a client rewrote its "
        "own history (summarized, moved or refreshed messages); the session continued.",
        "contextfold_gateway_upstream_errors_total": "Upstream failures passed back, by kind.",
        "contextfold_gateway_upstream_latency_seconds": "Upstream time to the first byte.",
        "contextfold_gateway_added_latency_seconds": "Latency the gateway adds before the first "
        "byte reaches the client (upstream wait excluded).",
    }

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[str, dict[Labels, float]] = {}
        self._hists: dict[str, dict[Labels, _Histogram]] = {}

    def inc(self, name: str, value: float = 1.0, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        with self._lock:
            series = self._counters.setdefault(name, {})
            series[key] = series.get(key, 0.0) + value

    def observe(self, name: str, seconds: float, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        with self._lock:
            series = self._hists.setdefault(name, {})
            hist = series.get(key)
            if hist is None:
                hist = series[key] = _Histogram(LATENCY_BUCKETS)
            hist.observe(max(0.0, seconds))

    def value(self, name: str, **labels: str) -> float:
        key = tuple(sorted(labels.items()))
        with self._lock:
            return self._counters.get(name, {}).get(key, 0.0)

    def render(self) -> str:
        lines: list[str] = []
        with self._lock:
            for name in sorted(self._counters):
                lines.append(f"# HELP {name} {self.HELP.get(name, name)}")
                lines.append(f"# TYPE {name} counter")
                for labels, value in sorted(self._counters[name].items()):
                    lines.append(f"{name}{_fmt_labels(labels)} {value:g}")
            for name in sorted(self._hists):
                lines.append(f"# HELP {name} {self.HELP.get(name, name)}")
                lines.append(f"# TYPE {name} histogram")
                for labels, hist in sorted(self._hists[name].items()):
                    running = 0
                    for bound, count in zip(hist.buckets, hist.counts):
                        running += count
                        le = _fmt_labels(labels, [("le", f"{bound:g}")])
                        lines.append(f"{name}_bucket{le} {running}")
                    inf = _fmt_labels(labels, [("le", "+Inf")])
                    lines.append(f"{name}_bucket{inf} {hist.total}")
                    lines.append(f"{name}_sum{_fmt_labels(labels)} {hist.sum:.6f}")
                    lines.append(f"{name}_count{_fmt_labels(labels)} {hist.total}")
        return "\n".join(lines) + "\n"


__all__ = ["Metrics"]
