"""The gateway's request path shortcuts keep their contracts: a resent history is parsed only
past what the previous request already parsed, JSON keeps big integers, and an answer written
with the session's next append (or after ``record_delay``, or at shutdown) is written once."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import openai

import contextfold.gateway.fastjson as fastjson
from contextfold import ContextManager
from contextfold.gateway.convert import fingerprint, parse_anthropic, parse_openai
from tests.gateway.gateway_fakes import Call, Reply
from tests.gateway.gateway_helpers import running
from tests.support.waiting import wait_until

SYSTEM = {"role": "system", "content": "You are a careful coding agent."}


def test_json_keeps_integers_beyond_64_bits_nan_and_non_ascii() -> None:
    big = 123456789012345678901234567890
    assert fastjson.loads(json.dumps({"seed": big, "x": "é"}))["seed"] == big
    assert fastjson.loads(b'{"t": NaN}')["t"] != fastjson.loads(b'{"t": NaN}')["t"]
    assert fastjson.loads(fastjson.dumps({"k": big, "s": "日本"})) == {"k": big, "s": "日本"}
    assert fastjson.dumps_sorted({"b": 1, "a": 2}) == b'{"a":2,"b":1}'


def test_a_resent_history_reuses_the_previous_parse_and_notices_an_edit() -> None:
    first = [SYSTEM, {"role": "user", "content": "list the files"}]
    a = parse_openai(first)
    call = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    second = [
        *json.loads(json.dumps(first)),  # equal objects, not the same ones (a new request)
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.py b.py"},
    ]
    b = parse_openai(second)
    assert b.neutral[0] is a.neutral[0] and b.neutral[1] is a.neutral[1]  # reused
    assert b.fingerprints == [fingerprint(m) for m in b.neutral]
    assert b.neutral[2].tool_calls[0].id == "c1" and b.neutral[3].tool_call_id == "c1"
    # the client edits its second message: parsed anew, not taken from the previous request
    edited = json.loads(json.dumps(second))
    edited[2]["tool_calls"][0]["function"]["arguments"] = '{"path": "src"}'
    c = parse_openai(edited)
    assert c.neutral[2].tool_calls[0].arguments == '{"path": "src"}'
    assert c.fingerprints[2] != b.fingerprints[2] and c.fingerprints[:2] == b.fingerprints[:2]
    # Anthropic: the same, per client message (a message may be several neutral ones)
    msgs = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    x = parse_anthropic(msgs, "sys")
    more = [*json.loads(json.dumps(msgs)), {"role": "assistant", "content": "hello"}]
    y = parse_anthropic(more, "sys")
    assert y.neutral[1] is x.neutral[1] and y.neutral[2].text == "hello"
    assert y.parts == [[1], [2]] and y.owner == [-1, 0, 1]


def _echo(call: Call) -> Reply:
    return Reply(text=f"answer to: {str(call.messages[-1].get('content'))[:40]}")


def _stored(tmp_path: Path) -> dict[str, list[str]]:
    """Each session's stored messages (role: text) as the store holds them now."""
    ws = tmp_path / "ws"
    try:  # the store's own listing where it has one
        from tests.support.store_helpers import session_ids  # type: ignore[import-not-found,unused-ignore]

        ids = sorted(session_ids(ws))
    except ImportError:  # a folder per session
        root = ws / "sessions"
        ids = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.exists() else []
    out: dict[str, list[str]] = {}
    for sid in ids:
        history = ContextManager(ws, session_id=sid).history
        if history:
            out[sid] = [f"{m.role}: {m.text}" for m in history]
    return out


def _chat(client: openai.OpenAI, messages: list[Any]) -> dict[str, Any]:
    resp = client.chat.completions.create(model="gpt-fake", messages=messages)
    return resp.choices[0].message.model_dump(exclude_none=True)


