"""Compaction with a big fixed prefix (Claude Code's shape: about 26K tokens of system prompt
and 24 tool schemas in an 80K window, 50 turns of tool outputs of a few KB)."""

from __future__ import annotations

import json
import random

from contextfold import ContextManager

WINDOW = 80_000
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


def test_claude_code_shape_compacts_rarely_and_keeps_the_room_used() -> None:
    rng = random.Random(7)
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
    cm = ContextManager(store="memory://", context_window=WINDOW)
    cm.add({"role": "system", "content": _words(rng, 4_700)})
    cm.add({"role": "user", "content": "Fix the failing tests in the repository"})
    fixed = cm._schema_tokens(tools) + cm.view.range_tokens(0, 1)
    assert 24_000 <= fixed <= 28_000  # the shape of the issue: about 26K fixed
    room = WINDOW - fixed
    changed: list[int] = []
    peak = 0
    for t in range(50):
        view = cm.prepare(tools=tools)
        if cm.last_prepare is not None and cm.last_prepare.changed:
            changed.append(t)
        assert cm.view_tokens + cm._schema_tokens(tools) <= WINDOW
        verbatim = sum(
            cm.counter.count_text(m.text)
            for m in cm.view_messages[1:]
            if not m.metadata.get("cf_replaced") and not m.metadata.get("cf_kind")
        )
        peak = max(peak, verbatim)
        assert view[0]["role"] == "system"
        cm.add(_tool_turn(t, rng))
        cm.add(
            {"role": "tool", "tool_call_id": f"c{t}", "content": _words(rng, rng.randint(400, 900))}
        )
    long = [t for t in changed if t >= 10]
    assert len(long) <= 40 / 5, changed  # at most 1 turn in 5 once the conversation is long
    # the messages sent verbatim use at least half of what the window leaves after the prefix
    assert peak >= 0.5 * room, (peak, room)


def _tool_turn(t: int, rng: random.Random) -> dict[str, object]:
    return {
        "role": "assistant",
        "content": "running",
        "tool_calls": [
            {
                "id": f"c{t}",
                "type": "function",
                "function": {"name": "Tool0", "arguments": json.dumps({"x": f"pytest -k {t}"})},
            }
        ],
    }
