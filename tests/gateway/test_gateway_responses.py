"""OpenAI Responses through the gateway, driven with the real ``openai`` SDK
(``client.responses.create``) the way Codex CLI sends it: ``input`` items (messages,
``function_call`` / ``function_call_output``, ``reasoning`` with ``encrypted_content``),
``store: false``, ``include``, ``prompt_cache_key``; streamed and not; against a fake upstream
that answers with the Responses API's real errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.gateway.gateway_fake_responses import encrypted_for
from tests.gateway.gateway_fakes import Call, FakeUpstream, Reply, trace_replies
from tests.gateway.gateway_helpers import long_trace, running

TOOLS = [
    {
        "type": "function",
        "name": "bash",
        "description": "Run a shell command.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        "strict": False,
    }
]
KEY = "sk-test-responses-1"


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0, timeout=60)


def _strip_id(item: dict[str, Any]) -> dict[str, Any]:
    """As Codex CLI 0.169 resends output items: ids kept, a reasoning item with an added
    ``"content": null`` (older releases dropped the ids: the gateway matches both)."""
    if item.get("type") == "reasoning":
        return {**item, "content": None}
    return dict(item)


def _ask(
    client: openai.OpenAI,
    instructions: str,
    items: list[Any],
    *,
    stream: bool,
    script: str,
    **extra: Any,
) -> list[dict[str, Any]]:
    """One call; returns the response's output items as the client keeps them."""
    kwargs: dict[str, Any] = {
        "model": "gpt-fake",
        "instructions": instructions,
        "input": items,
        "tools": TOOLS,
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "session-1",
        "extra_headers": {"x-fake-script": script},
        **extra,
    }
    if not stream:
        resp = client.responses.create(**kwargs)
        return [o.model_dump(exclude_none=True) for o in resp.output]
    created = 0
    done: list[dict[str, Any]] = []
    indexes: list[int] = []
    seq: list[int] = []
    final = None
    for event in client.responses.create(stream=True, **kwargs):
        seq.append(event.sequence_number)
        if event.type == "response.created":
            created += 1
            first_id = event.response.id
        elif event.type == "response.output_item.done":
            done.append(event.item.model_dump(exclude_none=True))
            indexes.append(event.output_index)
        elif event.type == "response.completed":
            final = event.response
    # one coherent stream: one response, its items numbered 0, 1, 2 ..., events in order
    assert created == 1 and final is not None
    assert final.id == first_id
    assert indexes == list(range(len(done)))
    assert seq == sorted(seq) and len(set(seq)) == len(seq)
    assert [o.model_dump(exclude_none=True) for o in final.output] == done
    return done


def replay(
    fake: FakeUpstream,
    client: openai.OpenAI,
    trace: list[dict[str, Any]],
    *,
    stream: bool,
    script: str,
    turns: int | None = None,
) -> tuple[str, list[Any], list[Any]]:
    """Drive the client through the trace as Codex would; returns the instructions, the
    input of the last request and the whole input (with the last answer and its outputs)."""
    replies = trace_replies(trace, thinking=True)
    fake.scripts[script] = lambda call: replies.popleft()
    instructions = trace[0]["content"]
    items: list[Any] = [{"type": "message", "role": "user", "content": trace[1]["content"]}]
    outputs = {m["tool_call_id"]: str(m["content"]) for m in trace if m["role"] == "tool"}
    done = 0
    sent: list[Any] = []
    for m in trace[2:]:
        if turns is not None and done >= turns:
            break
        if m["role"] == "user":
            items.append({"type": "message", "role": "user", "content": str(m["content"])})
            continue
        if m["role"] != "assistant":
            continue
        got = _ask(client, instructions, items, stream=stream, script=script)
        sent = list(items)
        assert got[0]["type"] == "reasoning" and got[0]["encrypted_content"]
        expected = [c["id"] for c in m.get("tool_calls") or []]
        assert [o["call_id"] for o in got if o["type"] == "function_call"] == expected
        items.extend(_strip_id(o) for o in got)
        for cid in expected:
            items.append({"type": "function_call_output", "call_id": cid, "output": outputs[cid]})
        done += 1
    return instructions, sent, items


