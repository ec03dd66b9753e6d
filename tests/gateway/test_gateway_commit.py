"""The turn's append is committed while the upstream call is in flight, and nothing reaches
the client before it is stored: a slow commit holds the answer (and the time counts as added
latency in Server-Timing); a failed one cancels the upstream call and answers a
provider-shaped 503, with the session exactly as before - the next request stores the turn
once. Failures and slowness are injected in the database itself (a trigger on the events
table), on the embedded store and on PostgreSQL."""

from __future__ import annotations

import json
import re
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from contextfold.gateway.cli import BackgroundServer
from contextfold.gateway.config import GatewayConfig
from contextfold.storage import open_store
from tests.gateway.gateway_fakes import Call, FakeUpstream, Reply
from tests.support import pg_support

pytestmark = pytest.mark.timeout(120)

SYSTEM = {"role": "system", "content": "You are a careful coding agent."}


def _echo(call: Call) -> Reply:
    return Reply(text=f"answer to: {str(call.messages[-1].get('content'))[:40]}")


class Target:
    """A gateway store and a way to make its event inserts fail or crawl."""

    def __init__(self, store: str, server: str | None = None, schema: str | None = None):
        self.store = store
        self.server = server
        self.schema = schema

    def _sql(self, statements: list[str]) -> None:
        if self.server is None:
            con = sqlite3.connect(Path(self.store) / "store.sqlite", timeout=30)
            try:
                for sql in statements:
                    con.execute(sql)
                con.commit()
            finally:
                con.close()
            return
        import psycopg

        with psycopg.connect(self.server, autocommit=True) as conn:
            for sql in statements:
                conn.execute(sql)

    @contextmanager
    def inserts_fail(self) -> Iterator[None]:
        if self.server is None:
            self._sql(
                [
                    "CREATE TRIGGER cf_test_fail BEFORE INSERT ON events "
                    "BEGIN SELECT RAISE(ABORT, 'injected storage failure'); END"
                ]
            )
        else:
            self._sql(
                [
                    f'CREATE FUNCTION "{self.schema}".cf_test_fail() RETURNS trigger '
                    "LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'injected storage failure'; "
                    "END $$",
                    f'CREATE TRIGGER cf_test_fail BEFORE INSERT ON "{self.schema}".events '
                    f'FOR EACH ROW EXECUTE FUNCTION "{self.schema}".cf_test_fail()',
                ]
            )
        try:
            yield
        finally:
            if self.server is None:
                self._sql(["DROP TRIGGER cf_test_fail"])
            else:
                self._sql(
                    [
                        f'DROP TRIGGER cf_test_fail ON "{self.schema}".events',
                        f'DROP FUNCTION "{self.schema}".cf_test_fail()',
                    ]
                )

    @contextmanager
    def inserts_crawl(self, seconds: float) -> Iterator[None]:
        """Each event insert takes ``seconds`` more (PostgreSQL only)."""
        assert self.schema is not None
        self._sql(
            [
                f'CREATE FUNCTION "{self.schema}".cf_test_slow() RETURNS trigger '
                f"LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep({seconds}); RETURN NEW; END $$",
                f'CREATE TRIGGER cf_test_slow BEFORE INSERT ON "{self.schema}".events '
                f'FOR EACH STATEMENT EXECUTE FUNCTION "{self.schema}".cf_test_slow()',
            ]
        )
        try:
            yield
        finally:
            self._sql(
                [
                    f'DROP TRIGGER cf_test_slow ON "{self.schema}".events',
                    f'DROP FUNCTION "{self.schema}".cf_test_slow()',
                ]
            )

    def history(self) -> dict[str, list[str]]:
        """Each stored session's messages (role: text)."""
        from contextfold import ContextManager

        store = open_store(self.store if "://" in self.store else Path(self.store))
        try:
            out: dict[str, list[str]] = {}
            for info in store.sessions():
                cm = ContextManager(store=store, session_id=info.session_id)
                out[info.session_id] = [f"{m.role}: {m.text}" for m in cm.history]
            return out
        finally:
            store.close()


def _postgres() -> Iterator[Target]:
    url = pg_support.require_postgres()
    schema = pg_support.new_schema_name()
    store = f"{url}?schema={schema}"
    open_store(store).close()
    try:
        yield Target(store, url, schema)
    finally:
        pg_support.drop_schema(url, schema)


