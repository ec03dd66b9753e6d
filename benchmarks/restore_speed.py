"""Benchmark: evidence search + restore over a session with many evidence items (issue 4).

Builds one session whose ``compact-blocks.jsonl`` holds ``--items`` evidence items (default
10,000), indexed through ``EvidenceStore.index_compaction`` in compactions of 50 tool results.
Bodies are sampled from the real tool outputs in ``benchmarks/traces`` (with their commands);
a few Chinese worker notes are mixed in. Reports the indexing time, the time to open the store
(a restart: the index is persisted, nothing is rebuilt), resident memory, and the latency of
``EvidenceSearch.search(query, k=5)`` (which also reads the top hits' bodies from disk),
median / p95 over ``--queries`` queries: commands ("show me the full error output of `...`"),
exception types, test ids, free words and Chinese. Target: median <= 50 ms.

Run: ``.venv/bin/python -m benchmarks.restore_speed [--items N] [--queries Q]``
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from contextfold.core.messages import Message, ToolCall
from contextfold.evidence import EvidenceSearch, EvidenceStore
from contextfold.storage import SQLiteStore
from contextfold.storage.session import SessionStore

TRACES = Path(__file__).resolve().parents[1] / "benchmarks" / "traces"
CHINESE = [
    "子任务完成：定位到 parser.py 第 120 行的空指针异常，原因是配置项缺失。",
    "测试失败：test_login 断言错误，期望 200 实际 500，日志见 worker 输出。",
    "编译报错：找不到模块 utils，可能是路径配置问题。",
]
FALLBACK = [
    (
        "pytest -x tests/test_core.py",
        "E   AssertionError: assert 1 == 2\nFAILED tests/test_core.py::test_x",
    ),
    ("python run.py", 'Traceback (most recent call last):\n  File "run.py", line 3\nKeyError: 1'),
    ("ls -la", "total 4\ndrwxr-xr-x 2 user user 4096 .\n"),
]


def _samples() -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for path in sorted(TRACES.glob("*.json")):
        data: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
        calls: dict[str, str] = {}
        for m in data:
            for c in m.get("tool_calls") or []:
                try:
                    calls[c["id"]] = json.loads(c["function"]["arguments"]).get("command", "")
                except (ValueError, AttributeError):
                    continue
            if m.get("role") == "tool" and isinstance(m.get("content"), str):
                text = m["content"]
                if len(text) <= 60_000:  # keep the build quick; huge bodies are tested elsewhere
                    out.append((calls.get(m.get("tool_call_id", ""), "") or "echo", text))
    return out or FALLBACK


def build(session_dir: Path, items: int, rng: random.Random) -> tuple[float, list[tuple[str, str]]]:
    samples = _samples()
    db = SQLiteStore(session_dir)
    store = EvidenceStore(SessionStore(db, "bench", "bench"))
    used: list[tuple[str, str]] = []
    t0 = time.perf_counter()
    n = 0
    while n < items:
        msgs: list[Message] = []
        for _ in range(min(50, items - n)):
            cmd, text = rng.choice(samples)
            if rng.random() < 0.03:
                text = rng.choice(CHINESE) + f" (run {n})"
            # make every body distinct, as real sessions mostly are
            text = f"{text}\n[{n}]"
            call_id = f"call_{n}"
            msgs.append(
                Message(
                    role="assistant",
                    tool_calls=(
                        ToolCall(id=call_id, name="bash", arguments=json.dumps({"command": cmd})),
                    ),
                )
            )
            msgs.append(Message(role="tool", tool_call_id=call_id, content=text))
            used.append((cmd, text))
            n += 1
        store.index_compaction(
            messages=msgs,
            offloaded={},
            summary_items_source=[("execution_progress", f"ran `{msgs[0].tool_calls[0].id}`")],
            token_before=0,
            token_after=0,
            boundary_uuid=None,
            natural_summary="",
            tier="bench",
            strategy="bench",
        )
    db.close()
    return time.perf_counter() - t0, used


def queries(used: list[tuple[str, str]], count: int, rng: random.Random) -> list[str]:
    out: list[str] = []
    kinds = [
        lambda: f"show me the full error output of `{rng.choice(used)[0]}`",
        lambda: "what was the exact ModuleNotFoundError traceback earlier?",
        lambda: "AttributeError: 'NoneType' object has no attribute",
        lambda: "FAILED tests/test_core.py::test_x assertion",
        lambda: "刚才测试失败的具体报错是什么",
        lambda: "worker 看到的日志 parser.py 空指针",
        lambda: "grep -n def setup.py",
        lambda: "SyntaxError invalid syntax connectionpool",
    ]
    for _ in range(count):
        out.append(rng.choice(kinds)())
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--items", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="cf-restore-") as tmp:
        session = Path(tmp) / "session"
        index_s, used = build(session, args.items, rng)
        t0 = time.perf_counter()
        store = EvidenceStore(SessionStore(SQLiteStore(session), "bench", "bench"))
        search = EvidenceSearch(store)  # the index is persisted: nothing is built on open
        open_s = time.perf_counter() - t0
        qs = queries(used, args.queries, rng)
        for q in qs[:10]:  # warm-up
            search.search(q, k=5)
        times: list[float] = []
        for q in qs:
            t = time.perf_counter()
            search.search(q, k=5)
            times.append((time.perf_counter() - t) * 1000)
        times.sort()
        median = statistics.median(times)
        p95 = times[int(0.95 * (len(times) - 1))]
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        body_mb = (
            sum(f.stat().st_size for f in (session / "blobs").rglob("*") if f.is_file()) / 2**20
        )
        print(f"evidence items:           {len(search)}")
        print(f"bodies on disk:           {body_mb:.1f} MB")
        print(f"index (archive + blocks): {index_s:.1f} s")
        print(f"open (nothing rebuilt):   {open_s * 1000:.1f} ms")
        print(f"max RSS:                  {rss_mb:.0f} MB")
        print(
            f"search+restore k=5:       median {median:.1f} ms, p95 {p95:.1f} ms, max {times[-1]:.1f} ms"
        )
        ok = median <= 50.0
        print("target median <= 50 ms:  ", "OK" if ok else "MISSED")
        return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
