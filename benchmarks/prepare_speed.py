"""prepare() overhead with nothing to compact (issue 2 acceptance).

A 2,000-message history of about 1M characters (assistant tool calls and their results, as an
agent produces them) under a window large enough that no tier fires. Reports the median and
p95 of prepare() over repeated calls, and the per-turn cost when one message pair is added
before each call (what an agent loop pays). Run: python -m benchmarks.prepare_speed
"""

from __future__ import annotations

import statistics
import tempfile
import time

from contextfold import ContextManager


def build(cm: ContextManager, messages: int) -> None:
    cm.add({"role": "system", "content": "You are a coding agent."})
    cm.add({"role": "user", "content": "Fix the failing tests in the parser package."})
    n = 1
    while len(cm.history) < messages:
        cm.add_many(
            [
                {
                    "role": "assistant",
                    "content": "Let me look at the next file. " * 4,
                    "tool_calls": [
                        {
                            "id": f"call_{n}",
                            "type": "function",
                            "function": {
                                "name": "bash",
                                "arguments": f'{{"command": "cat src/m{n}.py"}}',
                            },
                        }
                    ],
                },
                {
                    "role": "tool",
                    "tool_call_id": f"call_{n}",
                    "content": f"line {n}: x = compute()\n" * 40,
                },
            ]
        )
        n += 1


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cm = ContextManager(workspace=tmp, session_id="bench", context_window=2_000_000)
        build(cm, 2_000)
        chars = sum(len(m.text) for m in cm.history)
        cm.prepare()
        times = []
        for _ in range(500):
            t = time.perf_counter()
            cm.prepare()
            times.append((time.perf_counter() - t) * 1000)
        times.sort()
        print(
            f"history: {len(cm.history)} messages, {chars:,} characters, {cm.view_tokens:,} tokens"
        )
        print(
            f"prepare(), nothing new:   median {statistics.median(times):.3f} ms, "
            f"p95 {times[int(len(times) * 0.95)]:.3f} ms (target: median <= 1 ms)"
        )
        turn = []
        n = 10_000
        for _ in range(200):
            cm.add_many(
                [
                    {
                        "role": "assistant",
                        "content": "next",
                        "tool_calls": [
                            {
                                "id": f"t{n}",
                                "type": "function",
                                "function": {"name": "bash", "arguments": "{}"},
                            }
                        ],
                    },
                    {"role": "tool", "tool_call_id": f"t{n}", "content": "ok\n" * 100},
                ]
            )
            n += 1
            t = time.perf_counter()
            cm.prepare()
            turn.append((time.perf_counter() - t) * 1000)
        turn.sort()
        print(
            f"prepare() after a new turn: median {statistics.median(turn):.3f} ms, "
            f"p95 {turn[int(len(turn) * 0.95)]:.3f} ms"
        )


if __name__ == "__main__":
    main()
