"""Sessions for stateless clients: rewrites branch, shared system prompts stay apart, one
session never interleaves, disconnects / timeouts / 5xx record nothing twice."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from contextfold import ContextManager
from contextfold.recovery.sessions.log import entry_of
from contextfold.storage import open_store
from tests.gateway.gateway_fakes import Call, Reply
from tests.gateway.gateway_helpers import running
from tests.support.store_helpers import session_ids

SYSTEM = {"role": "system", "content": "You are a careful coding agent."}


def _client(url: str, key: str = "sk-test-1") -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=30)


def _echo(call: Call) -> Reply:
    last = call.messages[-1]
    return Reply(text=f"answer to: {str(last.get('content'))[:40]}")


def _sessions(tmp_path: Path) -> dict[str, list[Any]]:
    out = {}
    for sid in session_ids(tmp_path / "ws"):
        cm = ContextManager(tmp_path / "ws", session_id=sid)
        if cm.history:
            out[sid] = cm.history
    return out


def _chat(client: openai.OpenAI, messages: list[Any], **kw: Any) -> dict[str, Any]:
    resp = client.chat.completions.create(model="gpt-fake", messages=messages, **kw)
    return resp.choices[0].message.model_dump(exclude_none=True)


def test_a_clients_own_compaction_continues_the_session_and_an_edited_past_branches(
    tmp_path: Path,
) -> None:
    with running(tmp_path) as (fake, gw):
        fake.default = _echo
        client = _client(gw.url)
        messages: list[Any] = [SYSTEM, {"role": "user", "content": "fix the parser"}]
        for n in range(5):
            messages.append(_chat(client, messages))
            messages.append({"role": "user", "content": f"next step {n}"})
        messages.append(_chat(client, messages))
        original = list(messages)
        # the client runs its own /compact: the middle becomes one summary message
        rewritten = [SYSTEM, original[1], {"role": "user", "content": "Summary: steps 0-4 done."}]
        rewritten.append(_chat(client, rewritten))
        rewritten.append({"role": "user", "content": "continue"})
        rewritten.append(_chat(client, rewritten))  # a plain append again
        # the original conversation continued from an old message: the other line, a branch
        edited = [*original[:4], {"role": "user", "content": "next step 0, but edited"}]
        edited.append(_chat(client, edited))
        metrics = httpx.get(gw.url + "/metrics").text
        upstream = [c.body["messages"] for c in fake.accepted()]
    assert "contextfold_gateway_branches_total 1" in metrics
    assert "contextfold_gateway_client_rewrites_total 1" in metrics
    # every upstream request was the client's conversation as it sent it
    assert [m["content"] for m in upstream[-2]] == [m["content"] for m in rewritten[:-1]]
    stored = _sessions(tmp_path)
    base = min(stored, key=len)
    assert sorted(stored) == [base, f"{base}.b1"]
    # nothing was destroyed: the original conversation, then what the rewrite added
    assert [m.text for m in stored[base][: len(original)]] == [
        str(m.get("content")) for m in original
    ]
    assert len(stored[base]) == len(original) + 4
    cm = ContextManager(tmp_path / "ws", session_id=base)
    assert [m.text for m in cm.view_messages] == [str(m.get("content")) for m in rewritten]
    (event,) = cm.store.read(base, kinds=["rewrite"])
    note = event.data["note"]
    assert note["by"] == "client" and note["replaced"] == list(range(2, len(original)))
    assert note["with"] == [len(original), len(original) + 1] and note["kept"] == 2
    cm.close()
    branch = stored[f"{base}.b1"]
    assert [m.text for m in branch] == [str(m.get("content")) for m in edited]
    # the branch shares the 2 messages it has in common with the base session's conversation
    # (stored once, in the base session) and notes where it came from in its own log
    store = open_store(tmp_path / "ws")
    info = store.session(f"{base}.b1")
    assert info is not None and info.parent_id == base and info.messages == len(edited)
    (event,) = store.read(f"{base}.b1", kinds=["branch"])
    assert event.data["branch_of"] == base and event.data["diverged_at"] == 2
    own = store.read(f"{base}.b1", start=info.fork_at, kinds=["message"])
    assert [entry_of(e).message.text for e in own] == [m["content"] for m in edited[2:]]
    store.close()


def test_conversations_sharing_a_system_prompt_stay_apart(tmp_path: Path) -> None:
    with running(tmp_path) as (fake, gw):
        fake.default = _echo
        convs: dict[str, list[Any]] = {}
        errors: list[BaseException] = []

        def worker(name: str, key: str) -> None:
            try:
                client = _client(gw.url, key)
                msgs: list[Any] = [SYSTEM, {"role": "user", "content": f"task {name}"}]
                for n in range(8):
                    msgs.append(_chat(client, msgs))
                    msgs.append({"role": "user", "content": f"{name} step {n}"})
                convs[name] = msgs[:-1]
            except BaseException as exc:  # surfaced below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(f"c{i}", f"sk-{i % 2}")) for i in range(6)]
        # and the same conversation start under two different API keys
        threads += [
            threading.Thread(target=worker, args=("same", "sk-a")),
            threading.Thread(target=worker, args=("same2", "sk-b")),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors
    stored = _sessions(tmp_path)
    assert len(stored) == 8
    by_task = {h[1].text: h for h in stored.values()}
    for name, msgs in convs.items():
        history = by_task[f"task {name}"]
        assert [m.text for m in history] == [str(m.get("content")) for m in msgs]


def test_explicit_session_header_and_a_hostile_one(tmp_path: Path) -> None:
    with running(tmp_path) as (fake, gw):
        fake.default = _echo
        client = _client(gw.url)
        _chat(
            client,
            [SYSTEM, {"role": "user", "content": "hi"}],
            extra_headers={"X-Contextfold-Session": "team-42"},
        )
        with pytest.raises(openai.BadRequestError) as err:
            _chat(
                client,
                [SYSTEM, {"role": "user", "content": "hi"}],
                extra_headers={"X-Contextfold-Session": "../../etc"},
            )
    assert "x-contextfold-session" in str(err.value)
    # the name is kept apart per credential: <name>-<hash of the provider key>
    (stored,) = list(_sessions(tmp_path))
    assert stored.startswith("team-42-") and len(stored) == len("team-42-") + 12
    assert all("x-contextfold-session" not in r.headers for r in fake.received)


def test_client_disconnect_mid_stream_records_nothing(tmp_path: Path) -> None:
    with running(tmp_path) as (fake, gw):
        fake.default = lambda call: Reply(text="x" * 3000, event_delay=0.01)
        body = {
            "model": "m",
            "stream": True,
            "messages": [SYSTEM, {"role": "user", "content": "long answer please"}],
        }
        with (
            httpx.Client(timeout=10) as h,
            h.stream(
                "POST",
                gw.url + "/v1/chat/completions",
                json=body,
                headers={"authorization": "Bearer sk-1"},
            ) as resp,
        ):
            assert resp.status_code == 200
            it = resp.iter_raw()
            assert next(it).startswith(b"data: ")
            # the client goes away after the first event
        # the session lock was released: the same conversation is served again at once
        fake.default = _echo
        started = time.perf_counter()
        again = _chat(_client(gw.url, "sk-1"), body["messages"])
        assert time.perf_counter() - started < 5
        metrics = httpx.get(gw.url + "/metrics").text
    assert again["content"].startswith("answer to:")
    assert "branches_total" not in metrics  # the cut answer was never recorded
    (history,) = _sessions(tmp_path).values()
    assert [m.role for m in history] == ["system", "user", "assistant"]
    assert history[-1].text.startswith("answer to:")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_upstream_timeout_and_5xx_pass_back_and_record_nothing_twice(
    tmp_path: Path, stream: bool
) -> None:
    with running(tmp_path, upstream_timeout=0.5) as (fake, gw):
        fake.default = _echo
        client = _client(gw.url)
        messages = [SYSTEM, {"role": "user", "content": "do it"}]
        kw: dict[str, Any] = {"stream": True} if stream else {}
        fake.failures.append((200, {"late": True}, 2.0))
        with pytest.raises(openai.APIStatusError) as timeout:
            r = client.chat.completions.create(model="m", messages=messages, **kw)
            if stream:
                list(r)  # type: ignore[arg-type]
        assert timeout.value.status_code == 504
        body = {
            "error": {
                "message": "The server had an error while processing your request.",
                "type": "server_error",
                "param": None,
                "code": None,
            }
        }
        fake.failures.append((500, body, 0.0))
        with pytest.raises(openai.InternalServerError) as failed:
            r = client.chat.completions.create(model="m", messages=messages, **kw)
            if stream:
                list(r)  # type: ignore[arg-type]
        assert failed.value.status_code == 500
        assert failed.value.body == body["error"]  # passed back as the upstream sent it
        messages.append(_chat(client, messages))
        messages.append({"role": "user", "content": "and then?"})
        _chat(client, messages)
        metrics = httpx.get(gw.url + "/metrics").text
    (history,) = _sessions(tmp_path).values()
    assert [m.role for m in history] == ["system", "user", "assistant", "user", "assistant"]
    assert (
        'contextfold_gateway_requests_total{route="/v1/chat/completions",status="504"} 1' in metrics
    )
    assert (
        'contextfold_gateway_requests_total{route="/v1/chat/completions",status="500"} 1' in metrics
    )


def test_bad_requests_get_provider_shaped_errors_and_write_nothing(tmp_path: Path) -> None:
    with running(tmp_path, max_body_bytes=10_000, auth_token="gw-secret") as (fake, gw):
        url = gw.url
        ok_auth = {"x-contextfold-token": "gw-secret", "authorization": "Bearer sk-provider"}
        with httpx.Client(timeout=10) as h:
            r = h.post(
                url + "/v1/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
            )
            assert r.status_code == 401 and "error" in r.json()
            r = h.post(url + "/v1/chat/completions", content=b"{not json", headers=ok_auth)
            assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
            r = h.post(
                url + "/v1/messages",
                content=b"[1, 2]",
                headers={**ok_auth, "anthropic-version": "2023-06-01"},
            )
            assert r.status_code == 400 and r.json()["type"] == "error"
            r = h.post(url + "/v1/chat/completions", content=b"x" * 20_000, headers=ok_auth)
            assert r.status_code == 413
            r = h.post(
                url + "/v1/chat/completions",
                json={"model": "m", "messages": [{"role": "tool", "content": "x"}]},
                headers=ok_auth,
            )
            assert r.status_code == 400 and "tool" in r.json()["error"]["message"]
            r = h.post(
                url + "/v1/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
                headers=ok_auth,
            )
            assert r.status_code == 200
            r = h.get(url + "/v2/whatever", headers=ok_auth)
            assert r.status_code == 404 and "no route" in r.json()["error"]["message"]
            r = h.get(url + "/v1/chat/completions", headers=ok_auth)
            assert r.status_code == 405 and "error" in r.json()
            r = h.post(
                url + "/v1/messages",
                json={"model": "c", "max_tokens": 5, "messages": "hi"},
                headers={**ok_auth, "anthropic-version": "2023-06-01"},
            )
            assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
            assert "Traceback" not in r.text
            assert h.get(url + "/healthz").json()["status"] == "ok"
    assert len(_sessions(tmp_path)) == 1  # only the one valid request was stored
    (req,) = fake.received
    # the provider key went upstream; the gateway token did not
    assert req.headers["authorization"] == "Bearer sk-provider"
    assert "x-contextfold-token" not in req.headers
    assert "gw-secret" not in json.dumps(req.headers)


def test_api_keys_never_reach_logs_or_the_store(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "sk-live-SECRET-abc123"
    caplog.set_level("INFO", logger="contextfold.gateway")
    with running(tmp_path) as (fake, gw):
        fake.default = _echo
        _chat(_client(gw.url, secret), [SYSTEM, {"role": "user", "content": "hi"}])
        fake.failures.append(
            (
                401,
                {
                    "error": {
                        "message": "Incorrect API key provided",
                        "type": "invalid_request_error",
                        "param": None,
                        "code": "invalid_api_key",
                    }
                },
                0.0,
            )
        )
        with pytest.raises(openai.AuthenticationError):
            _chat(_client(gw.url, secret), [SYSTEM, {"role": "user", "content": "again"}])
    assert caplog.records, "the gateway logs its requests"
    lines = [json.loads(r.getMessage()) for r in caplog.records]
    requests = [line for line in lines if line["event"] == "request"]
    assert requests[0]["session"].startswith("gw-") and requests[0]["status"] == 200
    assert secret not in caplog.text
    for path in (tmp_path / "ws").rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


def test_two_gateways_on_one_store_serve_a_session_alternately(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two replicas (as behind a load balancer) on one workspace folder: each notices that the
    other moved the session on, re-reads it and appends only what is new."""
    from contextfold.gateway.cli import BackgroundServer
    from contextfold.gateway.config import GatewayConfig

    caplog.set_level("INFO", logger="contextfold.gateway")
    with running(tmp_path) as (fake, gw1):
        fake.default = _echo
        cfg = GatewayConfig(upstream=fake.url, port=0, store=str(tmp_path / "ws")).check()
        with BackgroundServer(cfg) as gw2:
            clients = [_client(gw1.url), _client(gw2.url)]
            messages: list[Any] = [SYSTEM, {"role": "user", "content": "start"}]
            for n in range(12):
                messages.append(_chat(clients[n % 2], messages))
                messages.append({"role": "user", "content": f"turn {n}"})
            messages.append(_chat(clients[0], messages))
    # each turn found the other's writes by checking the stored head before appending
    assert caplog.text.count('"event": "reopen"') + caplog.text.count('"event": "resync"') >= 10
    stored = _sessions(tmp_path)
    assert len(stored) == 1, "no branch: each replica caught up instead"
    (history,) = stored.values()
    assert [m.text for m in history] == [str(m.get("content")) for m in messages]


