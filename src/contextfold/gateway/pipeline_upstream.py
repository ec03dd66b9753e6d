"""The pipeline's upstream steps: the request sent on (its URL, body and headers, after the
turn's commit is under way), the response headers saying what the gateway did, the latency
metrics and the turn's telemetry span."""

from __future__ import annotations

import time
from collections.abc import Coroutine

import httpx

from ..core import telemetry
from ..jsontypes import JSON, JSONObject  # noqa: F401 (JSON: for the annotations' JSONObject)
from . import fastjson
from .config import GatewayConfig
from .metrics import Metrics
from .turn import Turn, forward_after_commit, log_event
from .upstream import Upstream, forward_headers


class UpstreamSteps:
    """The upstream half of :class:`~.pipeline.Pipeline` (a base class of it)."""

    config: GatewayConfig
    metrics: Metrics
    upstream: Upstream

    def upstream_headers(self, turn: Turn) -> dict[str, str]:
        headers = forward_headers(turn.headers, token=self.config.auth_token)
        headers["content-type"] = "application/json"
        return headers

    def _url(self, turn: Turn, path: str) -> str:
        url = self.upstream.url(path)
        return f"{url}?{turn.query}" if turn.query else url

    async def post(self, turn: Turn, path: str, payload: JSONObject) -> httpx.Response:
        """The upstream's whole answer (body read)."""
        url, data, headers = self._request(turn, path, payload)

        async def whole() -> httpx.Response:
            resp = await self.upstream.send(turn.key, url, data, headers)
            try:
                await resp.aread()
            finally:
                await resp.aclose()
            return resp

        return await self._forward(turn, whole())  # the upstream wait: to its last byte

    async def open_stream(self, turn: Turn, path: str, payload: JSONObject) -> httpx.Response:
        """The upstream's answer once its headers are in (the caller reads and closes it)."""
        url, data, headers = self._request(turn, path, payload)
        return await self._forward(turn, self.upstream.send(turn.key, url, data, headers))

    async def _forward(
        self, turn: Turn, call: Coroutine[object, None, httpx.Response]
    ) -> httpx.Response:
        return await forward_after_commit(turn, call)

    def _request(
        self, turn: Turn, path: str, payload: JSONObject
    ) -> tuple[str, bytes, dict[str, str]]:
        return self._url(turn, path), fastjson.dumps(payload), self.upstream_headers(turn)

    def note_retry(self, ok: bool) -> None:
        self.metrics.inc(
            "contextfold_gateway_overflow_retries_total", outcome="ok" if ok else "failed"
        )

    def upstream_error(self, turn: Turn, status: int) -> None:
        self.metrics.inc("contextfold_gateway_upstream_errors_total", status=str(status))
        log_event("upstream_error", session=turn.session.session_id, status=status)

    def gateway_headers(self, turn: Turn) -> dict[str, str]:
        """Response headers saying what the gateway did: the session, the time it added
        (Server-Timing, milliseconds, upstream wait excluded) and the compaction tier if any."""
        added = max(0.0, time.perf_counter() - turn.started - turn.upstream_seconds)
        parts = [
            f"contextfold;dur={added * 1000:.2f}",
            f"upstream;dur={turn.upstream_seconds * 1000:.2f}",
        ]
        parts += [f"{k};dur={v * 1000:.2f}" for k, v in turn.timings.items()]
        if turn.answered_at:  # from the upstream's answer to these headers
            parts.append(f"answer;dur={(time.perf_counter() - turn.answered_at) * 1000:.2f}")
        out = {"x-contextfold-session": turn.session.session_id, "server-timing": ", ".join(parts)}
        record = turn.prepared.record
        if record is not None and record.changed:
            out["x-contextfold-compaction"] = record.tier.value
        return out

    def observe_first_byte(self, turn: Turn) -> None:
        if turn.first_byte_recorded:
            return
        turn.first_byte_recorded = True
        total = time.perf_counter() - turn.started
        self.metrics.observe("contextfold_gateway_upstream_latency_seconds", turn.upstream_seconds)
        self.metrics.observe(
            "contextfold_gateway_added_latency_seconds", max(0.0, total - turn.upstream_seconds)
        )


def turn_span(turn: Turn, input_tokens: int | None) -> None:
    """A ``contextfold.gateway.turn`` span for a turn that got its answer: from the request's
    start to now, with the GenAI attributes and what the view did this turn."""
    prepared = turn.prepared
    attrs: dict[str, telemetry.Attr | None] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": turn.provider,
        "gen_ai.request.model": turn.model,
        "gen_ai.usage.input_tokens": input_tokens,
        "gen_ai.conversation.id": turn.session.session_id,
        "contextfold.view.tokens": prepared.view_tokens,
        "contextfold.history.tokens": prepared.history_tokens,
        "contextfold.upstream.seconds": turn.upstream_seconds,
    }
    if prepared.record is not None:
        attrs.update(telemetry.compaction_attributes(prepared.record))
    telemetry.finished_span("contextfold.gateway.turn", time.perf_counter() - turn.started, attrs)


__all__ = ["UpstreamSteps", "turn_span"]
