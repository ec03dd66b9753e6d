"""The gateway end to end with the official ``google-genai`` SDK, the way Gemini CLI talks:
long sessions over the scripted upstream's limit (Gemini 3's thought signatures checked), the
client's own call ids written into its history, thought parts left out of it, the gateway's
``recall`` as a function declaration, JSON-mode side calls relayed and never stored, the
repeated tool results of ``--resume`` repaired, errors in Google's shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from google import genai
from google.genai import errors, types

from tests.gateway.gateway_fake_gemini import PAIRING, gemini_tokens
from tests.gateway.gateway_fakes import Call, FakeUpstream, Reply, trace_replies
from tests.gateway.gateway_helpers import long_trace, running
from tests.support.store_helpers import session_ids

KEY = "AIza-test-key-789"
MODEL = "gemini-3-pro-preview"  # the scripted upstream checks thought signatures for gemini-3
BASH = {
    "name": "bash",
    "description": "Run a shell command.",
    "parametersJsonSchema": {"type": "object", "properties": {"command": {"type": "string"}}},
}
TOOLS = [{"functionDeclarations": [BASH]}]


def _client(url: str) -> genai.Client:
    return genai.Client(api_key=KEY, http_options=types.HttpOptions(base_url=url, timeout=60_000))


def _config(system: str, script: str, **extra: Any) -> types.GenerateContentConfig:
    return types.GenerateContentConfig(
        system_instruction=system,
        tools=[types.Tool.model_validate(t) for t in TOOLS],
        http_options=types.HttpOptions(headers={"x-fake-script": script}),
        **extra,
    )


def ask(
    client: genai.Client, system: str, contents: list[Any], *, stream: bool, script: str
) -> list[dict[str, Any]]:
    """The model's parts, as JSON dicts (one streamed answer joined as Gemini CLI joins it)."""
    config = _config(system, script)
    if not stream:
        resp = client.models.generate_content(model=MODEL, contents=contents, config=config)
        content = resp.candidates[0].content
        return [p.model_dump(mode="json", exclude_none=True) for p in content.parts or []]
    parts: list[dict[str, Any]] = []
    for chunk in client.models.generate_content_stream(
        model=MODEL, contents=contents, config=config
    ):
        for p in chunk.candidates[0].content.parts or []:
            part = p.model_dump(mode="json", exclude_none=True)
            prev = parts[-1] if parts else {}
            plain = "text" in part and not part.get("thought")
            if plain and "text" in prev and not prev.get("thought"):
                prev["text"] += part["text"]
                continue
            parts.append(part)
    return parts


def _history_parts(parts: list[dict[str, Any]], ids: list[str]) -> list[dict[str, Any]]:
    """What Gemini CLI keeps of an answer: no thought parts; its own id in each call."""
    out = []
    calls = iter(ids)
    for p in parts:
        if p.get("thought"):
            continue
        p = dict(p)
        if "function_call" in p:
            p["function_call"] = {**p["function_call"], "id": next(calls)}
        out.append(p)
    return out


def replay(
    fake: FakeUpstream,
    client: genai.Client,
    trace: list[dict[str, Any]],
    *,
    stream: bool,
    script: str,
    turns: int | None = None,
) -> tuple[str, list[Any]]:
    """Drive the client through the trace; returns the system instruction and the whole
    conversation (with the last answer and its function responses)."""
    replies = trace_replies(trace, thinking=True)
    fake.scripts[script] = lambda call: replies.popleft()
    system = trace[0]["content"]
    contents: list[Any] = [{"role": "user", "parts": [{"text": trace[1]["content"]}]}]
    outputs = {m["tool_call_id"]: m["content"] for m in trace if m["role"] == "tool"}
    i, done, n = 2, 0, 0
    while i < len(trace) and (turns is None or done < turns):
        m = trace[i]
        i += 1
        if m["role"] == "user":
            contents.append({"role": "user", "parts": [{"text": m["content"]}]})
            continue
        if m["role"] != "assistant":
            continue
        parts = ask(client, system, contents, stream=stream, script=script)
        calls = [c for c in m.get("tool_calls") or []]
        ids = []
        for c in calls:
            n += 1
            ids.append(f"{c['function']['name']}-{n}")
        contents.append({"role": "model", "parts": _history_parts(parts, ids)})
        if calls:
            responses = [
                {
                    "function_response": {
                        "id": cid,
                        "name": c["function"]["name"],
                        "response": {"output": str(outputs[c["id"]])},
                    }
                }
                for c, cid in zip(calls, ids)
            ]
            contents.append({"role": "user", "parts": responses})
        while i < len(trace) and trace[i]["role"] == "tool":
            i += 1
        done += 1
    return system, contents