def _check_upstream(fake: FakeUpstream, limit: int) -> None:
    bad = [r.error for r in fake.accepted() if r.error is not None]
    bad += [r.error for r in fake.received if r.error is not None]
    assert not bad, f"the upstream rejected requests: {bad[:3]}"
    for r in fake.received:
        assert r.tokens <= limit
        assert r.headers.get("authorization") == f"Bearer {KEY}"
        body = r.body
        assert body["tools"][: len(TOOLS)] == TOOLS
        # every field the client sent goes upstream as it came
        assert body["store"] is False
        assert body["include"] == ["reasoning.encrypted_content"]
        assert body["prompt_cache_key"] == "session-1"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_long_session_with_compaction_reasoning_passed_through(
    tmp_path: Path, stream: bool
) -> None:
    trace = long_trace(100)
    limit = 14_000
    with running(tmp_path, limit=limit, context_window=10_000) as (fake, gw):
        client = _client(gw.url)
        instructions, asked, items = replay(fake, client, trace, stream=stream, script="t")
        metrics = httpx.get(gw.url + "/metrics").text
    assert len(fake.received) >= 100
    # the fake verifies every reasoning item's encrypted_content and every call's output
    _check_upstream(fake, limit)
    assert 'contextfold_gateway_compactions_total{tier="' in metrics
    assert 'route="/v1/responses",status="200"' in metrics
    assert "branches_total" not in metrics, "the client's resends continue one session"
    last = fake.received[-1].body
    assert last["instructions"] == instructions
    sent = last["input"]
    # the newest items travel exactly as the client sent them (reasoning included)
    tail = asked[-4:]  # the newest exchange: reasoning, message, call, output
    assert sent[-len(tail) :] == tail
    reasoning = [i for i in sent if i.get("type") == "reasoning"]
    assert reasoning
    assert all(r["encrypted_content"] == encrypted_for(r["summary"][0]["text"]) for r in reasoning)
    assert len(json.dumps(sent)) < len(json.dumps(items)), "the view is smaller than the history"


def _recall_script(call: Call) -> Reply:
    results = dict(call.last_tool_results())
    if "call_recall_1" in results:
        assert not results["call_recall_1"].startswith("Error"), results["call_recall_1"]
        return Reply(text="Found it: " + results["call_recall_1"][:40], thinking="now I know")
    last = call.messages[-1]
    if "RECALL" in json.dumps(last):
        assert "recall" in call.tool_names()
        calls = [("call_recall_1", "recall", {"query": "golden section search"})]
        if "MIXED" in json.dumps(last):
            calls.append(("call_bash_9", "bash", {"command": "ls"}))
        return Reply(text="Let me look.", thinking="I should recall", tool_calls=calls)
    return Reply(text="fine", thinking="nothing")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_recall_inside_the_gateway_is_one_response(tmp_path: Path, stream: bool) -> None:
    trace = long_trace(100)
    with running(tmp_path, limit=14_000, context_window=9_000) as (fake, gw):
        client = _client(gw.url)
        instructions, _, items = replay(fake, client, trace, stream=False, script="t", turns=40)
        items.append({"type": "message", "role": "user", "content": "What printed? RECALL"})
        fake.scripts["recall"] = _recall_script
        before = len(fake.received)
        got = _ask(client, instructions, items, stream=stream, script="recall")
        rounds = fake.received[before:]
        # the next turn: the client resends what it saw; the session continues
        items.extend(_strip_id(o) for o in got)
        items.append({"type": "message", "role": "user", "content": "thanks"})
        _ask(client, instructions, items, stream=stream, script="recall")
        metrics = httpx.get(gw.url + "/metrics").text
    assert len(rounds) == 2
    assert [o["type"] for o in got] == ["reasoning", "message", "reasoning", "message"]
    assert got[-1]["content"][0]["text"].startswith("Found it: ")
    assert not [o for o in got if o["type"] == "function_call"]
    assert "contextfold_gateway_gateway_tool_calls_total 1" in metrics
    assert "branches_total" not in metrics
    _check_upstream(fake, 14_000)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_recall_beside_a_client_call_leaves_only_the_clients_call(
    tmp_path: Path, stream: bool
) -> None:
    trace = long_trace(100)
    with running(tmp_path, limit=14_000, context_window=9_000) as (fake, gw):
        client = _client(gw.url)
        instructions, _, items = replay(fake, client, trace, stream=False, script="t", turns=40)
        items.append({"type": "message", "role": "user", "content": "Again. RECALL MIXED"})
        fake.scripts["recall"] = _recall_script
        got = _ask(client, instructions, items, stream=stream, script="recall")
    calls = [o for o in got if o["type"] == "function_call"]
    assert [(c["name"], c["call_id"]) for c in calls] == [("bash", "call_bash_9")]
    assert json.loads(calls[0]["arguments"]) == {"command": "ls"}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_overflow_is_recovered_once_and_the_limit_learned(tmp_path: Path, stream: bool) -> None:
    trace = long_trace(100)
    limit = 6_000
    with running(tmp_path, limit=limit, context_window=60_000) as (fake, gw):
        replay(fake, _client(gw.url), trace, stream=stream, script="t", turns=50)
        metrics = httpx.get(gw.url + "/metrics").text
    overflows = [r for r in fake.received if r.error == "overflow"]
    assert len(overflows) == 1
    assert 'contextfold_gateway_overflow_retries_total{outcome="ok"}' in metrics
    after = fake.received[fake.received.index(overflows[0]) + 1 :]
    assert after and all(r.error is None and r.tokens <= limit for r in after)


