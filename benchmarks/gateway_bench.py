"""The gateway's added latency and throughput: 50 concurrent sessions on loopback.

A fake upstream (tests/gateway_fakes.py, replaying the bundled trajectories' assistant turns)
and ``contextfold serve`` run as separate processes; this process drives 50 concurrent
conversations through the gateway with httpx, each replaying a trajectory turn by turn
(OpenAI Chat Completions, half of them streaming). The gateway reports the time it added to
each request (``Server-Timing: contextfold;dur=``: from receiving the request to the first
byte sent back, upstream wait excluded) and whether it compacted.

Targets (issue 10): added latency p50 <= 5 ms and p95 <= 25 ms on turns without compaction.
Run: python -m benchmarks.gateway_bench [--sessions 50] [--turns 20] [--store FOLDER_OR_URL]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for p in (str(ROOT), str(ROOT / "src")):
    if p not in sys.path:
        sys.path.insert(0, p)

FAKE = """
import sys, json, time
sys.path[:0] = [{root!r}, {src!r}]
from tests.conftest import load_trace, trace_files
from tests.gateway_fakes import FakeUpstream, trace_replies
traces = [list(trace_replies(load_trace(p))) for p in trace_files()]
fake = FakeUpstream(port={port}, keep=False)
fake.default = lambda call: traces[int(call.headers["x-fake-trace"])][int(call.headers["x-fake-turn"])]
fake.start()
print("ready", flush=True)
while True:
    time.sleep(3600)
