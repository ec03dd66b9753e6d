"""A PostgreSQL outage through the gateway (a private server the test stops with
``pg_ctl stop -m immediate`` and starts again): the request whose commit fails gets a 503 and
the session stays exactly as stored; once the server is back, the client's next request with
its correct history is answered and every message is stored once."""

from __future__ import annotations

import time
from typing import Any

import openai
import pytest

from contextfold.gateway.cli import BackgroundServer
from contextfold.gateway.config import GatewayConfig
from contextfold.storage import open_store
from tests.gateway.gateway_fakes import Call, FakeUpstream, Reply
from tests.gateway.gateway_pg_private import PrivateServer, private_pg, short_pool_timeout

pytestmark = pytest.mark.timeout(300)
__all__ = ["private_pg"]  # the fixture

SYSTEM = {"role": "system", "content": "You are a careful coding agent."}


def _ask(client: openai.OpenAI, chat: list[dict[str, Any]]) -> dict[str, Any]:
    resp = client.chat.completions.create(model="gpt-fake", messages=chat)  # type: ignore[arg-type]
    return {"role": "assistant", "content": resp.choices[0].message.content}


def _ask_until_stored(client: openai.OpenAI, chat: list[dict[str, Any]]) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        try:
            return _ask(client, chat)
        except openai.APIStatusError as exc:
            if exc.status_code != 503 or time.monotonic() > deadline:
                raise


def _stored(url: str) -> dict[str, list[Any]]:
    store = open_store(url)
    try:
        return {
            i.session_id: [
                e.data["message"]["content"] for e in store.read(i.session_id, kinds=["message"])
            ]
            for i in store.sessions()
        }
    finally:
        store.close()


@pytest.mark.parametrize("when", ["before", "during"])
def test_an_outage_leaves_the_session_as_stored_and_the_next_request_works(
    private_pg: PrivateServer, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    short_pool_timeout(monkeypatch)
    fake = FakeUpstream().start()
    stop_on = {"n": -1}

    def reply(call: Call) -> Reply:
        last = str(call.messages[-1].get("content"))
        if len(fake.received) == stop_on["n"]:
            private_pg.stop()  # while the gateway waits for this answer (its commit runs)
        return Reply(text=f"answer to: {last}")

    fake.default = reply
    try:
        cfg = GatewayConfig(upstream=fake.url, port=0, store=private_pg.url).check()
        with BackgroundServer(cfg) as gw:
            client = openai.OpenAI(
                base_url=gw.url + "/v1", api_key="sk-outage", max_retries=0, timeout=120
            )
            chat: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "step 1"}]
            chat.append(_ask(client, chat))
            chat.append({"role": "user", "content": "step 2"})
            if when == "before":
                private_pg.stop()
            else:
                stop_on["n"] = len(fake.received) + 1
            try:
                answer = _ask(client, chat)
            except openai.APIStatusError as exc:
                assert exc.status_code == 503, exc.message
                answer = None
            if when == "before":
                assert answer is None  # the commit failed: nothing of the turn reached the client
            private_pg.start()
            if answer is not None:
                chat.append(answer)
                chat.append({"role": "user", "content": "step 3"})
            # the client's correct history, as an SDK would resend it: answered once the
            # store's connection pool has reconnected (a 503 meanwhile, never anything else)
            chat.append(_ask_until_stored(client, chat))
            chat.append({"role": "user", "content": "step 4"})
            chat.append(_ask(client, chat))
            # a new gateway on the same store sees the same
            chat.append({"role": "user", "content": "step 5"})
        with BackgroundServer(cfg) as gw2:
            client = openai.OpenAI(base_url=gw2.url + "/v1", api_key="sk-outage", max_retries=0)
            chat.append(_ask(client, chat))
    finally:
        fake.stop()
    stored = _stored(private_pg.url)
    assert list(stored.values()) == [[m["content"] for m in chat]]