def _check_upstream(fake: FakeUpstream, limit: int) -> None:
    bad = [r.error for r in fake.received if r.error is not None]
    assert not bad, f"the upstream rejected requests: {bad[:3]}"
    for r in fake.received:
        assert r.tokens <= limit
        assert r.headers.get("x-goog-api-key") == KEY  # the client's key reaches the upstream
        assert r.body["tools"][0]["functionDeclarations"][0]["name"] == "bash"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_hundred_turn_session_compacts_under_the_limit(tmp_path: Path, stream: bool) -> None:
    trace = long_trace(100)
    limit = 14_000
    with running(tmp_path, limit=limit, context_window=11_000) as (fake, gw):
        system, contents = replay(fake, _client(gw.url), trace, stream=stream, script="trace")
        metrics = httpx.get(gw.url + "/metrics").text
    assert len(fake.received) >= 100
    _check_upstream(fake, limit)  # thought signatures of the active loop verified each time
    assert 'contextfold_gateway_compactions_total{tier="' in metrics
    # the recorded answers (no call ids) are the turns the client resends (with its ids)
    assert "branches_total" not in metrics
    last = fake.received[-1].body
    assert last["systemInstruction"]["parts"][0]["text"] == system
    assert last["contents"][0]["parts"][0]["text"] == trace[1]["content"]  # the task stays
    assert len(last["contents"]) < len(contents) - 1  # compacted: fewer turns than the client's
    assert last["contents"][-1]["role"] == "user"
    assert 'route="/v1/models/{target:path}"' in metrics


def _recall_script(call: Call) -> Reply:
    results = dict(call.last_tool_results())
    if "recall" in results:
        return Reply(text="Found it: " + results["recall"][:60], thinking="now I know")
    last = call.messages[-1]["parts"][-1]
    if "RECALL" in str(last.get("text")):
        assert "recall" in call.tool_names()
        return Reply(
            text="Looking.",
            thinking="I should recall",
            tool_calls=[("r1", "recall", {"query": "golden section"})],
        )
    return Reply(text="fine", thinking="nothing")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_recall_inside_the_gateway_is_one_answer(tmp_path: Path, stream: bool) -> None:
    trace = long_trace(100)
    with running(tmp_path, limit=14_000, context_window=9_000) as (fake, gw):
        client = _client(gw.url)
        system, contents = replay(fake, client, trace, stream=False, script="trace", turns=40)
        contents.append({"role": "user", "parts": [{"text": "What did the search print? RECALL"}]})
        fake.scripts["recall"] = _recall_script
        before = len(fake.received)
        parts = ask(client, system, contents, stream=stream, script="recall")
        assert len(fake.received) - before == 2
        declared = fake.received[before].body["tools"][0]["functionDeclarations"]
        recall = next(d for d in declared if d["name"] == "recall")
        assert recall["parametersJsonSchema"]["type"] == "object"
        # the gateway's call and its answer never reach the client
        assert not any("function_call" in p for p in parts)
        text = "".join(p.get("text", "") for p in parts if not p.get("thought"))
        assert text.startswith("Looking.Found it: ")
        contents.append({"role": "model", "parts": _history_parts(parts, [])})
        contents.append({"role": "user", "parts": [{"text": "thanks"}]})
        ask(client, system, contents, stream=stream, script="recall")
        metrics = httpx.get(gw.url + "/metrics").text
    _check_upstream(fake, 14_000)
    assert "contextfold_gateway_gateway_tool_calls_total 1" in metrics
    assert "branches_total" not in metrics


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_overflow_is_recovered_once_and_the_limit_learned(tmp_path: Path, stream: bool) -> None:
    trace = long_trace(100)
    limit = 6_000
    with running(tmp_path, limit=limit, context_window=60_000) as (fake, gw):
        replay(fake, _client(gw.url), trace, stream=stream, script="trace", turns=50)
        metrics = httpx.get(gw.url + "/metrics").text
    overflows = [i for i, r in enumerate(fake.received) if r.error == "overflow"]
    assert len(overflows) == 1, [r.error for r in fake.received if r.error]
    assert 'contextfold_gateway_overflow_retries_total{outcome="ok"}' in metrics
    later = fake.received[overflows[0] + 1 :]
    assert later and all(r.error is None and r.tokens <= limit for r in later)