"""

_DUR = re.compile(r"(\w+);dur=([0-9.]+)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def wait_ready(url: str, timeout: float = 60.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient() as client:
        while time.monotonic() < deadline:
            try:
                if (await client.get(url)).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


async def session(
    client: Any,
    base: str,
    n: int,
    trace: list[dict[str, Any]],
    turns: int,
    think: float,
    out: list[dict[str, Any]],
) -> None:
    messages: list[Any] = list(trace[:2])
    i, turn = 2, 0
    stream = n % 2 == 1
    headers = {"authorization": f"Bearer sk-bench-{n}", "x-fake-trace": str(n % 45)}
    while i < len(trace) and turn < turns:
        m = trace[i]
        if m["role"] != "assistant":
            messages.append(m)
            i += 1
            continue
        body = {"model": "gpt-bench", "messages": messages, "stream": stream}
        t0 = time.perf_counter()
        if stream:
            async with client.stream(
                "POST",
                base + "/v1/chat/completions",
                json=body,
                headers={**headers, "x-fake-turn": str(turn)},
            ) as resp:
                timing = resp.headers.get("server-timing", "")
                compaction = resp.headers.get("x-contextfold-compaction")
                status = resp.status_code
                async for _ in resp.aiter_raw():
                    pass
        else:
            resp = await client.post(
                base + "/v1/chat/completions",
                json=body,
                headers={**headers, "x-fake-turn": str(turn)},
            )
            timing = resp.headers.get("server-timing", "")
            compaction = resp.headers.get("x-contextfold-compaction")
            status = resp.status_code
        total = (time.perf_counter() - t0) * 1000
        if status != 200:
            raise RuntimeError(f"session {n} turn {turn}: HTTP {status}")
        parts = {k: float(v) for k, v in _DUR.findall(timing)}
        out.append(
            {
                "parts": parts,
                "added_ms": parts.get("contextfold", float("nan")),
                "total_ms": total,
                "compaction": compaction,
                "stream": stream,
            }
        )
        reply = {"role": "assistant", "content": m.get("content") or ""}
        if m.get("tool_calls"):
            reply["tool_calls"] = m["tool_calls"]
        messages.append(reply)
        i += 1
        turn += 1
        await asyncio.sleep(think)  # the agent runs its tool before the next call


async def drive(
    base: str, sessions: int, turns: int, think: float
) -> tuple[list[dict[str, Any]], float]:
    import httpx
    from tests.conftest import load_trace, trace_files

    traces = [load_trace(p) for p in trace_files()]
    results: list[dict[str, Any]] = []
    limits = httpx.Limits(max_connections=sessions * 2, max_keepalive_connections=sessions * 2)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        t0 = time.perf_counter()
        await asyncio.gather(
            *(
                session(client, base, n, traces[n % 45], turns, think, results)
                for n in range(sessions)
            )
        )
        wall = time.perf_counter() - t0
    return results, wall


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gateway_bench")
    ap.add_argument("--sessions", type=int, default=50)
    ap.add_argument("--turns", type=int, default=20, help="turns per session")
    ap.add_argument("--window", type=int, default=128_000)
    ap.add_argument(
        "--think-ms",
        type=float,
        default=100.0,
        help="pause between a session's turns: the agent running its tool (default 100 ms)",
    )
    ap.add_argument(
        "--store", help="workspace folder or postgresql:// URL (default: a temp folder)"
    )
    ap.add_argument("--out", default=str(ROOT / "bench-results" / "gateway.json"))
    args = ap.parse_args(argv)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    fake_port, gw_port = free_port(), free_port()
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="cf-gateway-bench-") as tmp:
        store = args.store or str(Path(tmp) / "ws")
        try:
            code = FAKE.format(root=str(ROOT), src=str(ROOT / "src"), port=fake_port)
            procs.append(
                subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL)
            )
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "contextfold",
                        "serve",
                        "--upstream",
                        f"http://127.0.0.1:{fake_port}",
                        "--port",
                        str(gw_port),
                        "--store",
                        store,
                        "--window",
                        str(args.window),
                        "--log-level",
                        "warning",
                    ],
                    env=env,
                    stdout=subprocess.DEVNULL,
                )
            )
            base = f"http://127.0.0.1:{gw_port}"
            asyncio.run(wait_ready(f"http://127.0.0.1:{fake_port}/v1/models"))
            asyncio.run(wait_ready(base + "/healthz"))
            results, wall = asyncio.run(
                drive(base, args.sessions, args.turns, args.think_ms / 1000)
            )
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(timeout=10)
    plain = [r["added_ms"] for r in results if not r["compaction"]]
    breakdown = {
        k: round(pct([r["parts"].get(k, 0.0) for r in results if not r["compaction"]], 0.5), 2)
        for k in ("lock", "thread", "store", "view")
    }
    compacting = [r["added_ms"] for r in results if r["compaction"]]
    total = [r["total_ms"] for r in results]
    summary = {
        "sessions": args.sessions,
        "think_ms": args.think_ms,
        "requests": len(results),
        "store": "postgresql"
        if args.store and args.store.startswith("postgres")
        else "embedded (workspace folder)",
        "wall_s": round(wall, 2),
        "requests_per_s": round(len(results) / wall, 1),
        "added_ms_p50": round(pct(plain, 0.5), 2),
        "added_ms_p95": round(pct(plain, 0.95), 2),
        "added_ms_mean": round(statistics.fmean(plain), 2) if plain else None,
        "turns_without_compaction": len(plain),
        "p50_parts_ms": breakdown,
        "turns_with_compaction": len(compacting),
        "added_ms_p50_compacting": round(pct(compacting, 0.5), 2) if compacting else None,
        "client_total_ms_p50": round(pct(total, 0.5), 2),
        "client_total_ms_p95": round(pct(total, 0.95), 2),
    }
    ok = summary["added_ms_p50"] <= 5 and summary["added_ms_p95"] <= 25
    summary["targets_met"] = ok
    print(
        f"gateway: {summary['sessions']} concurrent sessions, {summary['requests']} requests in {summary['wall_s']} s "
        f"= {summary['requests_per_s']} req/s ({summary['store']})"
    )
    print(
        f"  added latency, turns without compaction ({len(plain)}): p50 {summary['added_ms_p50']} ms, "
        f"p95 {summary['added_ms_p95']} ms (targets 5 / 25 ms: {'met' if ok else 'MISSED'})"
    )
    print(
        f"  of which (p50): session lock {breakdown['lock']} ms, waiting for a worker thread "
        f"{breakdown['thread']} ms, appending to the store {breakdown['store']} ms, deriving "
        f"the view {breakdown['view']} ms"
    )
    if compacting:
        print(
            f"  turns with compaction ({len(compacting)}): added p50 {summary['added_ms_p50_compacting']} ms"
        )
    print(
        f"  client end to end (fake upstream answers at once): p50 {summary['client_total_ms_p50']} ms, "
        f"p95 {summary['client_total_ms_p95']} ms"
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
