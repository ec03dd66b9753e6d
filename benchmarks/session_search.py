"""Benchmark: session_search over many sessions (issue 3, part 7).

Builds ``--sessions`` sessions of ``--messages`` messages each (default 1,000 x 200) in a
temporary workspace, sampling real message text from ``benchmarks/traces`` (plus a few Chinese
messages), spread over 10 agents. Reports the time to write the sessions (each message is
indexed in the same transaction that stores it: there is no separate index build), the
store size, and ``session_search`` latency (median / p95 over ``--queries`` queries, through
the agent tool, scoped to one agent). Target: median <= 20 ms.

Run: ``.venv/bin/python -m benchmarks.session_search [--sessions N] [--messages M]``
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from contextfold.core.messages import Message
from contextfold.core.tools import ToolBox
from contextfold.core.wire import from_openai
from contextfold.recovery.sessions.index import SessionIndex
from contextfold.recovery.sessions.log import SessionLog
from contextfold.recovery.sessions.tools import session_tools
from contextfold.storage import SQLiteStore
from contextfold.storage.session import SessionStore

TRACES = Path(__file__).resolve().parents[1] / "benchmarks" / "traces"
AGENTS = [f"agent-{i}" for i in range(10)]
CHINESE = [
    "请把数据库连接池的大小改成 32，并且不要修改测试文件。",
    "结论：问题的根本原因是时区转换时没有处理夏令时。",
    "需要在配置文件里把端口改成 8443，日志级别设为 debug。",
    "我们必须保证向后兼容，旧的接口不能删除。",
    "已修复：序列化精度问题现在按毫秒四舍五入。",
]
#: Cap sampled message text so the 200,000 logged messages stay a few hundred MB at most.
MAX_SAMPLE_CHARS = 12_000


def load_pool() -> list[dict[str, Any]]:
    pool: list[dict[str, Any]] = []
    for path in sorted(TRACES.glob("*.json")):
        for raw in json.loads(path.read_text(encoding="utf-8")):
            if raw.get("role") == "system":
                continue
            content = raw.get("content")
            if isinstance(content, str) and len(content) > MAX_SAMPLE_CHARS:
                raw = dict(raw, content=content[:MAX_SAMPLE_CHARS])
            pool.append(raw)
    if not pool:
        sys.exit(f"no traces found in {TRACES}")
    return pool


def plain(raw: dict[str, Any]) -> Message:
    """A trace message as a standalone message (tool pairing is irrelevant for the log)."""
    text = raw.get("content") if isinstance(raw.get("content"), str) else ""
    calls = raw.get("tool_calls") or []
    if raw.get("role") == "tool":
        return from_openai({"role": "user", "content": text or ""})
    if calls:
        args = " ".join(c["function"]["arguments"] for c in calls)
        return from_openai({"role": "assistant", "content": (text or "") + "\n" + args})
    return from_openai({"role": raw.get("role", "user"), "content": text or ""})


def build(ws: SQLiteStore, sessions: int, messages: int, rng: random.Random) -> None:
    pool = [plain(r) for r in load_pool()]
    for i in range(sessions):
        start = rng.randrange(len(pool))
        msgs = [pool[(start + j) % len(pool)] for j in range(messages)]
        msgs = [Message(role=m.role, content=m.content) for m in msgs]  # fresh uuids
        if i % 7 == 0:
            msgs[rng.randrange(messages)] = Message(role="user", content=rng.choice(CHINESE))
        session = SessionStore(ws, f"s{i:05d}", AGENTS[i % len(AGENTS)])
        log = SessionLog(session)
        for k in range(0, messages, 50):
            with session.unit():
                log.append(msgs[k : k + 50], k)


def make_queries(ws: SQLiteStore, n: int, rng: random.Random) -> list[tuple[str, str]]:
    """(agent, query) pairs: one or two distinctive words from a random logged message."""
    pool = [plain(r) for r in load_pool()]
    out: list[tuple[str, str]] = []
    while len(out) < n:
        if len(out) % 20 == 0:
            out.append((rng.choice(AGENTS), rng.choice(["端口", "根本原因", "向后兼容", "序列化"])))
            continue
        words = re.findall(r"[A-Za-z_][A-Za-z0-9_]{4,}", pool[rng.randrange(len(pool))].text)
        if len(words) < 2:
            continue
        k = rng.choice([1, 2, 2, 3])
        start = rng.randrange(max(1, len(words) - k))
        out.append((rng.choice(AGENTS), " ".join(words[start : start + k])))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--messages", type=int, default=200)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument(
        "--workspace",
        help="keep the workspace here (reused, logs not rebuilt, when it already has sessions)",
    )
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="cf-bench-") as tmp:
        ws = SQLiteStore(Path(args.workspace or tmp))
        t0 = time.perf_counter()
        if not ws.sessions():
            build(ws, args.sessions, args.messages, rng)
        t_logs = time.perf_counter() - t0
        ws.close()
        size = sum(p.stat().st_size for p in Path(args.workspace or tmp).glob("store.sqlite*"))

        t0 = time.perf_counter()
        ws = SQLiteStore(Path(args.workspace or tmp))
        index = SessionIndex(ws)
        n_sessions = len(index.list_sessions(None))
        t_sync = time.perf_counter() - t0
        n_msgs = sum(m.message_count for m in index.list_sessions(None))

        queries = make_queries(ws, args.queries, rng)
        boxes = {a: ToolBox(session_tools(index, agent_id=a)) for a in AGENTS}
        lat: list[float] = []
        raw_lat: list[float] = []
        empty = 0
        for agent, q in queries:
            t0 = time.perf_counter()
            hits = index.search(q, agent_id=agent, limit=10)
            raw_lat.append((time.perf_counter() - t0) * 1000)
            empty += not hits
            t0 = time.perf_counter()
            text, is_error = boxes[agent].run("session_search", {"query": q, "limit": 10})
            lat.append((time.perf_counter() - t0) * 1000)
            if is_error:
                print(f"tool error for {q!r}: {text}", file=sys.stderr)
        ws.close()

    def pct(xs: list[float], p: float) -> float:
        return sorted(xs)[min(len(xs) - 1, round(p * (len(xs) - 1)))]

    print(f"sessions / messages      : {n_sessions:,} / {n_msgs:,}")
    print(f"sessions written+indexed : {t_logs:.1f} s ({n_msgs / max(t_logs, 1e-9):,.0f} msg/s)")
    print(f"store size               : {size / 1e6:.1f} MB")
    print(f"open + list sessions     : {t_sync * 1000:.0f} ms (nothing rebuilt)")
    print(
        f"session_search (tool)    : median {statistics.median(lat):.2f} ms, "
        f"p95 {pct(lat, 0.95):.2f} ms, max {max(lat):.1f} ms over {len(lat)} queries "
        f"({empty} without hits)"
    )
    print(
        f"SessionIndex.search      : median {statistics.median(raw_lat):.2f} ms, "
        f"p95 {pct(raw_lat, 0.95):.2f} ms"
    )
    ok = statistics.median(lat) <= 20.0
    print("target median <= 20 ms  :", "met" if ok else "NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
