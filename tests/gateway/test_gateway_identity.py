"""An explicit session name (``X-Contextfold-Session``) is bound to the provider credential the
upstream sees, on both stores (a workspace folder and a PostgreSQL schema): two tenants behind
one gateway token naming the same session get a session each, neither sees the other's
messages (not even after a gateway restart, when the sessions are found again in the store),
and the answer to a taken name looks exactly like the answer to a free one."""

from __future__ import annotations

import json
from typing import Any

import httpx

from contextfold import ContextManager
from contextfold.gateway.cli import BackgroundServer
from contextfold.gateway.config import GatewayConfig
from contextfold.storage import open_store
from tests.gateway.gateway_fakes import Call, FakeUpstream, Reply

TOKEN = "gw-shared-token-0123456789"
SYSTEM = {"role": "system", "content": "You are a careful coding agent."}
START = [SYSTEM, {"role": "user", "content": "fix the bug"}]
A = {"authorization": f"Bearer {TOKEN}", "x-api-key": "sk-tenant-a"}
B = {"authorization": f"Bearer {TOKEN}", "x-api-key": "sk-tenant-b"}


def _echo(call: Call) -> Reply:
    return Reply(text=f"answer to: {str(call.messages[-1].get('content'))[:40]}")


def _ask(url: str, headers: dict[str, str], messages: list[Any]) -> httpx.Response:
    return httpx.post(
        url + "/v1/chat/completions",
        json={"model": "gpt-fake", "messages": messages},
        headers=headers,
        timeout=60,
    )


def _turn(url: str, headers: dict[str, str], messages: list[Any]) -> list[Any]:
    """One turn: the conversation with the answer appended."""
    resp = _ask(url, headers, messages)
    assert resp.status_code == 200, resp.text
    SEEN.setdefault(headers["x-api-key"], set()).add(resp.headers["x-contextfold-session"])
    return [*messages, resp.json()["choices"][0]["message"]]


#: the session names each tenant's answers returned
SEEN: dict[str, set[str]] = {}


def _shape(resp: httpx.Response, name: str) -> tuple[int, list[str], Any]:
    """What a client can tell from an answer, with the session's own name taken out."""
    assert resp.status_code == 200, resp.text
    body = resp.json()
    body.pop("id", None)
    body.pop("created", None)
    headers = sorted(
        k for k in resp.headers if k not in ("date", "server-timing", "content-length")
    )
    return (
        resp.status_code,
        headers,
        (resp.headers["x-contextfold-session"].removeprefix(name), body),
    )


def _histories(url: str) -> dict[str, list[str]]:
    store = open_store(url)
    try:
        return {
            i.session_id: [
                f"{m.role}: {m.text}"
                for m in ContextManager(store=store, session_id=i.session_id).history
            ]
            for i in store.sessions()
        }
    finally:
        store.close()


def test_an_explicit_session_name_is_bound_to_the_credential_on_both_stores(
    store_url: str,
) -> None:
    SEEN.clear()
    fake = FakeUpstream().start()
    fake.default = _echo
    cfg = GatewayConfig(upstream=fake.url, port=0, store=store_url, auth_token=TOKEN).check()
    try:
        with BackgroundServer(cfg) as gw:
            named_a = {**A, "x-contextfold-session": "shared"}
            conv_a = _turn(gw.url, named_a, START)
            conv_a = _turn(gw.url, named_a, [*conv_a, {"role": "user", "content": "A-only secret"}])
            before_b = len(fake.received)
            taken = _ask(gw.url, {**B, "x-contextfold-session": "shared"}, START)
            free = _ask(gw.url, {**B, "x-contextfold-session": "unused"}, START)
            b_saw = [json.dumps(r.body) for r in fake.received[before_b:]]
        assert _shape(taken, "shared") == _shape(free, "unused")
        assert taken.headers["x-contextfold-session"] != "shared"
        # after a restart the gateway finds the sessions again in the store, still apart
        with BackgroundServer(cfg) as gw:
            conv_b = [*START, taken.json()["choices"][0]["message"]]
            restarted = len(fake.received)
            conv_b = _turn(
                gw.url,
                {**B, "x-contextfold-session": "shared"},
                [*conv_b, {"role": "user", "content": "B continues"}],
            )
            b_saw += [json.dumps(r.body) for r in fake.received[restarted:]]
            # B sends A's whole conversation under A's name: B's own session, not A's
            stolen = _ask(gw.url, {**B, "x-contextfold-session": "shared"}, conv_a)
            assert stolen.status_code == 200, stolen.text
            conv_a = _turn(gw.url, named_a, [*conv_a, {"role": "user", "content": "A again"}])
    finally:
        fake.stop()
    assert len(b_saw) == 3 and all("A-only secret" not in text for text in b_saw)
    histories = _histories(store_url)
    (a_name,) = SEEN["sk-tenant-a"]
    b_names = SEEN["sk-tenant-b"] | {taken.headers["x-contextfold-session"]}
    assert a_name.startswith("shared-") and a_name not in b_names
    a_family = {s for s in histories if s == a_name or s.startswith(a_name + ".")}
    # A's conversation continued as one plain session, holding nothing of B's
    assert a_family == {a_name}
    assert histories[a_name] == [
        "system: You are a careful coding agent.",
        "user: fix the bug",
        "assistant: answer to: fix the bug",
        "user: A-only secret",
        "assistant: answer to: A-only secret",
        "user: A again",
        "assistant: answer to: A again",
    ]
    assert all(s.startswith("shared-") or s.startswith("unused-") for s in histories)
    assert any("B continues" in str(h) for s, h in histories.items() if s in b_names)
