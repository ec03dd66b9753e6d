"""``contextfold serve --workers 2``: two server processes on one port and one store. A client
that opens a new connection for every request lands on either worker; the conversation is
stored exactly once, whichever worker served each turn (a worker reopens a session the other
moved on, and an answer it held that the other already stored is not written twice)."""

from __future__ import annotations

import itertools
import json
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.gateway.gateway_fakes import Call, FakeUpstream, Reply
from tests.gateway.gateway_helpers import gateway_process

pytestmark = pytest.mark.timeout(300)


def _answer(call: Call) -> Reply:
    return Reply(text=f"answer {len(call.messages)}")


def _handovers(log: Path) -> int:
    """How often the conversation moved from one worker to the other, request by request."""
    pids = [
        json.loads(line)["pid"]
        for line in log.read_text().splitlines()
        if line.startswith("{") and '"event": "request"' in line
    ]
    return sum(1 for a, b in itertools.pairwise(pids) if a != b)


@pytest.mark.parametrize("stream_every", [0, 2])
def test_two_workers_serve_one_conversation_over_fresh_connections(
    tmp_path: Path, stream_every: int
) -> None:
    fake = FakeUpstream().start()
    fake.default = _answer
    log = tmp_path / "gateway.log"
    store = str(tmp_path / "ws")
    proc: subprocess.Popen[bytes] | None = None
    chat: list[Any] = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "start"},
    ]
    try:
        proc, url = gateway_process(fake.url, store, log, "--workers", "2")
        turn = 0
        # until a worker served the conversation again after the other had (A, B, A)
        while turn < 8 or (_handovers(log) < 2 and turn < 60):
            body = {"model": "m", "messages": chat}
            headers = {"authorization": "Bearer sk-workers"}
            with httpx.Client(timeout=30) as client:  # a new connection every time
                if stream_every and turn % stream_every == 1:
                    body["stream"] = True
                    text = ""
                    with client.stream(
                        "POST", url + "/v1/chat/completions", json=body, headers=headers
                    ) as resp:
                        assert resp.status_code == 200
                        for line in resp.iter_lines():
                            if line.startswith("data: {"):
                                for choice in json.loads(line[6:]).get("choices") or []:
                                    text += choice.get("delta", {}).get("content") or ""
                else:
                    resp = client.post(url + "/v1/chat/completions", json=body, headers=headers)
                    assert resp.status_code == 200, resp.text
                    text = resp.json()["choices"][0]["message"]["content"]
            chat += [
                {"role": "assistant", "content": text},
                {"role": "user", "content": f"u{turn}"},
            ]
            turn += 1
    finally:
        if proc is not None:
            proc.terminate()  # graceful: each worker writes the answers it holds
            proc.wait(timeout=60)
        fake.stop()
    text = log.read_text()
    assert "Traceback" not in text
    assert _handovers(log) >= 2, "the conversation went from one worker to the other and back"
    assert '"event": "resync"' in text  # the worker caught up with the other's writes

    from contextfold import ContextManager
    from contextfold.storage import open_store

    st = open_store(Path(store))
    try:
        infos = st.sessions(["gateway"])
        assert len(infos) == 1, [i.session_id for i in infos]  # no branch, no second session
        cm = ContextManager(store=st, session_id=infos[0].session_id)
        stored = [(m.role, m.text) for m in cm.history]
    finally:
        st.close()
    # everything the client sent, each message once, and the last answer (written at shutdown)
    assert stored == [(m["role"], m["content"]) for m in chat[:-1]]


def test_workers_are_checked(tmp_path: Path) -> None:
    from contextfold.errors import ConfigError
    from contextfold.gateway.config import load_config

    assert load_config(overrides={"upstream": "http://x", "workers": 3}).workers == 3
    for bad in (-1, 65):
        with pytest.raises(ConfigError, match="workers"):
            load_config(overrides={"upstream": "http://x", "workers": bad})


def test_the_default_is_one_process_per_core_on_a_shared_store() -> None:
    from contextfold.gateway.config import GatewayConfig
    from contextfold.gateway.serving import AUTO_WORKERS_MAX, worker_count

    auto = GatewayConfig(upstream="http://x")
    assert auto.workers == 0
    assert [worker_count(auto, cores) for cores in (1, 2, 3, 4, 8, 64)] == [1, 2, 3, 4, 8, 8]
    pg = GatewayConfig(upstream="http://x", store="postgresql://db/x")
    assert worker_count(pg, 4) == 4
    memory = GatewayConfig(upstream="http://x", store="memory://")
    assert worker_count(memory, 8) == 1  # a process cannot share its memory store
    assert AUTO_WORKERS_MAX == 8
    assert worker_count(GatewayConfig(upstream="http://x", workers=3), 64) == 3  # as configured
    assert 1 <= worker_count(auto) <= AUTO_WORKERS_MAX  # this machine's cores
