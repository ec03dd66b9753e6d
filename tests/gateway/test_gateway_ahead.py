"""Through the gateway: the compaction a conversation's next request needs is prepared after
the answer, while the agent runs its tool, so that request finds its view ready. It holds the
conversation's lock (the next request waits for it), never changes the history, reports the
compaction on the next response, and fails open."""

from __future__ import annotations

import contextlib
import itertools
import json
import random
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from contextfold import ContextManager
from contextfold.errors import StorageError
from contextfold.gateway import ahead as gw_ahead
from contextfold.storage import open_store
from tests.gateway.gateway_fakes import Call, Reply
from tests.gateway.gateway_helpers import running
from tests.gateway.test_gateway_security import _gateway_of

WINDOW = 8_000
SYSTEM = {"role": "system", "content": "You are a careful coding agent."}
HEADERS = {"x-fake-script": "agent", "authorization": "Bearer sk-test"}


def _script(counter: Iterator[int]) -> Callable[[Call], Reply]:
    def reply(call: Call) -> Reply:
        n = next(counter)
        return Reply(text="", tool_calls=[(f"call_{n}", "run", {"cmd": f"pytest -k case_{n}"})])

    return reply


class Agent:
    """A stateless agent: it sends its whole conversation each turn, growing by a tool result."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.messages: list[dict[str, Any]] = [
            SYSTEM,
            {"role": "user", "content": "Fix the failing tests"},
        ]
        self.answers: list[dict[str, Any]] = []

    def turn(self, client: httpx.Client) -> httpx.Response:
        r = client.post(
            "/v1/chat/completions",
            json={"model": "gpt-fake", "messages": self.messages},
            headers=HEADERS,
        )
        assert r.status_code == 200, r.text
        answer = r.json()["choices"][0]["message"]
        kept = {k: v for k, v in answer.items() if k in ("role", "content", "tool_calls")}
        self.messages.append(kept)
        words = " ".join(
            f"line{self.rng.randint(0, 9999)}" for _ in range(self.rng.randint(150, 300))
        )
        self.messages.append(
            {"role": "tool", "tool_call_id": answer["tool_calls"][0]["id"], "content": words}
        )
        return r


class Spy:
    """Wraps the gateway's ahead work: what each run returned, an event per run."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.real = gw_ahead.compact_ahead
        self.results: list[bool] = []
        self.done = threading.Event()
        self.hook: Callable[[Any], None] | None = None
        monkeypatch.setattr(gw_ahead, "compact_ahead", self)

    def __call__(self, registry: Any, sess: Any, tools: Any) -> bool:
        try:
            if self.hook is not None:
                self.hook(sess)
            out = bool(self.real(registry, sess, tools))
            self.results.append(out)
            return out
        except BaseException:
            self.results.append(False)
            raise
        finally:
            self.done.set()


def stored_history(ws: Path, session_id: str) -> list[Any]:
    store = open_store(str(ws))
    try:
        cm = ContextManager(store=store, session_id=session_id)
        return [(m.role, m.text) for m in cm.history]
    finally:
        store.close()


