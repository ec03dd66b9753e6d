"""``contextfold sessions tail`` follows a session the gateway writes, over real HTTP."""

from __future__ import annotations

import io
import threading
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import openai

from contextfold.cli import main
from tests.gateway.gateway_helpers import running
from tests.support.store_helpers import session_ids


def _chat(client: openai.OpenAI, messages: list[Any]) -> dict[str, Any]:
    resp = client.chat.completions.create(model="gpt-fake", messages=messages)
    return resp.choices[0].message.model_dump(exclude_none=True)


def test_tail_follows_a_gateway_session(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    with running(tmp_path) as (_fake, gw):
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-1", max_retries=0)
        messages: list[Any] = [
            {"role": "system", "content": "You are a careful coding agent."},
            {"role": "user", "content": "fix the parser"},
        ]
        messages.append(_chat(client, messages))
        (sid,) = session_ids(ws)
        done: dict[str, Any] = {}
        out, err = io.StringIO(), io.StringIO()

        def follow() -> None:
            with redirect_stdout(out), redirect_stderr(err):
                argv = ["sessions", "tail", sid, "--start", "0", "--count", "4"]
                done["code"] = main([*argv, "--interval", "0.05", "--store", str(ws)])

        tail = threading.Thread(target=follow)
        tail.start()
        messages.append({"role": "user", "content": "now run the tests"})
        messages.append(_chat(client, messages))  # the gateway stores the new turn
        tail.join(timeout=120)
    assert not tail.is_alive() and done.get("code") == 0, err.getvalue()
    heads = [line for line in out.getvalue().splitlines() if line.startswith("[")]
    assert [h.split(":")[0] for h in heads] == [
        "[0] system",
        "[1] user",
        "[2] assistant",
        "[3] user",
    ]
    assert "now run the tests" in out.getvalue()
