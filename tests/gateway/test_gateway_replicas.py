"""Two gateway replicas (two apps with their own registries and store connections) on one
PostgreSQL schema, used in parallel: two lines of one conversation continued at the same time
through either replica, one conversation served by both alternately. No replica creates a
branch another one created, no request is answered 400 or 503: the loser of a race re-syncs
with what the winner stored."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from contextfold.gateway.cli import BackgroundServer
from contextfold.gateway.config import GatewayConfig
from contextfold.storage import open_store
from tests.gateway.gateway_fakes import Call, FakeUpstream, Reply
from tests.support import pg_support

pytestmark = pytest.mark.timeout(300)

SYSTEM = {"role": "system", "content": "You are a careful coding agent."}


@pytest.fixture
def schema_url() -> Iterator[str]:
    url = pg_support.require_postgres()
    schema = pg_support.new_schema_name()
    store_url = f"{url}?schema={schema}"
    open_store(store_url).close()  # created once, before the replicas race to
    try:
        yield store_url
    finally:
        pg_support.drop_schema(url, schema)


def _echo(call: Call) -> Reply:
    return Reply(text=f"answer to: {call.messages[-1].get('content')}")


def _visible(url: str) -> dict[str, list[Any]]:
    """Each stored session's conversation as the clients last had it."""
    from contextfold import ContextManager

    store = open_store(url)
    try:
        out = {}
        for info in store.sessions():
            cm = ContextManager(store=store, session_id=info.session_id)
            out[info.session_id] = [m.content for m in cm.view_messages]
        return out
    finally:
        store.close()


def test_two_replicas_in_parallel_never_collide(schema_url: str) -> None:
    fake = FakeUpstream().start()
    fake.default = _echo
    failures: list[str] = []
    try:
        cfg = GatewayConfig(upstream=fake.url, port=0, store=schema_url, record_delay=0).check()
        with BackgroundServer(cfg) as a, BackgroundServer(cfg) as b:
            urls = [a.url, b.url]
            start = [SYSTEM, {"role": "user", "content": "fix the parser"}]
            with httpx.Client(timeout=60) as http:
                first = http.post(
                    urls[0] + "/v1/chat/completions",
                    json={"model": "gpt-fake", "messages": start},
                    headers={"authorization": "Bearer sk-rep", SESSION: "two-par-2"},
                )
                assert first.status_code == 200, first.text
            answer = first.json()["choices"][0]["message"]
            shared = [*start, {"role": "assistant", "content": answer["content"]}]
            lines = {name: list(shared) for name in ("x", "y")}
            gate = threading.Barrier(2)

            def drive(name: str, seed: int) -> None:
                rng = random.Random(seed)
                chat = lines[name]
                with httpx.Client(timeout=60) as http:
                    for turn in range(8):
                        chat.append({"role": "user", "content": f"{name} step {turn}"})
                        gate.wait()  # both lines' requests of this turn go out together
                        resp = http.post(
                            rng.choice(urls) + "/v1/chat/completions",
                            json={"model": "gpt-fake", "messages": chat},
                            headers={"authorization": "Bearer sk-rep", SESSION: "two-par-2"},
                        )
                        if resp.status_code != 200:
                            failures.append(f"{name} turn {turn}: {resp.status_code} {resp.text}")
                            gate.abort()
                            return
                        msg = resp.json()["choices"][0]["message"]
                        chat.append({"role": "assistant", "content": msg["content"]})

            threads = [threading.Thread(target=drive, args=(n, i)) for i, n in enumerate(lines)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    finally:
        fake.stop()
    assert not failures
    visible = _visible(schema_url)
    # each line is the conversation of one session, and no session holds anything else
    want = sorted([m["content"] for m in line] for line in lines.values())
    got = sorted(visible.values())
    assert len(got) >= 2 and all(v in got for v in want)
    assert len(visible) <= 3  # the conversation, its branch, at most one superseded line


SESSION = "x-contextfold-session"
