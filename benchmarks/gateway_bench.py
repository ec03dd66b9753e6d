"""The gateway's added latency and throughput at 1, 10 and 50 concurrent sessions on loopback.

A fake upstream (tests/gateway/gateway_fakes.py, replaying the bundled trajectories' assistant turns)
and ``contextfold serve`` run as separate processes; this process drives rounds of concurrent
conversations through the gateway with httpx (new sessions each round), each replaying a
trajectory turn by turn (OpenAI Chat Completions, half of them streaming).

Pacing. Each answer takes the model ``--upstream-ms`` (default 1000 ms) and each session pauses
``--think-ms`` (default 100 ms, the agent running its tool; each pause drawn from 0.5-1.5x that)
before its next call; sessions start at random moments within one turn's time, as independent
agents would (not all in the same millisecond). 1000 ms models
a fast hosted model on an agent turn: about 0.4-0.6 s to the first token on a long, mostly
cached prompt and 60-150 output tokens (a short thought and one tool call) at 100-200 tokens/s,
which is 0.8-1.5 s; the fast end is taken, as it offers the gateway the most requests per
session. A streamed answer's headers and first event come after 40 % of that time and its other
events evenly over the rest, so the time to the first byte is realistic too. At this pacing 50
sessions offer about 45 requests/s, what 50 busy agents would.

Then one **saturation** round (``--saturation-sessions``, default 50) with an upstream that
answers at once: every session calls again 100 ms after its answer, which offers more requests
than this 2-core machine (gateway, fake upstream and load generator on it) can serve. It reports
the most requests/s the gateway sustained and the latency it had then, which is queueing: no
target is judged on it.

Per round:

- added latency: what the gateway reports in ``Server-Timing: contextfold;dur=``, from the app
  receiving the request (before reading its body) to the first byte sent back, minus the time
  spent waiting for the upstream; the turn's store commit runs during that wait, and when it
  ends after the upstream's answer the answer is held for it: that excess (``commit;dur=``)
  counts as added latency;
- the same seen by the client: its wait for the first byte (for a whole answer: for all of it)
  minus the gateway's upstream wait; this also counts HTTP parsing, the transfer and the
  client's own event loop;
- for streamed answers, how much later than the model finished the client had all of it (the
  client's whole wait minus ``--upstream-ms``; includes the fake upstream's own lateness);
- the gateway process's CPU time per request (independent of how busy the machine is).

Targets (issue 10): added latency p50 <= 5 ms and p95 <= 25 ms on turns without compaction, at
the realistic pacing (``targets_met``). Run:
python -m benchmarks.gateway_bench [--levels 1,10,50] [--turns 20] [--upstream-ms 1000]
  [--think-ms 100] [--saturation-sessions 50] [--store FOLDER_OR_URL | --postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
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
from tests.gateway.gateway_fakes import FakeUpstream, trace_replies
traces = [list(trace_replies(load_trace(p))) for p in trace_files()]
fake = FakeUpstream(port={port}, keep=False)
fake.default = lambda call: traces[int(call.headers["x-fake-trace"])][int(call.headers["x-fake-turn"])]
fake.start()
print("ready", flush=True)
while True:
    time.sleep(3600)
"""

PROFILE = """
import cProfile, os, pstats, signal, sys, threading
sys.path[:0] = [{root!r}, {src!r}]
# uvicorn re-raises the SIGTERM it caught once it has shut down: exit cleanly on it
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
profiles = [cProfile.Profile()]
def hook(frame, event, arg):
    sys.setprofile(None)
    p = cProfile.Profile()
    profiles.append(p)
    p.enable()
if os.environ.get("CF_PROFILE_THREADS", "1") == "1":
    threading.setprofile(hook)
profiles[0].enable()
from contextfold.cli import main
try:
    main(sys.argv[1:])
finally:
    for p in profiles:
        p.disable()
    stats = pstats.Stats(profiles[0])
    for p in profiles[1:]:
        stats.add(p)
    stats.dump_stats({out!r})
"""