def test_mixed_gateway_and_client_calls_in_a_stream(tmp_path: Path) -> None:
    trace = long_trace(100)
    with running(tmp_path, limit=14_000, context_window=9_000) as (fake, gw):
        client = _client(gw.url)
        system, contents = replay(fake, client, trace, stream=False, script="trace", turns=40)
        fake.scripts["mixed"] = lambda call: Reply(
            text="Two things.",
            tool_calls=[("a", "recall", {"query": "error"}), ("b", "bash", {"command": "ls"})],
        )
        contents.append({"role": "user", "parts": [{"text": "check RECALL"}]})
        parts = ask(client, system, contents, stream=True, script="mixed")
    calls = [p["function_call"] for p in parts if "function_call" in p]
    assert calls == [{"name": "bash", "args": {"command": "ls"}}]
    assert parts[0]["text"] == "Two things."


def test_json_mode_side_calls_are_relayed_and_not_stored(tmp_path: Path) -> None:
    with running(tmp_path) as (fake, gw):
        client = _client(gw.url)
        ask(client, "sys", [{"role": "user", "parts": [{"text": "hi"}]}], stream=True, script="x")
        stored = session_ids(tmp_path / "ws")
        # Gemini CLI's model router: JSON mode, its own system prompt, recent turns
        fake.default = lambda call: Reply(text='{"reasoning": "simple", "model_choice": "flash"}')
        resp = client.models.generate_content(
            model="gemini-2.5-flash-lite",
            contents=[{"role": "user", "parts": [{"text": "hi"}]}],
            config=types.GenerateContentConfig(
                system_instruction="You are a routing classifier.",
                response_mime_type="application/json",
                response_json_schema={"type": "object"},
            ),
        )
        assert json.loads(resp.text)["model_choice"] == "flash"
        assert session_ids(tmp_path / "ws") == stored
    side = fake.received[-1]
    assert side.body["generationConfig"]["responseMimeType"] == "application/json"
    assert side.body["systemInstruction"]["parts"][0]["text"] == "You are a routing classifier."
    assert "tools" not in side.body  # nothing added to a side call
    assert side.headers.get("x-goog-api-key") == KEY


def _resumed(twice: bool) -> dict[str, Any]:
    response = {
        "functionResponse": {"id": "bash-1", "name": "bash", "response": {"output": "a.txt"}}
    }
    contents = [
        {"role": "user", "parts": [{"text": "list the files"}]},
        {
            "role": "model",
            "parts": [
                {
                    "functionCall": {"id": "bash-1", "name": "bash", "args": {"command": "ls"}},
                    "thoughtSignature": "skip_thought_signature_validator",
                }
            ],
        },
        # as Gemini CLI 0.61's --resume sends it: each result twice in its turn
        {"role": "user", "parts": [response, response] if twice else [response]},
        {"role": "model", "parts": [{"text": "One file."}]},
    ]
    contents.append({"role": "user", "parts": [{"text": "and now?"}]})
    return {"contents": contents, "tools": TOOLS}


