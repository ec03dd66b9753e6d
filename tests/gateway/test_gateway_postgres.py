"""Two gateway replicas (separate processes, real uvicorn servers on 127.0.0.1) on one
PostgreSQL schema, or on one workspace folder, serve the same conversations alternately, as
behind a load balancer, with the real openai and anthropic SDK clients: every message stored
once, none lost.

A replica finds another's writes when it writes (the store checks the writer's head:
ConcurrentWriteError): it reopens the conversation from the store, re-diffs what the client
sent and appends what the store lacks (see docs/gateway.md)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.gateway_fakes import Call, FakeUpstream, Reply
from tests.gateway.gateway_helpers import gateway_process

pytestmark = pytest.mark.timeout(300)

SYSTEM = "You are a careful coding agent."


def _echo(call: Call) -> Reply:
    last = call.messages[-1]
    content = last.get("content")
    if isinstance(content, list):
        content = " ".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return Reply(text=f"answer to: {str(content)[:40]}")


def test_two_replicas_on_one_store_serve_sessions_alternately(
    store_url: str, tmp_path: Path
) -> None:
    import anthropic
    import openai

    fake = FakeUpstream().start()
    fake.default = _echo
    procs: list[subprocess.Popen[bytes]] = []
    urls: list[str] = []
    try:
        for n in range(2):
            proc, url = gateway_process(fake.url, store_url, tmp_path / f"replica{n}.log")
            procs.append(proc)
            urls.append(url)
        oa = [openai.OpenAI(base_url=u + "/v1", api_key="sk-pg", max_retries=0) for u in urls]
        an = [anthropic.Anthropic(base_url=u, api_key="sk-ant-pg", max_retries=0) for u in urls]
        chat: list[Any] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "openai start"},
        ]
        msgs: list[Any] = [{"role": "user", "content": "anthropic start"}]
        for turn in range(10):
            client = oa[turn % 2]  # the load balancer alternates
            if turn % 3 == 2:  # some turns stream
                text = "".join(
                    c.choices[0].delta.content or ""
                    for c in client.chat.completions.create(
                        model="gpt-fake", messages=chat, stream=True
                    )
                    if c.choices
                )
            else:
                resp = client.chat.completions.create(model="gpt-fake", messages=chat)
                text = resp.choices[0].message.content or ""
            chat += [
                {"role": "assistant", "content": text},
                {"role": "user", "content": f"o{turn}"},
            ]
            ac = an[(turn + 1) % 2]
            reply: Any
            if turn % 3 == 1:
                with ac.messages.stream(
                    model="claude-fake", max_tokens=256, system=SYSTEM, messages=msgs
                ) as s:
                    reply = s.get_final_message()
            else:
                reply = ac.messages.create(
                    model="claude-fake", max_tokens=256, system=SYSTEM, messages=msgs
                )
            blocks = [b.model_dump(exclude_none=True) for b in reply.content]
            msgs += [
                {"role": "assistant", "content": blocks},
                {"role": "user", "content": f"a{turn}"},
            ]
        resp = oa[0].chat.completions.create(model="gpt-fake", messages=chat)
        chat.append({"role": "assistant", "content": resp.choices[0].message.content})
        final = an[1].messages.create(
            model="claude-fake", max_tokens=256, system=SYSTEM, messages=msgs
        )
        msgs.append({"role": "assistant", "content": [final.content[0].model_dump()]})
    finally:
        for proc in procs:
            proc.terminate()  # graceful: held answers are written at shutdown
        for proc in procs:
            proc.wait(timeout=60)
        fake.stop()
    logs = "".join((tmp_path / f"replica{n}.log").read_text() for n in range(2))
    assert "Traceback" not in logs
    assert logs.count('"event": "resync"') >= 10, "each replica found the other's writes"

    from contextfold import ContextManager
    from contextfold.storage import open_store

    store = open_store(store_url if "://" in store_url else Path(store_url))
    try:
        infos = store.sessions(["gateway"])
        assert len(infos) == 2, [i.session_id for i in infos]  # no branch, no duplicate session
        stored = {}
        for info in infos:
            cm = ContextManager(store=store, session_id=info.session_id)
            stored[info.session_id] = [(m.role, m.text) for m in cm.history]
    finally:
        store.close()
    want_openai = [(m["role"], str(m["content"])) for m in chat]
    want_anthropic = [("system", SYSTEM)] + [
        (
            m["role"],
            m["content"]
            if isinstance(m["content"], str)
            else "\n".join(b.get("text", "") for b in m["content"]),
        )
        for m in msgs
    ]
    assert sorted(stored.values(), key=json.dumps) == sorted(
        [want_openai, want_anthropic], key=json.dumps
    )