def gateway_cmd(profile: str | None) -> list[str]:
    """``contextfold serve``, or the same under cProfile (every thread) writing ``profile``."""
    if not profile:
        return [sys.executable, "-m", "contextfold"]
    code = PROFILE.format(root=str(ROOT), src=str(ROOT / "src"), out=profile)
    return [sys.executable, "-c", code]


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
    upstream_ms: float,
    out: list[dict[str, Any]],
    tag: str = "",
) -> None:
    import orjson

    messages: list[Any] = list(trace[:2])
    i, turn = 2, 0
    stream = n % 2 == 1
    rng = random.Random(n)
    # independent agents: each starts at its own moment within one turn's time, and its tool
    # runs take 0.5-1.5x the think time (else all sessions would call in lockstep)
    await asyncio.sleep(rng.uniform(0, upstream_ms / 1000 + think))
    headers = {
        "authorization": f"Bearer sk-bench-{tag}-{n}",
        "content-type": "application/json",
        "x-fake-trace": str(n % 45),
        "x-fake-latency-ms": str(upstream_ms),
    }
    while i < len(trace) and turn < turns:
        m = trace[i]
        if m["role"] != "assistant":
            messages.append(m)
            i += 1
            continue
        # serialized before the clock starts, as an agent would have it ready
        data = orjson.dumps({"model": "gpt-bench", "messages": messages, "stream": stream})
        t0 = time.perf_counter()
        if stream:
            async with client.stream(
                "POST",
                base + "/v1/chat/completions",
                content=data,
                headers={**headers, "x-fake-turn": str(turn)},
            ) as resp:
                timing = resp.headers.get("server-timing", "")
                compaction = resp.headers.get("x-contextfold-compaction")
                status = resp.status_code
                first = None
                body_start = b""
                async for chunk in resp.aiter_raw():
                    if first is None:
                        first = time.perf_counter()
                        body_start = chunk[:300]
        else:
            resp = await client.post(
                base + "/v1/chat/completions",
                content=data,
                headers={**headers, "x-fake-turn": str(turn)},
            )
            timing = resp.headers.get("server-timing", "")
            compaction = resp.headers.get("x-contextfold-compaction")
            status = resp.status_code
            first = None
            body_start = resp.content[:300]
        end = time.perf_counter()
        total = (end - t0) * 1000
        waited = ((first or end) - t0) * 1000  # to the first byte of the body (or all of it)
        if status != 200:
            raise RuntimeError(f"session {n} turn {turn}: HTTP {status} {body_start!r}")
        parts = {k: float(v) for k, v in _DUR.findall(timing)}
        out.append(
            {
                "parts": parts,
                "added_ms": parts.get("contextfold", float("nan")),
                "total_ms": total,
                # the client's wait minus the gateway's upstream wait: also counts HTTP
                # parsing outside the app, the transfer and the client's own event loop
                "client_added_ms": waited - parts.get("upstream", 0.0),
                # a stream: how long after the model finished the client had all of it
                "stream_end_ms": total - upstream_ms if stream else None,
                "compaction": compaction,
                "stream": stream,
                "turn": turn,
            }
        )
        reply = {"role": "assistant", "content": m.get("content") or ""}
        if m.get("tool_calls"):
            reply["tool_calls"] = m["tool_calls"]
        messages.append(reply)
        i += 1
        turn += 1
        await asyncio.sleep(think * rng.uniform(0.5, 1.5))  # the agent runs its tool


async def warm_up(base: str) -> None:
    """Two short conversations before the rounds (imports and caches of a fresh process)."""
    await drive(base, 2, 2, 0.0, 0.0, "warm-up")


def _traces() -> list[list[dict[str, Any]]]:
    """The bundled trajectories, read once (not counted in a round's load-generator CPU)."""
    global _TRACES
    if _TRACES is None:
        from tests.conftest import load_trace, trace_files

        _TRACES = [load_trace(p) for p in trace_files()]
    return _TRACES


_TRACES: list[list[dict[str, Any]]] | None = None