def test_compactions_are_prepared_ahead_and_reported_by_the_next_response(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = Spy(monkeypatch)
    agent = Agent(7)
    ahead_turns: list[int] = []
    on_path: list[int] = []
    with running(tmp_path, limit=WINDOW, context_window=WINDOW) as (fake, gw):
        fake.scripts["agent"] = _script(itertools.count())
        registry = _gateway_of(gw).pipeline.registry
        with httpx.Client(base_url=gw.url, timeout=60) as client:
            prepared_ahead = False
            for t in range(40):
                spy.done.clear()
                r = agent.turn(client)
                compacted = bool(r.headers.get("x-contextfold-compaction"))
                if prepared_ahead:
                    assert compacted, f"turn {t}: the compaction prepared for it is reported"
                elif compacted:
                    on_path.append(t)
                assert spy.done.wait(30), "the ahead work runs after every answer"
                prepared_ahead = spy.results[-1]
                if prepared_ahead:
                    ahead_turns.append(t + 1)
                    sess = next(iter(registry._open.values()))
                    # done and stored before the next request arrives
                    record = sess.cm.last_record
                    assert record is not None and record.changed
                    reader = ContextManager(store=registry.store, session_id=sess.session_id)
                    assert reader.records()[-1].tokens_after == record.tokens_after
            session_id = r.headers["x-contextfold-session"]
    accepted = fake.accepted("/v1/chat/completions")
    assert len(accepted) == 40 and all(a.tokens <= WINDOW for a in accepted)
    for a, n in zip(accepted, itertools.count()):
        sent = a.body["messages"]
        assert sent[0] == SYSTEM  # the system prompt stays
        assert sent[-1]["content"] == agent.messages[2 * n + 1]["content"]  # the newest stays
    print("compacted ahead for turns", ahead_turns, "on the request path", on_path)
    # most compactions were made ahead, off the requests' path
    assert ahead_turns and len(ahead_turns) >= len(on_path), (ahead_turns, on_path)
    # the history is never changed: every message and answer, once, in order
    history = stored_history(tmp_path / "ws", session_id)
    assert len(history) == len(agent.messages) - 1  # all but the newest tool result (not sent)
    for (role, text), m in zip(history, agent.messages):
        assert role == m["role"]
        if m["role"] != "assistant":
            assert text == m["content"]


def test_the_next_request_waits_for_the_ahead_work_of_its_conversation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = Spy(monkeypatch)
    started, go, asked = threading.Event(), threading.Event(), threading.Event()
    forwarded_at_end: list[int] = []
    agent = Agent(3)
    with running(tmp_path, limit=WINDOW, context_window=WINDOW, record_delay=0) as (fake, gw):
        fake.scripts["agent"] = _script(itertools.count())
        registry = _gateway_of(gw).pipeline.registry
        real_lock = registry.lock

        def lock(key: str) -> Any:
            out = real_lock(key)
            if out.locked():
                asked.set()  # a request of the conversation waits for it
            return out

        monkeypatch.setattr(registry, "lock", lock)

        def hold(sess: Any) -> None:
            if not started.is_set():
                started.set()
                assert go.wait(30)
                forwarded_at_end.append(len(fake.accepted("/v1/chat/completions")))

        spy.hook = hold
        with httpx.Client(base_url=gw.url, timeout=60) as client:
            agent.turn(client)
            assert started.wait(30)
            out: list[httpx.Response] = []
            nxt = threading.Thread(
                target=lambda: out.append(agent.turn(httpx.Client(base_url=gw.url, timeout=60)))
            )
            nxt.start()
            assert asked.wait(30)
            go.set()
            nxt.join(60)
            assert out and out[0].status_code == 200
            for _ in range(3):
                agent.turn(client)
    assert forwarded_at_end == [1]  # the second request went upstream only after the work
    assert len(fake.accepted("/v1/chat/completions")) == 5


def test_a_storage_failure_ahead_fails_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = Spy(monkeypatch)
    failed: list[bool] = []

    def fail(sess: Any) -> None:
        if not failed and sess.cm.compaction_due(sess.lookahead.tokens):
            failed.append(True)
            raise StorageError("the database server is unreachable")

    spy.hook = fail
    agent = Agent(5)
    with running(tmp_path, limit=WINDOW, context_window=WINDOW) as (fake, gw):
        fake.scripts["agent"] = _script(itertools.count())
        with httpx.Client(base_url=gw.url, timeout=60) as client:
            for _ in range(25):
                spy.done.clear()
                r = agent.turn(client)
                assert spy.done.wait(30)
            session_id = r.headers["x-contextfold-session"]
    assert failed and len(fake.accepted("/v1/chat/completions")) == 25
    assert all(a.tokens <= WINDOW for a in fake.accepted("/v1/chat/completions"))
    assert len(stored_history(tmp_path / "ws", session_id)) == len(agent.messages) - 1


def _filing_gate() -> gw_ahead.AheadWork:
    from concurrent.futures import ThreadPoolExecutor

    from contextfold.gateway.metrics import Metrics

    threads = ThreadPoolExecutor(max_workers=1)
    return gw_ahead.AheadWork(None, threads, Metrics())  # type: ignore[arg-type]


def test_vector_filing_waits_while_a_request_is_prepared() -> None:
    """Between two chunks the background filing of evidence vectors waits for the requests
    being prepared (their CPU work comes first), then goes on; closing ends the wait."""
    from tests.support.waiting import wait_until

    work = _filing_gate()
    passed: list[bool] = []
    with work.serving():
        filer = threading.Thread(target=lambda: passed.append(work.yield_to_requests()))
        filer.start()
        with work.serving():  # two requests: the filing waits for both
            pass
        filer.join(0.05)
        assert filer.is_alive() and not passed
    wait_until(lambda: passed == [False], 5, "the filing to go on once no request is prepared")
    filer.join(5)
    with work.serving():
        closer = threading.Thread(target=lambda: passed.append(work.yield_to_requests()))
        closer.start()
        work.closing.set()
        with work._idle:
            work._idle.notify_all()
        closer.join(5)
        assert passed == [False, True]  # closing: give up, the rest stays pending
    work.filing.shutdown(wait=True)


@contextlib.contextmanager
def held_body(client: httpx.Client, agent: Agent) -> Iterator[None]:
    """The agent's next request, its body held after 10 bytes until the block ends; its
    answer is checked then."""
    arrived, finish = threading.Event(), threading.Event()

    def body() -> Iterator[bytes]:
        data = json.dumps({"model": "gpt-fake", "messages": agent.messages}).encode()
        yield data[:10]
        arrived.set()
        assert finish.wait(30)
        yield data[10:]

    out: list[httpx.Response] = []
    sender = threading.Thread(
        target=lambda: out.append(
            client.post("/v1/chat/completions", content=body(), headers=HEADERS)
        )
    )
    sender.start()
    try:
        assert arrived.wait(30)
        yield
    finally:
        finish.set()
        sender.join(60)
    assert out and out[0].status_code == 200, out


def test_the_ahead_work_gives_way_while_a_request_body_arrives(tmp_path: Path) -> None:
    """From the moment a request arrives (before its body has), the work done ahead is told to
    give way: the unit it is finishing then overlaps the body's arrival, and the request
    rarely waits for the conversation's lock (a 21 MB body takes 30 ms or more to arrive)."""
    from tests.support.waiting import wait_until

    agent = Agent(11)
    with running(tmp_path, limit=WINDOW, context_window=WINDOW) as (fake, gw):
        fake.scripts["agent"] = _script(itertools.count())
        work = _gateway_of(gw).pipeline.ahead
        with httpx.Client(base_url=gw.url, timeout=60) as client:
            agent.turn(client)
            assert not work.interrupted()
            with held_body(client, agent):
                wait_until(work.interrupted, 10, "the ahead work told to give way to the request")
            wait_until(lambda: not work.interrupted(), 10, "no request being served any more")


def test_the_ahead_work_is_not_held_back_while_the_upstream_answers(tmp_path: Path) -> None:
    """Once a request's view has gone upstream the work done ahead need not give way: at 50
    agents some request is always waiting for its answer, and the work would never run."""
    from tests.support.waiting import wait_until

    agent = Agent(13)
    with running(tmp_path, limit=WINDOW, context_window=WINDOW) as (fake, gw):
        fake.scripts["agent"] = _script(itertools.count())
        work = _gateway_of(gw).pipeline.ahead
        with httpx.Client(base_url=gw.url, timeout=60) as client:
            agent.turn(client)
            before = len(fake.received)
            out: list[httpx.Response] = []
            slow = {**HEADERS, "x-fake-latency-ms": "3000"}
            body = {"model": "gpt-fake", "messages": agent.messages}
            sender = threading.Thread(
                target=lambda: out.append(
                    client.post("/v1/chat/completions", json=body, headers=slow)
                )
            )
            sender.start()
            try:
                wait_until(lambda: len(fake.received) > before, 30, "the request upstream")
                assert not work.interrupted(), "held back while the upstream answers"
            finally:
                sender.join(60)
            assert out and out[0].status_code == 200, out


def test_a_side_request_does_not_hold_back_the_ahead_work_while_upstream(
    tmp_path: Path,
) -> None:
    """A request of a turn route that is not a turn (Gemini CLI's JSON-mode side calls, its
    token counts) goes upstream without a preparation: its arrival mark ends there."""
    from tests.support.waiting import wait_until

    body = {
        "contents": [{"role": "user", "parts": [{"text": "is the next speaker the model?"}]}],
        "generationConfig": {"responseMimeType": "application/json"},
    }
    headers = {"x-goog-api-key": "k", "x-fake-latency-ms": "3000"}
    with running(tmp_path) as (fake, gw):
        work = _gateway_of(gw).pipeline.ahead
        out: list[httpx.Response] = []
        with httpx.Client(base_url=gw.url, timeout=60) as client:
            sender = threading.Thread(
                target=lambda: out.append(
                    client.post(
                        "/v1beta/models/gemini-2.5-flash:generateContent",
                        json=body,
                        headers=headers,
                    )
                )
            )
            sender.start()
            try:
                wait_until(lambda: len(fake.received) > 0, 30, "the side call upstream")
                assert not work.interrupted(), "held back while a side call's upstream answers"
            finally:
                sender.join(60)
        assert out and out[0].status_code == 200, out.__repr__()[:300]


def test_a_body_that_arrives_slowly_holds_back_the_ahead_work_for_a_second_at_most(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.waiting import wait_until

    monkeypatch.setattr(gw_ahead, "ARRIVAL_SECONDS", 0.2)
    agent = Agent(17)
    with running(tmp_path, limit=WINDOW, context_window=WINDOW) as (fake, gw):
        fake.scripts["agent"] = _script(itertools.count())
        work = _gateway_of(gw).pipeline.ahead
        with httpx.Client(base_url=gw.url, timeout=60) as client, held_body(client, agent):
            wait_until(work.interrupted, 10, "the arrival marked")
            wait_until(lambda: not work.interrupted(), 10, "the mark to end, body or not")


def _filed_vectors(tmp_path: Path, in_child: bool) -> dict[str, Any]:
    """Run one conversation through a gateway; the vector documents its compactions filed,
    once none is pending, and whether its child process (if any) stopped with it."""
    from contextfold.evidence import semantic, store_vectors
    from tests.support.waiting import wait_until

    agent = Agent(11)
    with running(tmp_path, limit=WINDOW, context_window=WINDOW, vectors_process=in_child) as (
        fake,
        gw,
    ):
        fake.scripts["agent"] = _script(itertools.count())
        pipeline = _gateway_of(gw).pipeline
        with httpx.Client(base_url=gw.url, timeout=60) as client:
            for _ in range(30):
                r = agent.turn(client)
        session_id = r.headers["x-contextfold-session"]
        store = pipeline.registry.store

        def filed() -> bool:
            return not store_vectors.pending_blocks(store, session_id) and bool(
                store.docs(semantic.NAMESPACE, prefix=f"{session_id}/")
            )

        wait_until(filed, 120, "the vectors of the removed outputs to be filed")
        encoder = pipeline.ahead.encoder
        child = encoder._proc if encoder is not None else None
        if in_child:
            assert child is not None and child.poll() is None
        else:
            assert encoder is None
        docs = store.docs(semantic.NAMESPACE, prefix=f"{session_id}/")
    if child is not None:
        assert child.poll() is not None, "the child stops with the gateway"
    return {k.partition("/")[2]: v for k, v in docs.items()}


def test_vectors_are_filed_after_the_answers_by_a_child_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vectors of what the compactions removed are filed after the answers: by a child
    process at nice 19 (the default), which the gateway stops when it stops, or by the
    filing thread itself (``vectors_process = false``); the same documents either way."""
    monkeypatch.setenv("CONTEXTFOLD_SEMANTIC", "1")
    in_child = _filed_vectors(tmp_path / "child", True)
    in_thread = _filed_vectors(tmp_path / "thread", False)
    assert len(in_child) >= 2 and in_child == in_thread


def test_outputs_are_classified_ahead_only_once_a_compaction_is_near(tmp_path: Path) -> None:
    """After an answer the newest outputs are classified ahead (remembered by their text) when
    a compaction is due within a few turns; a conversation far from its window is left alone."""
    from types import SimpleNamespace

    from contextfold.core import textmemo
    from contextfold.engine.ahead import Lookahead

    def session(window: int) -> Any:
        cm = ContextManager(workspace=tmp_path / str(window), session_id="s", context_window=window)
        cm.add_many([SYSTEM, {"role": "user", "content": "Fix the failing tests"}])
        look = Lookahead()
        for n in range(4):
            call = {
                "id": f"c{n}",
                "type": "function",
                "function": {"name": "run", "arguments": "{}"},
            }
            body = "\n".join(f"line {j} of run {n} {random.random()}" for j in range(60))
            cm.add_many(
                [
                    {"role": "assistant", "content": "", "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": f"c{n}", "content": body},
                ]
            )
            look.note(cm.context.view.view_tokens())
        return SimpleNamespace(cm=cm, lookahead=look)

    textmemo.clear()
    far = session(1_000_000)
    assert gw_ahead.warm_newest(far, lambda: False) == 0
    near = session(WINDOW)
    assert gw_ahead.compaction_near(near)
    # four turns of growth at once would take this view past the window: still near
    assert not near.cm.compaction_due(gw_ahead.WARM_TURNS * max(near.lookahead.tokens, 1))
    assert gw_ahead.warm_newest(near, lambda: False) > 0