def test_an_upstream_that_stalls_mid_stream_ends_the_stream_with_an_error(tmp_path: Path) -> None:
    with running(tmp_path, upstream_timeout=0.5) as (fake, gw):
        fake.default = lambda call: Reply(text="slow " * 50, event_delay=1.0)
        client = _client(gw.url)
        messages: list[Any] = [SYSTEM, {"role": "user", "content": "go"}]
        with pytest.raises(openai.APIError, match="did not answer in time"):
            for _ in client.chat.completions.create(model="m", messages=messages, stream=True):
                pass
        fake.default = _echo
        messages.append(_chat(client, messages))
    (history,) = _sessions(tmp_path).values()
    assert [m.role for m in history] == ["system", "user", "assistant"]  # the cut one is not kept


def test_a_restarted_gateway_resumes_a_long_session_without_reading_its_old_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gateway keeps each message's fingerprint in its stored head: after a restart it
    matches the client's resent history against the heads, so a session with compactions
    reopens without loading the messages before its boundary, and the next turns append
    only what is new (no branch)."""
    from contextfold.core.view import HistoryView

    filled: list[int] = []
    real_fill = HistoryView._fill

    def counting_fill(self: HistoryView) -> None:
        filled.append(len(self.history))
        real_fill(self)

    messages: list[Any] = [SYSTEM, {"role": "user", "content": "start"}]
    blob = " ".join(f"line {i} of a long tool output" for i in range(150))

    def turns(url: str, n: int, first: int) -> None:
        client = _client(url)
        for t in range(first, first + n):
            messages.append(_chat(client, messages))
            messages.append({"role": "user", "content": f"turn {t}: {blob}"})

    with running(tmp_path, context_window=8_000) as (fake, gw):
        fake.default = _echo
        turns(gw.url, 14, 0)
    (before,) = _sessions(tmp_path).items()
    cm = ContextManager(tmp_path / "ws", session_id=before[0])
    assert cm.records(), "the session must have compacted"
    assert not cm.view.complete
    cm.close()
    monkeypatch.setattr(HistoryView, "_fill", counting_fill)
    with running(tmp_path, context_window=8_000) as (fake, gw):
        fake.default = _echo
        turns(gw.url, 3, 14)
        messages.append(_chat(_client(gw.url), messages))
    assert filled == [], "the restarted gateway loaded the history before the boundary"
    monkeypatch.setattr(HistoryView, "_fill", real_fill)
    stored = _sessions(tmp_path)
    assert list(stored) == [before[0]], "no branch: the heads matched the client's history"
    assert [m.text for m in stored[before[0]]] == [str(m.get("content")) for m in messages]


def test_a_regenerated_answer_forks_and_both_lines_continue(tmp_path: Path) -> None:
    with running(tmp_path) as (fake, gw):
        fake.default = lambda call: Reply(text=f"answer {len(fake.received)}")
        client = _client(gw.url)
        chat: list[Any] = [SYSTEM, {"role": "user", "content": "fix the parser"}]
        chat.append(_chat(client, chat))
        chat.append({"role": "user", "content": "now the lexer"})
        asked = list(chat)
        chat.append(_chat(client, chat))
        # the user regenerates the last answer: the same past, continued another way
        other = [*asked, _chat(client, asked)]
        assert other[-1] != chat[-1]
        for line in (chat, other, chat, other):  # both lines go on, each a plain append
            line.append({"role": "user", "content": f"more {len(line)}"})
            line.append(_chat(client, line))
        metrics = httpx.get(gw.url + "/metrics").text
    assert "contextfold_gateway_branches_total 1" in metrics
    assert "contextfold_gateway_client_rewrites_total" not in metrics
    stored = _sessions(tmp_path)
    base = min(stored, key=len)
    assert sorted(stored) == [base, f"{base}.b1"]
    assert [m.text for m in stored[base]] == [str(m.get("content")) for m in chat]
    assert [m.text for m in stored[f"{base}.b1"]] == [str(m.get("content")) for m in other]