async def drive(
    base: str, sessions: int, turns: int, think: float, upstream_ms: float, tag: str = ""
) -> tuple[list[dict[str, Any]], float]:
    import httpx

    traces = _traces()
    results: list[dict[str, Any]] = []
    from contextfold.gateway import netio

    # one client per session, as each agent is its own process (one shared pool would make
    # the load generator scan all its connections on every request); the agents stand for
    # processes on other machines, so the load generator is kept light: plain asyncio
    # connections (the gateway's own upstream layer), no TLS set up for loopback HTTP
    limits = httpx.Limits(max_connections=4)
    clients = [
        httpx.AsyncClient(timeout=120, transport=netio.transport(limits, verify=False))
        for _ in range(sessions)
    ]
    try:
        t0 = time.perf_counter()
        await asyncio.gather(
            *(
                session(
                    clients[n], base, n, traces[n % 45], turns, think, upstream_ms, results, tag
                )
                for n in range(sessions)
            )
        )
        wall = time.perf_counter() - t0
    finally:
        for client in clients:
            await client.aclose()
    return results, wall


def _stat_cpu(path: str) -> float:
    try:
        fields = Path(path).read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _tree(pid: int) -> list[int]:
    """The process and its descendants (``serve --workers N``: the supervisor and workers)."""
    out = [pid]
    for child in _children(pid):
        out.extend(_tree(child))
    return out


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            text = (task / "children").read_text()
            kids.extend(int(x) for x in text.split())
    except OSError:
        pass
    return kids


def cpu_seconds(pid: int) -> float:
    """User + system CPU time so far of a process and its children (Linux /proc; nan
    elsewhere)."""
    return sum(_stat_cpu(f"/proc/{p}/stat") for p in _tree(pid))


def loop_cpu_seconds(pid: int) -> float:
    """CPU time of the main threads (the gateway's event loops) of the serving processes."""
    tree = _tree(pid)
    serving = tree[1:] or tree  # with workers, the supervisor does not serve
    return sum(_stat_cpu(f"/proc/{p}/task/{p}/stat") for p in serving)


def load_average() -> str:
    try:
        return " / ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def summarize(
    kind: str,
    sessions: int,
    pacing: tuple[float, float],
    results: list[dict[str, Any]],
    wall: float,
    cpu: float,
    loop_cpu: float,
    others_cpu: tuple[float, float] = (float("nan"), float("nan")),
) -> dict[str, Any]:
    plain = [r for r in results if not r["compaction"]]
    added = [r["added_ms"] for r in plain]
    seen = [r["client_added_ms"] for r in plain]
    ends = [r["stream_end_ms"] for r in plain if r["stream_end_ms"] is not None]
    parts = ("parse", "lock", "thread", "store", "view", "wake", "render", "commit")
    breakdown = {k: round(pct([r["parts"].get(k, 0.0) for r in plain], 0.5), 2) for k in parts}
    tail = {k: round(pct([r["parts"].get(k, 0.0) for r in plain], 0.95), 2) for k in parts}
    compacting = [r["added_ms"] for r in results if r["compaction"]]
    out: dict[str, Any] = {
        "round": kind,
        "sessions": sessions,
        "upstream_ms": pacing[0],
        "think_ms": pacing[1],
        "requests": len(results),
        "wall_s": round(wall, 2),
        "requests_per_s": round(len(results) / wall, 1),
        "added_ms_p50": round(pct(added, 0.5), 2),
        "added_ms_p95": round(pct(added, 0.95), 2),
        "added_ms_mean": round(statistics.fmean(added), 2) if added else None,
        "client_seen_added_ms_p50": round(pct(seen, 0.5), 2),
        "client_seen_added_ms_p95": round(pct(seen, 0.95), 2),
        "stream_end_ms_p50": round(pct(ends, 0.5), 2) if ends else None,
        "stream_end_ms_p95": round(pct(ends, 0.95), 2) if ends else None,
        "gateway_cpu_ms_per_request": round(cpu * 1000 / max(1, len(results)), 2),
        "event_loop_cpu_ms_per_request": round(loop_cpu * 1000 / max(1, len(results)), 2),
        # what the other two processes on the machine used per request
        "fake_upstream_cpu_ms_per_request": round(others_cpu[0] * 1000 / max(1, len(results)), 2),
        "load_generator_cpu_ms_per_request": round(others_cpu[1] * 1000 / max(1, len(results)), 2),
        "turns_without_compaction": len(plain),
        "p50_parts_ms": breakdown,
        "p95_parts_ms": tail,
        "turns_with_compaction": len(compacting),
        "added_ms_p50_compacting": round(pct(compacting, 0.5), 2) if compacting else None,
    }
    if kind == "paced":  # no target on the saturation round: its latency is queueing
        out["targets_met"] = bool(added) and pct(added, 0.5) <= 5 and pct(added, 0.95) <= 25
    return out