def test_resume_repeating_every_tool_result_is_repaired(tmp_path: Path) -> None:
    url = f"/v1beta/models/{MODEL}:generateContent"
    headers = {"x-goog-api-key": KEY}
    with running(tmp_path) as (fake, gw):
        direct = httpx.post(fake.url + url, json=_resumed(True), headers=headers)
        through = httpx.post(gw.url + url, json=_resumed(True), headers=headers)
        # the next turn, without the repeat: the same session goes on
        nxt = _resumed(False)
        nxt["contents"] += [
            through.json()["candidates"][0]["content"],
            {"role": "user", "parts": [{"text": "thanks"}]},
        ]
        clean = httpx.post(gw.url + url, json=nxt, headers=headers)
    # Gemini itself refuses the repeated results ...
    assert direct.status_code == 400 and direct.json()["error"]["message"] == PAIRING
    # ... the gateway drops the exact repeat and the conversation goes on, in one session
    assert through.status_code == 200, through.text
    assert clean.status_code == 200
    assert through.headers["x-contextfold-session"] == clean.headers["x-contextfold-session"]
    sent = fake.received[1].body["contents"]
    answers = [p for c in sent for p in c["parts"] if "functionResponse" in p]
    assert len(answers) == 1


def test_resume_repeats_in_side_calls_are_repaired_too(tmp_path: Path) -> None:
    url = "/v1beta/models/gemini-2.5-flash-lite:generateContent"
    body = _resumed(True)
    del body["tools"]
    body["generationConfig"] = {"responseMimeType": "application/json"}  # the model router
    headers = {"x-goog-api-key": KEY}
    with running(tmp_path) as (fake, gw):
        fake.default = lambda call: Reply(text='{"complexity_score": 10}')
        direct = httpx.post(fake.url + url, json=body, headers=headers)
        through = httpx.post(gw.url + url, json=body, headers=headers)
    assert direct.status_code == 400 and through.status_code == 200, through.text
    assert [r.error for r in fake.received] == [PAIRING, None]


def test_errors_are_shaped_as_google_returns_them(tmp_path: Path) -> None:
    # two calls, one answer (a call followed by no answer at all is Gemini CLI's abandoned
    # call, which the gateway repairs)
    call = {"functionCall": {"name": "bash", "args": {}}}
    answer = {"functionResponse": {"name": "bash", "response": {"output": "x"}}}
    unanswered = {
        "contents": [
            {"role": "user", "parts": [{"text": "go"}]},
            {"role": "model", "parts": [call, call]},
            {"role": "user", "parts": [answer]},
        ]
    }
    with running(tmp_path) as (fake, gw):
        client = _client(gw.url)
        with pytest.raises(errors.ClientError) as info:
            client.models.generate_content(model=MODEL, contents=unanswered["contents"])
        missing = httpx.post(gw.url + "/v1beta/models/nope:frobnicate", json={})
        no_route = httpx.post(gw.url + "/v1beta/tunedModels/x:generateContent", json={})
        not_sse = httpx.post(
            gw.url + f"/v1beta/models/{MODEL}:streamGenerateContent",
            json=unanswered,
            headers={"x-goog-api-key": KEY},
        )
    assert info.value.code == 400 and info.value.status == "INVALID_ARGUMENT"
    assert PAIRING in str(info.value.message)
    # the gateway said so itself: nothing stored or sent; only the unknown method went on
    assert [r.path for r in fake.received] == ["/v1beta/models/nope:frobnicate"]
    assert missing.status_code == 403  # passed through: the fake wants an API key
    assert missing.json()["error"]["status"] == "PERMISSION_DENIED"
    body = no_route.json()
    assert no_route.status_code == 404
    assert body["error"]["code"] == 404 and body["error"]["status"] == "NOT_FOUND"
    assert not_sse.status_code == 400 and "alt=sse" in not_sse.json()["error"]["message"]


def test_count_tokens_passes_through(tmp_path: Path) -> None:
    with running(tmp_path) as (fake, gw):
        client = _client(gw.url)
        counted = client.models.count_tokens(model=MODEL, contents="hello there")
    assert counted.total_tokens and counted.total_tokens > 0
    assert not fake.received  # counting is not a turn: nothing recorded upstream or stored
    assert not session_ids(tmp_path / "ws")