def test_an_answer_is_written_with_the_next_turn_and_at_shutdown(tmp_path: Path) -> None:
    with running(tmp_path, record_delay=30) as (fake, gw):
        fake.default = _echo
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-w", max_retries=0)
        messages: list[Any] = [SYSTEM, {"role": "user", "content": "one"}]
        messages.append(_chat(client, messages))
        messages.append({"role": "user", "content": "two"})
        messages.append(_chat(client, messages))
        (during,) = _stored(tmp_path).values()
        # the first answer went in with the second request's append; the second one waits
        assert during == [
            "system: You are a careful coding agent.",
            "user: one",
            "assistant: answer to: one",
            "user: two",
        ]
    (after,) = _stored(tmp_path).values()
    assert after == [*during, "assistant: answer to: two"]  # written at shutdown, once


def test_an_answer_is_written_after_the_delay_without_a_next_request(tmp_path: Path) -> None:
    with running(tmp_path, record_delay=0.2) as (fake, gw):
        fake.default = _echo
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-w", max_retries=0)
        messages: list[Any] = [SYSTEM, {"role": "user", "content": "only"}]
        messages.append(_chat(client, messages))

        def written() -> bool:
            stored = list(_stored(tmp_path).values())
            return bool(stored) and len(stored[0]) == 3

        wait_until(written, 20, "the background writer stored the turn", interval=0.05)
        stored = list(_stored(tmp_path).values())
        assert stored == [
            ["system: You are a careful coding agent.", "user: only", "assistant: answer to: only"]
        ]
        # the client continues: nothing is written twice
        messages.append({"role": "user", "content": "more"})
        messages.append(_chat(client, messages))
    (history,) = _stored(tmp_path).values()
    assert history[3:] == ["user: more", "assistant: answer to: more"]
    assert len(history) == 5


def _written(tmp_path: Path, conversation: int, length: int) -> bool:
    """Whether the store holds ``length`` messages of the conversation."""
    first = f"user: conversation {conversation}"
    return any(len(h) >= length for h in _stored(tmp_path).values() if h[1:2] == [first])


def test_sessions_closed_and_reopened_under_a_small_limit_lose_nothing(tmp_path: Path) -> None:
    """More conversations than open managers: the least recently used idle ones are closed
    (never one with an unwritten answer) and reopened from the store when they continue."""
    with running(tmp_path, max_open_sessions=1, record_delay=0.05) as (fake, gw):
        fake.default = _echo
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-w", max_retries=0)
        convs: list[list[Any]] = [
            [SYSTEM, {"role": "user", "content": f"conversation {c}"}] for c in range(3)
        ]
        for turn in range(3):
            for c, messages in enumerate(convs):
                messages.append(_chat(client, messages))
                messages.append({"role": "user", "content": f"c{c} turn {turn}"})
                if turn == 1:  # the background writer caught up, so this one can be closed
                    wait_until(
                        functools.partial(_written, tmp_path, c, len(messages) - 1),
                        20,
                        f"conversation {c} written",
                        interval=0.02,
                    )
        for messages in convs:
            messages.append(_chat(client, messages))
    stored = sorted(_stored(tmp_path).values())
    expected = sorted(
        [f"{m['role']}: {m.get('content') or ''}".rstrip() for m in messages] for messages in convs
    )
    assert [[line.rstrip() for line in h] for h in stored] == expected


def test_a_learned_limit_reaches_replicas_through_the_store(tmp_path: Path) -> None:
    from contextfold.gateway.config import GatewayConfig
    from contextfold.gateway.sessions import SessionRegistry

    cfg = GatewayConfig(upstream="http://127.0.0.1:9", store=str(tmp_path / "ws")).check()
    one, two = SessionRegistry(cfg), SessionRegistry(cfg)
    try:
        one.learn("gpt-small", 6_000)
        one.learn("gpt-small", 9_000)  # a larger statement never raises it again
        sess = two.get("gw-replica-two", "gpt-small")  # a new session on the other replica
        assert sess.cm.window == 6_000 and two.window_for("gpt-small") == 6_000
        assert two.window_for("gpt-other") == cfg.context_window
    finally:
        one.close_all()
        two.close_all()
