"""Through the gateway, Claude Code's shape: about 26K tokens of system prompt and 24 tool
schemas in an 80K window, 50 turns of tool outputs of a few KB. Compaction is rare, and
``X-Contextfold-Compaction`` describes the turn it is on, not the session's last compaction."""

from __future__ import annotations

import itertools
import json
import random
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from tests.gateway.gateway_fake_wire import count_tokens
from tests.gateway.gateway_fakes import Call, Reply
from tests.gateway.gateway_helpers import running

WINDOW = 80_000
TURNS = 50
VOCAB = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "error",
    "file",
    "path",
    "value",
    "config",
    "module",
    "import",
    "return",
    "class",
]


def _words(rng: random.Random, n: int) -> str:
    return " ".join(f"{rng.choice(VOCAB)}{rng.randint(0, 999)}" for _ in range(n))


def _script(counter: Iterator[int]) -> Callable[[Call], Reply]:
    def reply(call: Call) -> Reply:
        n = next(counter)
        return Reply(text="", tool_calls=[(f"call_{n}", "Tool0", {"x": f"pytest -k case_{n}"})])

    return reply


def test_claude_code_shape_through_the_gateway(tmp_path: Path) -> None:
    rng = random.Random(11)
    tools = [
        {
            "type": "function",
            "function": {
                "name": f"Tool{i}",
                "description": _words(rng, 125),
                "parameters": {"type": "object", "properties": {"x": {"type": "string"}}},
            },
        }
        for i in range(24)
    ]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": _words(rng, 4_700)},
        {"role": "user", "content": "Fix the failing tests in the repository"},
    ]
    headers: list[str | None] = []
    with running(tmp_path, limit=WINDOW, context_window=WINDOW) as (fake, gw):
        fake.scripts["cc"] = _script(itertools.count())
        with httpx.Client(base_url=gw.url, timeout=60) as client:
            for _ in range(TURNS):
                r = client.post(
                    "/v1/chat/completions",
                    json={"model": "gpt-fake", "messages": messages, "tools": tools},
                    headers={"x-fake-script": "cc", "authorization": "Bearer sk-test"},
                )
                assert r.status_code == 200, r.text
                headers.append(r.headers.get("x-contextfold-compaction"))
                answer = r.json()["choices"][0]["message"]
                messages.append(
                    {k: v for k, v in answer.items() if k in ("role", "content", "tool_calls")}
                )
                call_id = answer["tool_calls"][0]["id"]
                out = _words(rng, rng.randint(400, 900))
                messages.append({"role": "tool", "tool_call_id": call_id, "content": out})
            metrics = client.get("/metrics").text
    compactions = sum(
        int(float(v))
        for v in re.findall(r"^contextfold_gateway_compactions_total\{[^}]*\} (\S+)", metrics, re.M)
    )
    marked = [t for t, h in enumerate(headers) if h]
    # the header names this turn's compaction only: as many answers as compactions
    assert len(marked) == compactions > 0, (marked, compactions)
    print("compacted on turns", marked)
    assert [t for t in marked if t >= 10] and len([t for t in marked if t >= 10]) <= 40 / 5
    accepted = fake.accepted("/v1/chat/completions")
    assert len(accepted) == TURNS and all(r.tokens <= WINDOW for r in accepted)
    # the messages sent verbatim (as the client sent them: no placeholder, no summary) use at
    # least half of what the window leaves after the fixed prefix (system prompt and tools)
    sent = {json.dumps(m, sort_keys=True) for m in messages[1:]}
    fixed = count_tokens({"messages": messages[:1], "tools": tools})
    verbatim = [
        count_tokens(
            {"messages": [m for m in r.body["messages"] if json.dumps(m, sort_keys=True) in sent]}
        )
        for r in accepted
    ]
    assert max(verbatim) >= 0.5 * (WINDOW - fixed), (max(verbatim), WINDOW - fixed)