def test_evidence_is_injected_when_the_user_asks_for_it(tmp_path: Path) -> None:
    trace = long_trace(100)
    with running(tmp_path, limit=12_000, context_window=8_000) as (fake, gw):
        client = _client(gw.url)
        system, contents = replay(fake, client, trace, stream=False, script="trace", turns=40)
        fake.scripts["plain"] = lambda call: Reply(text="Here it is.")
        question = "What was the exact error output of the first test run earlier?"
        contents.append({"role": "user", "parts": [{"text": question}]})
        ask(client, system, contents, stream=True, script="plain")
    sent = fake.received[-1]
    assert sent.error is None
    # one user turn: the restored evidence, then the client's own question, last
    texts = [p.get("text", "") for p in sent.body["contents"][-1]["parts"]]
    assert texts[-1] == question
    assert any("Historical evidence restored from before a context" in t for t in texts[:-1])


def test_the_upstream_model_writes_the_summaries(tmp_path: Path) -> None:
    trace = long_trace(100)

    def script(call: Call) -> Reply:
        if not call.body.get("tools"):
            return Reply(text="### Task\nfix the bug\n## Summary\nThe agent read the sources.")
        return Reply(text=f"step {len(call.messages)}: " + "y" * 600)

    with running(tmp_path, limit=12_000, context_window=8_000, summarizer="upstream") as (fake, gw):
        fake.scripts["s"] = script
        client = _client(gw.url)
        system = trace[0]["content"]
        contents: list[Any] = [{"role": "user", "parts": [{"text": trace[1]["content"]}]}]
        n = 0
        while not [r for r in fake.received if not r.body.get("tools")] and n < 60:
            n += 1
            parts = ask(client, system, contents, stream=False, script="s")
            contents.append({"role": "model", "parts": _history_parts(parts, [])})
            contents.append({"role": "user", "parts": [{"text": f"go on {n} " + "x" * 900}]})
    summary_calls = [r for r in fake.received if not r.body.get("tools")]
    assert summary_calls, "a compaction asked the upstream model for a summary"
    call = summary_calls[0]
    assert call.path.endswith(f"/models/{MODEL}:generateContent")
    assert call.headers["x-goog-api-key"] == KEY
    assert call.body["contents"] and call.error is None


def test_a_side_call_over_the_window_teaches_the_limit_once(tmp_path: Path) -> None:
    def loop_check(n: int) -> dict[str, Any]:
        contents: list[Any] = [{"role": "user", "parts": [{"text": "Recent history:"}]}]
        for k in range(8):
            fc = {"id": f"b-{n}-{k}", "name": "bash", "args": {"k": k}}
            fr = {"id": f"b-{n}-{k}", "name": "bash", "response": {"output": "q" * 4_000}}
            contents.append({"role": "model", "parts": [{"functionCall": fc}]})
            contents.append({"role": "user", "parts": [{"functionResponse": fr}]})
        contents.append({"role": "user", "parts": [{"text": "Is the agent looping?"}]})
        return {
            "contents": contents,
            "generationConfig": {
                "responseMimeType": "application/json",
                "responseJsonSchema": {"type": "object"},
            },
        }

    url = "/v1beta/models/gemini-2.5-flash:generateContent"
    headers = {"x-goog-api-key": KEY}
    with running(tmp_path, limit=6_000, context_window=60_000) as (fake, gw):
        fake.default = lambda call: Reply(text='{"unproductive_state_confidence": 0.1}')
        first = httpx.post(gw.url + url, json=loop_check(1), headers=headers)
        second = httpx.post(gw.url + url, json=loop_check(2), headers=headers)
    assert first.status_code == 200 and second.status_code == 200
    assert [r.error for r in fake.received] == ["overflow", None, None]
    assert all(r.tokens <= 6_000 for r in fake.received[1:])
    assert not session_ids(tmp_path / "ws")  # side calls are never stored


def test_a_blocked_prompt_is_passed_back_as_gemini_sent_it(tmp_path: Path) -> None:
    blocked = {
        "promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
        "usageMetadata": {"promptTokenCount": 7, "totalTokenCount": 7},
        "modelVersion": MODEL,
    }
    url = f"/v1beta/models/{MODEL}:generateContent"
    with running(tmp_path) as (fake, gw):
        fake.failures.append((200, blocked, 0.0))
        resp = httpx.post(
            gw.url + url,
            json={"contents": [{"role": "user", "parts": [{"text": "something"}]}]},
            headers={"x-goog-api-key": KEY},
        )
    assert resp.status_code == 200 and resp.json() == blocked


