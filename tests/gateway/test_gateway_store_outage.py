"""The gateway while its PostgreSQL store is down (a private server the test stops and starts
itself): each request answers a provider-shaped 503 with Retry-After within the store's
timeout bound, not after minutes, and once the server is back the client's next request (its
correct history) is answered and stored once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from contextfold import ContextManager
from contextfold.gateway.cli import BackgroundServer
from contextfold.gateway.config import GatewayConfig
from contextfold.storage import open_store
from tests.gateway.gateway_fakes import Call, FakeUpstream, Reply
from tests.support.pg_private import PrivatePostgres, StallingProxy, private_postgres

pytestmark = pytest.mark.timeout(180)

TIMEOUT = 2
SYSTEM = {"role": "system", "content": "You are a careful coding agent."}


@pytest.fixture
def server() -> Iterator[PrivatePostgres]:
    yield from private_postgres()


def _echo(call: Call) -> Reply:
    return Reply(text=f"answer to: {str(call.messages[-1].get('content'))[:40]}")


def stored(url: str) -> list[list[str]]:
    store = open_store(url)
    try:
        return [
            [
                f"{m.role}: {m.text}"
                for m in ContextManager(store=store, session_id=i.session_id).history
            ]
            for i in store.sessions()
        ]
    finally:
        store.close()


def test_store_down_answers_503_with_retry_after_in_bounded_time_then_recovers(
    server: PrivatePostgres,
) -> None:
    url = f"{server.url}?schema=gw&timeout={TIMEOUT}"
    fake = FakeUpstream().start()
    fake.default = _echo
    try:
        cfg = GatewayConfig(upstream=fake.url, port=0, store=url).check()
        with BackgroundServer(cfg) as gw, httpx.Client(timeout=60) as http:
            endpoint = gw.url + "/v1/chat/completions"

            def ask(messages: list[Any]) -> httpx.Response:
                return http.post(endpoint, json={"model": "gpt-fake", "messages": messages})

            messages: list[Any] = [SYSTEM, {"role": "user", "content": "one"}]
            first = ask(messages)
            assert first.status_code == 200, first.text
            messages += [first.json()["choices"][0]["message"], {"role": "user", "content": "two"}]
            server.stop()
            took = []
            for _ in range(2):
                started = time.monotonic()
                down = ask(messages)
                took.append(time.monotonic() - started)
                assert down.status_code == 503, down.text
                assert int(down.headers["retry-after"]) >= 1
                assert down.json()["error"]["message"].startswith("the session store failed")
            assert max(took) < 4 * TIMEOUT + 5, took
            server.start()
            started = time.monotonic()
            back = ask(messages)
            recovered = time.monotonic() - started
            assert back.status_code == 200, back.text
            assert recovered < 4 * TIMEOUT + 5
            print(f"\ntime to 503 while down: {took}; first answer after the restart: {recovered}")
        assert stored(url) == [
            [
                "system: You are a careful coding agent.",
                "user: one",
                "assistant: answer to: one",
                "user: two",
                "assistant: answer to: two",
            ]
        ]
    finally:
        fake.stop()


@pytest.mark.parametrize("fault", ["frozen", "stalled network"])
def test_a_frozen_store_answers_503_in_bounded_time_then_the_session_is_as_stored(
    server: PrivatePostgres, fault: str
) -> None:
    """The store's server SIGSTOPped (postmaster and backends), or the network to it stalled
    by a proxy: requests get a provider-shaped 503 with Retry-After within the store's bound;
    after SIGCONT the client's next request is answered and the session is exactly as stored
    (each turn once)."""
    proxy = StallingProxy(server.port) if fault == "stalled network" else None
    url = f"{server.url}?schema=gw&timeout={TIMEOUT}"
    if proxy is not None:
        url = proxy.url(url)
    fake = FakeUpstream().start()
    fake.default = _echo
    try:
        cfg = GatewayConfig(upstream=fake.url, port=0, store=url).check()
        with BackgroundServer(cfg) as gw, httpx.Client(timeout=60) as http:
            endpoint = gw.url + "/v1/chat/completions"

            def ask(messages: list[Any]) -> httpx.Response:
                return http.post(endpoint, json={"model": "gpt-fake", "messages": messages})

            messages: list[Any] = [SYSTEM, {"role": "user", "content": "one"}]
            first = ask(messages)
            assert first.status_code == 200, first.text
            messages += [first.json()["choices"][0]["message"], {"role": "user", "content": "two"}]
            proxy.stall() if proxy is not None else server.freeze()
            took = []
            for _ in range(2):
                started = time.monotonic()
                down = ask(messages)
                took.append(time.monotonic() - started)
                assert down.status_code == 503, down.text
                assert int(down.headers["retry-after"]) >= 1
                assert down.json()["error"]["message"].startswith("the session store failed")
            proxy.resume() if proxy is not None else server.thaw()
            assert max(took) < 4 * TIMEOUT + 5, took
            started = time.monotonic()
            back = ask(messages)
            recovered = time.monotonic() - started
            assert back.status_code == 200, back.text
            print(
                f"\n{fault}: 503 after {[round(t, 2) for t in took]} s; answered {recovered:.2f} s after"
            )
        assert stored(url) == [
            [
                "system: You are a careful coding agent.",
                "user: one",
                "assistant: answer to: one",
                "user: two",
                "assistant: answer to: two",
            ]
        ]
    finally:
        server.thaw()
        if proxy is not None:
            proxy.close()
        fake.stop()