def test_a_call_without_its_output_is_repaired_and_an_orphan_output_refused(
    tmp_path: Path,
) -> None:
    dangling = [
        {"type": "message", "role": "user", "content": "run it"},
        {"type": "function_call", "call_id": "call_1", "name": "bash", "arguments": "{}"},
    ]
    orphan = [
        {"type": "message", "role": "user", "content": "run it"},
        {"type": "function_call_output", "call_id": "call_9", "output": "x"},
    ]
    with running(tmp_path) as (fake, gw):
        fake.scripts["x"] = lambda call: Reply(text="ok")
        # the upstream itself refuses a call without its output, with its own words
        direct = httpx.post(fake.url + "/v1/responses", json={"model": "m", "input": dangling})
        got = _ask(_client(gw.url), "be brief", dangling, stream=False, script="x")
        with pytest.raises(openai.BadRequestError) as err:
            _ask(_client(gw.url), "be brief", orphan, stream=False, script="x")
    assert direct.status_code == 400
    assert direct.json()["error"]["message"] == "No tool output found for function call call_1."
    # through the gateway the view is valid: the unanswered call does not go upstream
    assert got[-1]["content"][0]["text"] == "ok"
    assert fake.received[-1].error is None
    assert err.value.status_code == 400
    assert "call_9" in str(err.value)
    assert len(fake.received) == 2  # the orphan never reached the upstream


def test_previous_response_id_is_resolved_by_the_gateway(tmp_path: Path) -> None:
    with running(tmp_path) as (fake, gw):
        fake.scripts["x"] = lambda call: Reply(text=f"answer {len(call.messages)}")
        client = _client(gw.url)
        first = client.responses.create(
            model="gpt-fake",
            instructions="be brief",
            input="first question",
            extra_headers={"x-fake-script": "x"},
        )
        second = client.responses.create(
            model="gpt-fake",
            instructions="be brief",
            input=[{"role": "user", "content": "second question"}],
            previous_response_id=first.id,
            extra_headers={"x-fake-script": "x"},
        )
    assert second.output_text == "answer 3"
    body = fake.received[-1].body
    # the whole conversation went upstream as one view, not as a reference
    assert "previous_response_id" not in body
    assert [i.get("role") for i in body["input"]] == ["user", "assistant", "user"]
    assert body["input"][0]["content"] == "first question"


def test_message_items_of_every_role_and_other_items_are_kept(tmp_path: Path) -> None:
    with running(tmp_path) as (fake, gw):
        fake.scripts["x"] = lambda call: Reply(text="ok")
        items: list[Any] = [
            {"type": "message", "role": "developer", "content": "dev rules"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "message", "role": "system", "content": "mid-conversation system note"},
            {"type": "compaction", "encrypted_content": "opaque-summary"},
            {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "*** x"},
            {"type": "custom_tool_call_output", "call_id": "c1", "output": "patched"},
            {"type": "message", "role": "user", "content": "next"},
        ]
        got = _ask(_client(gw.url), "be brief", items, stream=True, script="x")
    assert got[-1]["content"][0]["text"] == "ok"
    assert fake.received[-1].body["input"] == items


def test_unknown_routes_get_a_shaped_404_counted_and_logged(tmp_path: Path) -> None:
    with running(tmp_path) as (_fake, gw):
        resp = httpx.post(gw.url + "/v1/realtime/sessions", json={}, headers={"x": "y"})
        anth = httpx.post(gw.url + "/v1/messages/batches", json={})
        metrics = httpx.get(gw.url + "/metrics").text
    assert resp.status_code == 404
    assert resp.json()["error"]["type"] == "invalid_request_error"
    assert "/v1/realtime/sessions" in resp.json()["error"]["message"]
    assert anth.status_code == 404 or anth.status_code == 405
    assert anth.json()["type"] == "error"
    assert (
        'contextfold_gateway_requests_total{route="/v1/realtime/sessions",status="404"} 1'
        in metrics
    )