def test_two_api_keys_are_two_sessions(tmp_path: Path) -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": "the same start"}]}]}
    url = f"/v1beta/models/{MODEL}:generateContent"
    with running(tmp_path) as (fake, gw):
        one = httpx.post(gw.url + url, json=body, headers={"x-goog-api-key": "key-one"})
        two = httpx.post(gw.url + url, json=body, headers={"x-goog-api-key": "key-two"})
    assert one.status_code == two.status_code == 200
    # not one conversation and its branch: two conversations
    first, second = (r.headers["x-contextfold-session"].split(".")[0] for r in (one, two))
    assert first != second
    assert [r.headers["x-goog-api-key"] for r in fake.received] == ["key-one", "key-two"]


def test_an_upstream_gone_silent_mid_stream_ends_it_with_a_google_error(tmp_path: Path) -> None:
    url = f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse"
    body = {"contents": [{"role": "user", "parts": [{"text": "slowly"}]}]}
    with running(tmp_path, upstream_timeout=0.5) as (fake, gw):
        fake.default = lambda call: Reply(text="x" * 64, event_delay=2.0)
        with httpx.stream(
            "POST", gw.url + url, json=body, headers={"x-goog-api-key": KEY}, timeout=30
        ) as resp:
            raw = resp.read().decode()
    assert resp.status_code == 200  # the stream had begun
    events = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: ")]
    assert events[-1] == {
        "error": {
            "code": 504,
            "message": "the upstream did not answer in time",
            "status": "DEADLINE_EXCEEDED",
        }
    }


def test_the_scripted_upstream_checks_gemini_3_signatures(tmp_path: Path) -> None:
    def body(part: dict[str, Any]) -> dict[str, Any]:
        return {
            "contents": [
                {"role": "user", "parts": [{"text": "go"}]},
                {"role": "model", "parts": [part]},
                {"role": "user", "parts": [_resp_part()]},
            ]
        }

    call = {"functionCall": {"name": "bash", "args": {}}}
    headers = {"x-goog-api-key": KEY}
    with running(tmp_path) as (fake, _gw):
        bare = httpx.post(
            fake.url + f"/v1beta/models/{MODEL}:generateContent", json=body(call), headers=headers
        )
        older = httpx.post(
            fake.url + "/v1beta/models/gemini-2.5-pro:generateContent",
            json=body(call),
            headers=headers,
        )
        skipped = httpx.post(
            fake.url + f"/v1beta/models/{MODEL}:generateContent",
            json=body({**call, "thoughtSignature": "skip_thought_signature_validator"}),
            headers=headers,
        )
    assert bare.status_code == 400 and "thought_signature" in bare.json()["error"]["message"]
    assert older.status_code == 200 and skipped.status_code == 200


def _resp_part() -> dict[str, Any]:
    return {"functionResponse": {"name": "bash", "response": {"output": "ok"}}}


def test_a_side_call_of_another_model_fits_the_limit_the_conversation_taught(
    tmp_path: Path,
) -> None:
    trace = long_trace(100)
    with running(tmp_path, limit=6_000, context_window=60_000) as (fake, gw):
        _, contents = replay(fake, _client(gw.url), trace, stream=True, script="t", turns=30)
        assert [r.error for r in fake.received].count("overflow") == 1  # the main model's
        # Gemini CLI's loop check: another model, recent turns, JSON mode
        side = {
            "contents": [*contents, {"role": "user", "parts": [{"text": "Looping?"}]}],
            "generationConfig": {"responseMimeType": "application/json"},
        }
        assert gemini_tokens(side) > 6_000  # as it is, it would not fit
        fake.default = lambda call: Reply(text='{"unproductive_state_confidence": 0.0}')
        before = len(fake.received)
        resp = httpx.post(
            gw.url + "/v1beta/models/gemini-2.5-flash:generateContent",
            json=side,
            headers={"x-goog-api-key": KEY},
        )
    assert resp.status_code == 200, resp.text
    assert [r.error for r in fake.received[before:]] == [None]  # no second overflow to learn
    assert fake.received[-1].tokens <= 6_000
