"""Metrics through the standard Prometheus client, read back with its own parser: the
library's counters (contextfold.metrics) against what the managers' records say, the gateway's
/metrics against a live gateway (one process, and ``contextfold serve --workers 2``, whose
counts add up over both workers), and no secret in any of it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from contextfold import ContextManager, metrics
from tests.gateway.gateway_attacks import recorded_upstream, serve
from tests.gateway.gateway_helpers import running

TOKEN = "gw-metrics-token-0123456789"
KEY = "sk-metrics-secret-key-42"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape, parsed by prometheus_client: (name, labels) -> value."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def total(
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **want: str
) -> float:
    return sum(
        v for (n, labels), v in found.items() if n == name and set(want.items()) <= set(labels)
    )


def _turn(i: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"step {i}: look at src/mod{i}.py"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": f"c{i}",
                    "type": "function",
                    "function": {"name": "cat", "arguments": json.dumps({"path": f"mod{i}.py"})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": f"c{i}", "content": f"def f{i}(): ...\n" * 120},
        {"role": "assistant", "content": f"mod{i} read"},
    ]


@pytest.fixture
def counting() -> Iterator[metrics.LibraryMetrics]:
    counters = metrics.enable()
    try:
        yield counters
    finally:
        metrics.disable()


def test_library_counters_match_the_records(
    tmp_path: Path, counting: metrics.LibraryMetrics
) -> None:
    with ContextManager(store=str(tmp_path / "ws"), session_id="s", context_window=4_000) as cm:
        for i in range(14):
            cm.add_many(_turn(i))
            cm.prepare()
        cm.restore("def f1")
        cm.handle_tool_call(
            {"id": "r1", "function": {"name": "recall", "arguments": json.dumps({"query": "f2"})}}
        )
        records = [r for r in cm.records() if r.changed]
    found = samples(generate_latest(counting.registry).decode())
    assert records, "the session compacted"
    assert total(found, "contextfold_compactions_total") == len(records)
    for tier in {r.tier.value for r in records}:
        expected = sum(1 for r in records if r.tier.value == tier)
        assert total(found, "contextfold_compactions_total", tier=tier) == expected
    saved = sum(max(0, r.tokens_before - r.tokens_after) for r in records)
    assert total(found, "contextfold_compaction_tokens_saved_total") == saved
    assert total(found, "contextfold_prepare_seconds_count") == 14
    assert total(found, "contextfold_restores_total") == 1
    assert total(found, "contextfold_tool_calls_total", tool="recall") == 1
    assert total(found, "contextfold_compaction_seconds_count") == len(records)
    # stopped: nothing more is counted
    metrics.disable()
    with ContextManager(store=str(tmp_path / "ws"), session_id="s", context_window=4_000) as cm:
        cm.prepare()
    counts = [
        s.value
        for family in counting.prepare_seconds.collect()
        for s in family.samples
        if s.name.endswith("_count")
    ]
    assert counts == [14]


def test_library_counting_is_off_until_enabled(tmp_path: Path) -> None:
    assert metrics.enabled() is None
    with ContextManager(store=str(tmp_path / "ws"), session_id="s", context_window=4_000) as cm:
        cm.add_many(_turn(0))
        cm.prepare()
        counters = metrics.enable()
        try:
            found = samples(generate_latest(counters.registry).decode())
            assert total(found, "contextfold_prepare_seconds_count") == 0
            cm.prepare()
            found = samples(generate_latest(counters.registry).decode())
            assert total(found, "contextfold_prepare_seconds_count") == 1
        finally:
            metrics.disable()


def _chat(url: str, messages: list[Any], headers: dict[str, str]) -> httpx.Response:
    return httpx.post(
        url + "/v1/chat/completions",
        json={"model": "gpt-fake", "messages": messages},
        headers=headers,
        timeout=60,
    )


def test_live_gateway_metrics_parse_and_hold_no_secret(tmp_path: Path) -> None:
    headers = {"authorization": f"Bearer {TOKEN}", "x-api-key": KEY}
    with running(tmp_path, context_window=4_000, auth_token=TOKEN, record_delay=0) as (fake, gw):
        messages: list[Any] = [{"role": "system", "content": "You are a coding agent."}]
        for i in range(10):
            messages += _turn(i)[:3]
            r = _chat(gw.url, messages, headers)
            assert r.status_code == 200, r.text
            messages.append(r.json()["choices"][0]["message"])
        fake.failures.append((429, {"error": {"message": "slow down", "type": "rate"}}, 0.0))
        messages.append({"role": "user", "content": "once more"})
        assert _chat(gw.url, messages, headers).status_code == 429
        assert httpx.get(gw.url + "/metrics", timeout=10).status_code == 401
        text = httpx.get(gw.url + "/metrics", headers=headers, timeout=10).text
        upstream = fake.url
    found = samples(text)
    route = "/v1/chat/completions"
    assert total(found, "contextfold_gateway_requests_total", route=route, status="200") == 10
    assert total(found, "contextfold_gateway_requests_total", route=route, status="429") == 1
    assert total(found, "contextfold_gateway_upstream_errors_total", status="429") == 1
    assert total(found, "contextfold_gateway_compactions_total") >= 1
    assert total(found, "contextfold_gateway_tokens_saved_total") > 0
    for op in ("sync", "commit", "record"):
        assert total(found, "contextfold_gateway_store_seconds_count", op=op) >= 1, op
    buckets = [
        v
        for (n, labels), v in found.items()
        if n == "contextfold_gateway_store_seconds_bucket" and ("op", "sync") in labels
    ]
    assert buckets == sorted(buckets)  # cumulative, as the parser reads them
    assert total(found, "contextfold_gateway_upstream_latency_seconds_count") >= 10
    for secret in (TOKEN, KEY, upstream):
        assert secret not in text


def test_metrics_add_up_over_worker_processes(tmp_path: Path) -> None:
    fake, _seen = recorded_upstream()
    try:
        with serve(fake.url, str(tmp_path / "ws"), tmp_path, "--workers", "2") as (url, _o, _e):
            sent = 0
            for i in range(12):
                msgs = [{"role": "user", "content": f"conversation {i}"}]
                assert _chat(url, msgs, {}).status_code == 200
                sent += 1
            # every scrape, whichever worker answers it, counts the requests of both
            seen = {
                total(
                    samples(httpx.get(url + "/metrics", timeout=10).text),
                    "contextfold_gateway_requests_total",
                    route="/v1/chat/completions",
                )
                for _ in range(6)
            }
            assert seen == {float(sent)}
    finally:
        fake.stop()