def report(s: dict[str, Any]) -> None:
    b = s["p50_parts_ms"]
    if s["round"] == "paced":
        verdict = f"(targets 5 / 25 ms: {'met' if s['targets_met'] else 'MISSED'})"
        head = f"  {s['sessions']:>3} sessions: "
    else:
        verdict = "(queueing: no target)"
        head = f"  saturation, {s['sessions']} sessions, upstream answering at once: "
    ends = (
        f"; streams complete {s['stream_end_ms_p50']} / {s['stream_end_ms_p95']} ms after the model"
        if s["stream_end_ms_p50"] is not None and s["upstream_ms"]
        else ""
    )
    print(
        f"{head}{s['requests']} requests, {s['requests_per_s']} req/s; "
        f"added p50 {s['added_ms_p50']} ms, p95 {s['added_ms_p95']} ms {verdict}; "
        f"seen by the client p50 {s['client_seen_added_ms_p50']} / p95 "
        f"{s['client_seen_added_ms_p95']} ms{ends}; gateway CPU "
        f"{s['gateway_cpu_ms_per_request']} ms per request "
        f"({s['event_loop_cpu_ms_per_request']} in the event loop; the fake upstream "
        f"{s['fake_upstream_cpu_ms_per_request']}, the load generator "
        f"{s['load_generator_cpu_ms_per_request']})"
    )
    print(
        f"       p50 parts: reading + parsing the request {b['parse']} ms, session lock "
        f"{b['lock']} ms, waiting for a worker thread {b['thread']} ms, appending in memory "
        f"{b['store']} ms, view {b['view']} ms, back on the event loop {b['wake']} ms, "
        f"rendering and sending {b['render']} ms, the answer held for the commit {b['commit']} ms"
        + (
            f"; {s['turns_with_compaction']} turns with compaction: added p50 "
            f"{s['added_ms_p50_compacting']} ms"
            if s["turns_with_compaction"]
            else ""
        ),
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gateway_bench")
    ap.add_argument(
        "--levels",
        default="1,10,50",
        help="concurrent sessions per paced round, comma separated (default 1,10,50)",
    )
    ap.add_argument("--sessions", type=int, help="one paced round with this many sessions")
    ap.add_argument("--turns", type=int, default=20, help="turns per session")
    ap.add_argument("--window", type=int, default=128_000)
    ap.add_argument(
        "--upstream-ms",
        type=float,
        default=1000.0,
        help="the model's time per answer in the paced rounds (default 1000 ms; see the "
        "module doc)",
    )
    ap.add_argument(
        "--think-ms",
        type=float,
        default=100.0,
        help="pause between a session's turns: the agent running its tool (default 100 ms)",
    )
    ap.add_argument(
        "--saturation-sessions",
        type=int,
        default=50,
        help="sessions of the saturation round (upstream answering at once; 0: none)",
    )
    ap.add_argument(
        "--store", help="workspace folder or postgresql:// URL (default: a temp folder)"
    )
    ap.add_argument(
        "--postgres",
        action="store_true",
        help="use a fresh schema on $CONTEXTFOLD_TEST_POSTGRES_URL (default the local test "
        "server), dropped afterwards",
    )
    ap.add_argument(
        "--workers", type=int, default=1, help="gateway processes (contextfold serve --workers)"
    )
    ap.add_argument("--profile", help="run the gateway under cProfile, stats written here")
    ap.add_argument(
        "--samples", action="store_true", help="also write every request's timings to --out"
    )
    ap.add_argument("--out", default=str(ROOT / "bench-results" / "gateway.json"))
    args = ap.parse_args(argv)
    levels = [args.sessions] if args.sessions else [int(x) for x in args.levels.split(",") if x]
    plan = [("paced", n, args.upstream_ms) for n in levels if n > 0]
    if args.saturation_sessions > 0:
        plan.append(("saturation", args.saturation_sessions, 0.0))
    schema: tuple[str, str] | None = None
    if args.postgres:
        import uuid

        from contextfold.storage import open_store

        server = os.environ.get("CONTEXTFOLD_TEST_POSTGRES_URL") or (
            "postgresql://postgres@127.0.0.1:5432/test"
        )
        schema = (server, f"cf_gateway_bench_{uuid.uuid4().hex[:8]}")
        args.store = f"{server}?schema={schema[1]}"
        open_store(args.store).close()  # created once, before the gateway starts
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    fake_port, gw_port = free_port(), free_port()
    procs: list[subprocess.Popen[bytes]] = []
    rounds: list[dict[str, Any]] = []
    store_kind = (
        "postgresql"
        if args.store and args.store.startswith("postgres")
        else "embedded (workspace folder)"
    )
    workers = f", {args.workers} gateway workers" if args.workers > 1 else ""
    print(
        f"gateway benchmark, {store_kind} store{workers}, upstream {args.upstream_ms:g} ms per "
        f"answer, {args.think_ms:g} ms between turns, {args.turns} turns per session; "
        f"load average before: {load_average()}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="cf-gateway-bench-") as tmp:
        store = args.store or str(Path(tmp) / "ws")
        try:
            code = FAKE.format(root=str(ROOT), src=str(ROOT / "src"), port=fake_port)
            procs.append(
                subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL)
            )
            gateway = subprocess.Popen(
                [
                    *gateway_cmd(args.profile),
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
                    "--workers",
                    str(args.workers),
                ],
                env=env,
                stdout=subprocess.DEVNULL,
            )
            procs.append(gateway)
            base = f"http://127.0.0.1:{gw_port}"
            asyncio.run(wait_ready(f"http://127.0.0.1:{fake_port}/v1/models"))
            asyncio.run(wait_ready(base + "/healthz"))
            asyncio.run(warm_up(base))
            for r, (kind, sessions, upstream_ms) in enumerate(plan):
                cpu0, loop0 = cpu_seconds(gateway.pid), loop_cpu_seconds(gateway.pid)
                fake0, own0 = cpu_seconds(procs[0].pid), time.process_time()
                results, wall = asyncio.run(
                    drive(base, sessions, args.turns, args.think_ms / 1000, upstream_ms, f"r{r}")
                )
                summary = summarize(
                    kind,
                    sessions,
                    (upstream_ms, args.think_ms),
                    results,
                    wall,
                    cpu_seconds(gateway.pid) - cpu0,
                    loop_cpu_seconds(gateway.pid) - loop0,
                    (cpu_seconds(procs[0].pid) - fake0, time.process_time() - own0),
                )
                report(summary)
                if args.samples:
                    summary["samples"] = results
                rounds.append(summary)
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(timeout=30)
            if schema is not None:
                import psycopg

                with psycopg.connect(schema[0], autocommit=True) as conn:
                    conn.execute(f'DROP SCHEMA IF EXISTS "{schema[1]}" CASCADE')
    paced = [s for s in rounds if s["round"] == "paced"]
    met = bool(paced) and all(s["targets_met"] for s in paced)
    print(
        f"targets (paced rounds): {'met' if met else 'MISSED'}; "
        f"load average after: {load_average()}"
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "store": store_kind,
        "workers": args.workers,
        "upstream_ms": args.upstream_ms,
        "think_ms": args.think_ms,
        "turns": args.turns,
        "targets_met": met,
        "load_average_after": load_average(),
        "rounds": rounds,
    }
    out.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