@pytest.fixture(params=["folder", "postgresql"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    if request.param == "folder":
        from contextfold.gateway.stores import open_shared_store

        open_shared_store(str(tmp_path / "ws")).close()
        yield Target(str(tmp_path / "ws"))
        return
    yield from _postgres()


@pytest.fixture
def postgres() -> Iterator[Target]:
    yield from _postgres()


@contextmanager
def gateway(target: Target, **config: Any) -> Iterator[tuple[FakeUpstream, BackgroundServer]]:
    fake = FakeUpstream().start()
    fake.default = _echo
    try:
        cfg = GatewayConfig(upstream=fake.url, port=0, store=target.store, **config).check()
        with BackgroundServer(cfg) as gw:
            yield fake, gw
    finally:
        fake.stop()


def _ask(client: openai.OpenAI, messages: list[Any], stream: bool) -> dict[str, Any]:
    if stream:
        text = "".join(
            c.choices[0].delta.content or ""
            for c in client.chat.completions.create(
                model="gpt-fake", messages=messages, stream=True
            )
            if c.choices
        )
        return {"role": "assistant", "content": text}
    resp = client.chat.completions.create(model="gpt-fake", messages=messages)
    return resp.choices[0].message.model_dump(exclude_none=True)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_failed_commit_cancels_the_call_and_leaves_the_session_as_before(
    target: Target, stream: bool
) -> None:
    with gateway(target, record_delay=30) as (fake, gw):
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-c", max_retries=0)
        messages: list[Any] = [SYSTEM, {"role": "user", "content": "one"}]
        messages.append(_ask(client, messages, stream))
        messages.append({"role": "user", "content": "two"})
        before = target.history()
        fake.latency = 5.0  # the model takes long: the failed commit does not wait for it
        with target.inserts_fail():
            started = time.monotonic()
            with pytest.raises(openai.APIStatusError) as failed:
                _ask(client, messages, stream)
            took = time.monotonic() - started
            assert failed.value.status_code == 503
            assert "store" in str(failed.value.body)
            assert target.history() == before  # nothing of the turn was stored
        assert took < 4.0, "the upstream call was cancelled, not waited for"
        fake.latency = 0.0
        messages.append(_ask(client, messages, stream))  # the client tries again: stored once
        (during,) = target.history().values()
        assert during == [
            "system: You are a careful coding agent.",
            "user: one",
            "assistant: answer to: one",
            "user: two",
        ]
    (after,) = target.history().values()
    assert after == [*during, "assistant: answer to: two"]


def test_a_slow_commit_holds_the_answer_and_counts_as_added_latency(postgres: Target) -> None:
    with gateway(postgres, record_delay=30) as (_fake, gw), httpx.Client(timeout=30) as http:
        messages: list[Any] = [SYSTEM, {"role": "user", "content": "one"}]
        url = gw.url + "/v1/chat/completions"
        first = http.post(url, json={"model": "gpt-fake", "messages": messages})
        messages += [first.json()["choices"][0]["message"], {"role": "user", "content": "two"}]
        for stream, last in ((False, "two"), (True, "three")):
            with postgres.inserts_crawl(0.5):
                started = time.monotonic()
                with http.stream(
                    "POST", url, json={"model": "gpt-fake", "messages": messages, "stream": stream}
                ) as resp:
                    waited = time.monotonic() - started
                    # the answer is out only once the turn is stored
                    (stored,) = postgres.history().values()
                    body = b"".join(resp.iter_bytes())
            assert resp.status_code == 200, body
            assert stored[-1] == f"user: {last}" and stored.count(f"user: {last}") == 1
            timing = dict(re.findall(r"(\w+);dur=([0-9.]+)", resp.headers["server-timing"]))
            assert waited >= 0.45
            assert float(timing["commit"]) >= 400  # held for the commit beyond the upstream
            assert float(timing["contextfold"]) >= float(timing["commit"])
            assert float(timing["upstream"]) < 400
            # from the upstream's answer to the response's headers: the commit's wait is in it
            assert float(timing["answer"]) >= float(timing["commit"]) - 1
            if not stream:
                answer = json.loads(body)["choices"][0]["message"]
                messages += [answer, {"role": "user", "content": "three"}]
