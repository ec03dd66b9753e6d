"""The index of answers a client's own compaction continues is kept in the store: a gateway
restarted between the summary and the continued conversation, or a second replica, continues
the same session instead of opening a new one. Embedded store and PostgreSQL."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from contextfold.core.messages import Message
from contextfold.gateway.cli import BackgroundServer
from contextfold.gateway.config import GatewayConfig
from contextfold.gateway.continuation import Continuations
from contextfold.gateway.convert import parse_anthropic
from contextfold.storage import open_store
from tests.gateway.gateway_fakes import Call, FakeUpstream, Reply

pytestmark = pytest.mark.timeout(300)

SUMMARY = [
    "1. Primary Request and Intent: fix the off-by-one in app.py and run the build steps.",
    "2. Key Technical Concepts: a noisy build step that prints a long log per run.",
    "3. Files and Code Sections: app.py, where total() returned one too many.",
    "4. Pending Tasks: none; every requested build step has run and was reported.",
]
ANSWER = "<analysis>\nshort\n</analysis>\n<summary>\n" + "\n".join(SUMMARY) + "\n</summary>"
#: Claude Code's first message after it compacted itself (its summary, re-wrapped)
CONTINUED = (
    "This session is being continued from a previous conversation that ran out of context. "
    "The conversation is summarized below:\nSummary:\n" + "\n".join(SUMMARY) + "\n\nGo on."
)


def test_a_second_index_on_the_store_finds_the_answer(store_url: str) -> None:
    store = open_store(store_url)
    try:
        Continuations(store).remember("gw-old", "alice", Message(role="assistant", content=ANSWER))
        fresh = Continuations(store)  # a restarted gateway, or another replica
        conv = parse_anthropic(
            [{"role": "user", "content": CONTINUED}, {"role": "user", "content": "and?"}], None
        )
        assert fresh.resolve("gw-new", "alice", conv) == "gw-old"
        # another credential's conversation never continues it, nor the old one itself
        assert Continuations(store).resolve("gw-new", "bob", conv) == "gw-new"
        assert Continuations(store).resolve("gw-old", "alice", conv) == "gw-old"
        # without a store the index is this process's only
        assert Continuations().resolve("gw-new", "alice", conv) == "gw-new"
    finally:
        store.close()


def _upstream(call: Call) -> Reply:
    last = call.messages[-1].get("content")
    if isinstance(last, str) and "summary" in last.lower():
        return Reply(text=ANSWER)
    return Reply(text="ok")


def _post(url: str, messages: list[dict[str, Any]]) -> httpx.Response:
    body = {"model": "claude-fake", "max_tokens": 512, "messages": messages}
    with httpx.Client(timeout=60) as http:
        resp = http.post(url + "/v1/messages", json=body, headers={"x-api-key": "sk-cc"})
    assert resp.status_code == 200, resp.text
    return resp


def test_a_restarted_gateway_continues_the_compacted_session(store_url: str) -> None:
    fake = FakeUpstream().start()
    fake.default = _upstream
    try:
        cfg = GatewayConfig(upstream=fake.url, port=0, store=store_url, record_delay=0).check()
        chat: list[dict[str, Any]] = [{"role": "user", "content": "fix the off-by-one in app.py"}]
        with BackgroundServer(cfg) as first:
            answer = _post(first.url, chat)
            old = answer.headers["x-contextfold-session"]
            chat.append({"role": "assistant", "content": answer.json()["content"][0]["text"]})
            # the client compacts itself: it asks for a summary as one more turn
            ask = [*chat, {"role": "user", "content": "Write a summary of the conversation."}]
            assert _post(first.url, ask).json()["content"][0]["text"] == ANSWER
        with BackgroundServer(cfg) as second:  # restarted between the two turns
            resp = _post(second.url, [{"role": "user", "content": CONTINUED}])
        assert resp.headers["x-contextfold-session"] == old
    finally:
        fake.stop()
