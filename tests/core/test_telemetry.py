"""OpenTelemetry spans, recorded with the SDK's in-memory exporter: a replayed trajectory
(prepare, compactions and their stages, summarizer calls, restore, recall, evidence
injection) and a gateway turn; and no cost without the otel extra."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_module

require_module("opentelemetry.trace")
require_module("opentelemetry.sdk.trace")

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from contextfold import ContextManager  # noqa: E402
from contextfold.engine.export import records_of  # noqa: E402
from contextfold.storage import open_store  # noqa: E402
from tests.inspector.inspector_support import replay  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    current = trace.get_tracer_provider()
    if not isinstance(current, TracerProvider):  # set once per process (the API's rule)
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def _named(exporter: InMemorySpanExporter, name: str) -> list[Any]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def test_a_replay_reports_prepare_compactions_stages_and_summaries(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    done = replay(tmp_path / "ws")
    store = open_store(str(tmp_path / "ws"))
    try:
        records = records_of(store, done.session_id)
    finally:
        store.close()
    prepares = _named(spans, "contextfold.prepare")
    assert len(prepares) == done.calls
    assert all(s.attributes["gen_ai.conversation.id"] == done.session_id for s in prepares)
    assert all(s.attributes["contextfold.view.tokens"] > 0 for s in prepares)
    changed = [
        s
        for s in _named(spans, "contextfold.compaction")
        if s.attributes["contextfold.tier"] != "none"
    ]
    assert [
        (s.attributes["contextfold.tier"], s.attributes["contextfold.tokens.after"])
        for s in changed
    ] == [(r.tier.value, r.tokens_after) for r in records]
    ids = {s.context.span_id: s for s in _named(spans, "contextfold.compaction")}
    stages = _named(spans, "contextfold.compaction.summarize")
    assert stages and all(s.parent.span_id in ids for s in stages)
    # a compaction is the child of the prepare that ran it
    prepare_ids = {s.context.span_id for s in prepares}
    assert all(s.parent.span_id in prepare_ids for s in ids.values())
    summaries = _named(spans, "contextfold.summarize")
    assert len(summaries) >= sum(1 for r in records if r.summarized)
    assert all(s.attributes["gen_ai.operation.name"] == "chat" for s in summaries)
    stage_ids = {s.context.span_id for s in stages}
    assert all(s.parent.span_id in stage_ids for s in summaries)
    injections = _named(spans, "contextfold.evidence.inject")
    assert injections and all("contextfold.injected.chars" in s.attributes for s in injections)

    spans.clear()
    with ContextManager(store=str(tmp_path / "ws"), session_id=done.session_id) as cm:
        hits = cm.restore("pytest L060", k=3)
        call = {
            "id": "c1",
            "type": "function",
            "function": {"name": "recall", "arguments": json.dumps({"query": "pytest L060"})},
        }
        answer = cm.handle_tool_call(call)
    (restore,) = _named(spans, "contextfold.restore")
    assert restore.attributes["contextfold.hits"] == len(hits) > 0
    (tool,) = _named(spans, "contextfold.tool")
    assert tool.attributes["gen_ai.tool.name"] == "recall"
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert "Error" not in answer["content"][:20]


def test_a_gateway_turn_is_a_span_with_the_genai_attributes(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    require_module("starlette")
    httpx = require_module("httpx")
    from tests.gateway.gateway_helpers import running

    with running(tmp_path) as (_fake, gw):
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}]}
        headers = {"authorization": "Bearer sk-1", "x-contextfold-session": "otel"}
        r = httpx.post(gw.url + "/v1/chat/completions", json=body, headers=headers, timeout=30)
        assert r.status_code == 200
    (turn,) = _named(spans, "contextfold.gateway.turn")
    a = turn.attributes
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.provider.name"] == "openai"
    assert a["gen_ai.request.model"] == "gpt-4o"
    assert a["gen_ai.conversation.id"].startswith("otel-")
    assert a["contextfold.view.tokens"] > 0
    assert turn.end_time >= turn.start_time
    assert _named(spans, "contextfold.prepare")


def test_without_opentelemetry_spans_are_one_shared_no_op(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "from contextfold import ContextManager\nfrom contextfold.core import telemetry\n"
        "assert not telemetry.enabled()\n"
        "a = telemetry.span('x', {'k': 1}); b = telemetry.span('y')\n"
        "assert a is b\n"
        "with a as s: assert s is None\n"
        f"cm = ContextManager(store={str(tmp_path / 'ws')!r}, session_id='s', context_window=4000)\n"
        "cm.add({'role': 'user', 'content': 'hi'}); cm.prepare(); cm.close()\n"
        "assert 'opentelemetry.trace' not in sys.modules\n"
        "print('ok')\n"
    )
    env = {"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
