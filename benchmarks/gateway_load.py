"""The gateway at 1, 10 and 50 paced agents, next to a bare relay and LiteLLM's proxy, in one
interleaved run on this machine.

Every proxy runs as its own process in front of the same scripted upstream (an OpenAI Chat
Completions endpoint answering each call after ``--upstream-ms``, 50 ms by default, with one
tool call): the **bare relay** (starlette + httpx passing the body on: the floor of the stack
the gateway uses), **LiteLLM's proxy** (installed by this benchmark into ``.bench-venv/``;
skipped with a note when the package registry cannot be reached), and ``contextfold serve`` on
the **embedded** store and on **PostgreSQL** (127.0.0.1:5432, a fresh schema dropped after).

The agents are stateless: each sends its whole conversation every turn, and the conversation
grows by the answer and a 2-10 KB tool result per turn, so the gateway's window (``--window``,
16,000 tokens by default) fills and the gateway compacts (offloads, summaries) along the way.
Sessions are paced: after each answer an agent runs its tool for ``--think-ms`` (900 ms by
default, each pause drawn from 0.5-1.5x that), so 50 sessions offer about 50 requests/s.
Rounds are interleaved: for each number of sessions, every proxy in turn (the order rotated
per repetition), all processes up the whole time, so the machine's other load falls on all.

Added latency of a request: the client's wait for the whole answer minus the time the upstream
held it (``x-upstream-ms``, reported by the upstream), so it is measured the same way for every
proxy. Reported per proxy and number of sessions: p50 / p95 / p99 over all turns; for
contextfold also the turns whose response reports a compaction (``x-contextfold-compaction``:
the view was compacted since the previous turn, ahead of it or on its way) and the others; the
proxy's CPU per request (its processes' user + system time over the round / requests). Then
the **saturation point**: 50 sessions calling again as soon as they have their answer (no
pause): the requests/s each proxy sustains.

Target (the "Done when" of the issue): at 10 and at 50 paced sessions, contextfold's added
latency p95 over all turns is within 2x the bare relay's + 10 ms, on both stores.

Run: ``python -m benchmarks.gateway_load [--levels 1,10,50] [--turns 20] [--reps 1]
[--proxies relay,litellm,embedded,postgres] [--workers N] [--out FILE]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for p in (str(ROOT), str(ROOT / "src")):
    if p not in sys.path:
        sys.path.insert(0, p)

from benchmarks import gateway_load_servers as servers  # noqa: E402
from benchmarks.gateway_bench import cpu_seconds, load_average, pct  # noqa: E402

PG = os.environ.get("CONTEXTFOLD_TEST_POSTGRES_URL") or "postgresql://postgres@127.0.0.1:5432/test"
WORDS = [
    "def",
    "class",
    "return",
    "import",
    "self",
    "value",
    "error",
    "file",
    "path",
    "test",
    "assert",
    "config",
    "module",
    "line",
    "passed",
    "failed",
    "expected",
    "got",
    "None",
    "True",
    "False",
    "result",
    "data",
    "index",
    "item",
    "key",
    "list",
    "dict",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tool_output(rng: random.Random) -> str:
    """A 2-10 KB tool result: lines of code-ish words and numbers."""
    size = rng.randint(2_000, 10_000)
    lines: list[str] = []
    n = 0
    while n < size:
        line = " ".join(f"{rng.choice(WORDS)}{rng.randint(0, 999)}" for _ in range(8))
        lines.append(line)
        n += len(line) + 1
    return "\n".join(lines)[:size]


def upstream_ms(header: str | None, body: bytes) -> float:
    """How long the upstream held the request: its header, or the id of its answer (a proxy
    may drop the header)."""
    if header:
        return float(header)
    import re

    found = re.search(rb'"id"\s*:\s*"chatcmpl-[^"]*-held-([0-9.]+)"', body[:2000])
    return float(found.group(1)) if found else float("nan")


async def agent(
    client: Any,
    base: str,
    tag: str,
    n: int,
    turns: int,
    think: float,
    out: list[dict[str, Any]],
    key: str,
) -> None:
    import orjson

    rng = random.Random(f"{tag}-{n}")
    outputs = [tool_output(rng) for _ in range(turns)]  # ready before the clock starts
    messages: list[dict[str, Any]] = [
        {
            "role": "system",
            "content": f"You are coding agent {tag}-{n}. " + "Follow the rules. " * 60,
        },
        {"role": "user", "content": f"Make the test suite of project {n} pass."},
    ]
    headers = {
        "authorization": f"Bearer {key or f'sk-bench-{tag}-{n}'}",
        "content-type": "application/json",
    }
    await asyncio.sleep(rng.uniform(0, 0.05 + think))  # independent agents start apart
    for turn in range(turns):
        call = f"call_{tag}_{n}_{turn}"
        data = orjson.dumps({"model": "gpt-bench", "messages": messages})
        t0 = time.perf_counter()
        resp = await client.post(
            base + "/v1/chat/completions",
            content=data,
            headers={**headers, "x-bench-call": call},
        )
        body = resp.content
        wall = (time.perf_counter() - t0) * 1000
        ok = resp.status_code == 200
        held = upstream_ms(resp.headers.get("x-upstream-ms"), body)
        out.append(
            {
                "ok": ok,
                "status": resp.status_code,
                "added_ms": wall - held,
                "compaction": resp.headers.get("x-contextfold-compaction"),
                "turn": turn,
                "timing": resp.headers.get("server-timing", ""),
            }
        )
        if not ok:
            return
        answer = orjson.loads(body)["choices"][0]["message"]
        messages.append(
            {
                "role": "assistant",
                "content": answer.get("content"),
                "tool_calls": answer["tool_calls"],
            }
        )
        messages.append(
            {
                "role": "tool",
                "tool_call_id": answer["tool_calls"][0]["id"],
                "content": outputs[turn],
            }
        )
        if think > 0:
            await asyncio.sleep(think * rng.uniform(0.5, 1.5))


async def drive(
    base: str, tag: str, sessions: int, turns: int, think: float, key: str = ""
) -> tuple[list[dict[str, Any]], float]:
    import httpx

    out: list[dict[str, Any]] = []
    # each agent has a client (a connection) of its own, made before the clock starts: making
    # one builds an SSL context, about 15 ms of this loop's time, which 50 agents starting
    # together would otherwise add to each other's first request, whatever the proxy
    clients = [httpx.AsyncClient(timeout=120, trust_env=False) for _ in range(sessions)]
    try:
        t0 = time.perf_counter()
        await asyncio.gather(
            *(agent(c, base, tag, n, turns, think, out, key) for n, c in enumerate(clients))
        )
        return out, time.perf_counter() - t0
    finally:
        for c in clients:
            await c.aclose()


async def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(trust_env=False) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{url}: the process exited ({proc.returncode})")
            try:
                if (await client.get(url)).status_code < 500:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError(f"{url} did not come up")


def stats(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": round(pct(values, 0.50), 1),
        "p95": round(pct(values, 0.95), 1),
        "p99": round(pct(values, 0.99), 1),
    }


class Proxy:
    def __init__(
        self, name: str, proc: subprocess.Popen[bytes], base: str, health: str, key: str = ""
    ) -> None:
        self.name, self.proc, self.base, self.health, self.key = name, proc, base, health, key


def start_proxies(
    args: argparse.Namespace, tmp: Path, upstream: str, env: dict[str, str], notes: list[str]
) -> list[Proxy]:
    out: list[Proxy] = []
    wanted = args.proxies.split(",")
    for name in wanted:
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        if name == "relay":
            cmd = [
                sys.executable,
                "-m",
                "benchmarks.gateway_load_servers",
                "relay",
                str(port),
                upstream,
            ]
            proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
            out.append(Proxy("bare relay", proc, base, base + "/healthz"))
        elif name == "litellm":
            why = servers.setup_litellm()
            if why is not None:
                notes.append(f"LiteLLM skipped: {why}")
                print(notes[-1], flush=True)
                continue
            cmd, lenv = servers.litellm_cmd(servers.litellm_config(tmp, upstream), port)
            proc = subprocess.Popen(
                cmd, env=lenv, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            out.append(
                Proxy("LiteLLM proxy", proc, base, base + "/health/liveliness", servers.MASTER_KEY)
            )
        elif name.removeprefix("before-") in ("embedded", "postgres"):
            out.append(start_contextfold(args, name, tmp, upstream, port, env))
        else:
            raise SystemExit(f"unknown proxy {name!r} (relay, litellm, embedded, postgres)")
    return out


def start_contextfold(
    args: argparse.Namespace, name: str, tmp: Path, upstream: str, port: int, env: dict[str, str]
) -> Proxy:
    """``contextfold serve`` on the embedded store or PostgreSQL; ``before-embedded`` and
    ``before-postgres`` run the checkout ``--before`` names instead (its ``src``), in the same
    interleaved run: a before/after measured under the same load."""
    base = f"http://127.0.0.1:{port}"
    before = name.startswith("before-")
    kind = name.removeprefix("before-")
    schema = args.schema + ("_before" if before else "")
    store = str(tmp / name) if kind == "embedded" else f"{PG}?schema={schema}"
    if before:
        if not args.before:
            raise SystemExit(f"{name} needs --before PATH (a checkout of the earlier version)")
        env = {**env, "PYTHONPATH": f"{Path(args.before) / 'src'}{os.pathsep}{ROOT}"}
    cmd = [
        sys.executable, "-m", "contextfold", "serve", "--upstream", upstream,
        "--port", str(port), "--store", store, "--window", str(args.window),
        "--log-level", "warning",
        *(["--workers", str(args.workers)] if args.workers else []),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)
    label = "embedded" if kind == "embedded" else "PostgreSQL"
    return Proxy(
        f"contextfold{' before' if before else ''}, {label}", proc, base, base + "/healthz"
    )


def compactions(proxy: Proxy) -> tuple[float, float]:
    """The gateway's compactions so far: all of them, and those prepared ahead."""
    import re

    import httpx

    if not proxy.name.startswith("contextfold"):
        return 0.0, 0.0
    text = httpx.get(proxy.base + "/metrics", timeout=30, trust_env=False).text
    total = sum(
        float(v)
        for v in re.findall(r"^contextfold_gateway_compactions_total\{[^}]*\} (\S+)", text, re.M)
    )
    ahead = re.search(r"^contextfold_gateway_compactions_ahead_total (\S+)", text, re.M)
    return total, float(ahead.group(1)) if ahead else 0.0


def run_round(proxy: Proxy, tag: str, sessions: int, turns: int, think: float) -> dict[str, Any]:
    cpu0 = cpu_seconds(proxy.proc.pid)
    made0 = compactions(proxy)
    results, wall = asyncio.run(drive(proxy.base, tag, sessions, turns, think, proxy.key))
    cpu = cpu_seconds(proxy.proc.pid) - cpu0
    made = [b - a for a, b in zip(made0, compactions(proxy))]
    ok = [r for r in results if r["ok"]]
    added = [r["added_ms"] for r in ok]
    summary: dict[str, Any] = {
        "proxy": proxy.name,
        "sessions": sessions,
        "think_ms": think * 1000,
        "requests": len(results),
        "errors": len(results) - len(ok),
        "requests_per_s": round(len(results) / wall, 1),
        "cpu_ms_per_request": round(cpu * 1000 / max(1, len(results)), 1),
        "all": stats(added),
    }
    by_turn: dict[int, list[float]] = {}
    for r in ok:
        by_turn.setdefault(int(r["turn"]), []).append(r["added_ms"])
    summary["by_turn_p95"] = {t: round(pct(v, 0.95), 1) for t, v in sorted(by_turn.items())}
    cut = pct(added, 0.95) if added else 0.0
    slow: dict[str, list[float]] = {}
    for r in ok:
        if r["added_ms"] >= cut and r["timing"]:
            for part in r["timing"].split(","):
                name, _, dur = part.strip().partition(";dur=")
                if dur:
                    slow.setdefault(name, []).append(float(dur))
    summary["slowest_5pct_phases_p50"] = {k: round(pct(v, 0.5), 1) for k, v in slow.items()}
    # what made each of those turns slow: its largest phase of the gateway's own
    worst: dict[str, int] = {}
    for r in ok:
        if r["added_ms"] >= cut and r["timing"]:
            phases = {}
            for part in r["timing"].split(","):
                name, _, dur = part.strip().partition(";dur=")
                if dur and name not in ("contextfold", "upstream", "read"):
                    phases[name] = float(dur)
            if phases:
                top = max(phases, key=lambda k: phases[k])
                worst[top] = worst.get(top, 0) + 1
    summary["slowest_5pct_largest_phase"] = worst
    if proxy.name.startswith("contextfold"):
        summary["compaction_turns"] = stats([r["added_ms"] for r in ok if r["compaction"]])
        summary["other_turns"] = stats([r["added_ms"] for r in ok if not r["compaction"]])
        summary["compactions"] = int(made[0])
        summary["compactions_ahead"] = int(made[1])
    return summary


def fmt(s: dict[str, Any] | None) -> str:
    if not s or not s["n"]:
        return "-"
    return f"{s['p50']:g} / {s['p95']:g} / {s['p99']:g}"


def table(rounds: list[dict[str, Any]], levels: list[int]) -> str:
    """The markdown table: added latency p50 / p95 / p99 (ms) per number of sessions."""
    names = list(dict.fromkeys(r["proxy"] for r in rounds))
    head = "| proxy | " + " | ".join(f"{n} session{'s' * (n > 1)}" for n in levels)
    lines = [head + " | CPU per request | saturation |", "|---" * (len(levels) + 3) + "|"]
    for name in names:
        mine = [r for r in rounds if r["proxy"] == name]
        cells = []
        for n in levels:
            at = [r for r in mine if r["sessions"] == n and r["think_ms"] > 0]
            cells.append(fmt(at[0]["all"]) if at else "-")
        paced = [r for r in mine if r["think_ms"] > 0]
        cpu = sum(r["cpu_ms_per_request"] * r["requests"] for r in paced) / max(
            1, sum(r["requests"] for r in paced)
        )
        sat = [r for r in mine if r["think_ms"] == 0]
        satcell = f"{sat[0]['requests_per_s']:g} req/s" if sat else "-"
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {cpu:.1f} ms | {satcell} |")
    split = [r for r in rounds if "compaction_turns" in r and r["think_ms"] > 0]
    if split:
        lines += [
            "",
            "| contextfold | sessions | compaction turns (turns) | other turns (turns) | compactions (ahead) |",
            "|---|---|---|---|---|",
        ]
        for r in split:
            c, o = r["compaction_turns"], r["other_turns"]
            lines.append(
                f"| {r['proxy'].removeprefix('contextfold').strip(', ')} | {r['sessions']} | {fmt(c)} ({c['n']}) | {fmt(o)} ({o['n']}) "
                f"| {r['compactions']} ({r['compactions_ahead']}) |"
            )
    return "\n".join(lines)


def verdict(rounds: list[dict[str, Any]]) -> tuple[bool, list[str]]:
    """The issue's target at 10 and 50 paced sessions, per store."""
    out: list[str] = []
    met = True
    for n in (10, 50):
        relay = [
            r
            for r in rounds
            if r["proxy"] == "bare relay" and r["sessions"] == n and r["think_ms"] > 0
        ]
        if not relay:
            continue
        bound = 2 * relay[0]["all"]["p95"] + 10
        for r in rounds:
            if r["proxy"].startswith("contextfold") and r["sessions"] == n and r["think_ms"] > 0:
                ok = r["all"]["p95"] <= bound and not r["errors"]
                if " before" not in r["proxy"]:  # the earlier version is shown, not judged
                    met &= ok
                out.append(
                    f"{r['proxy']}, {n} sessions: p95 {r['all']['p95']:g} ms "
                    f"{'<=' if ok else '>'} {bound:g} ms (2x the relay's + 10){'' if ok else ' MISSED'}"
                )
    return met, out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gateway_load")
    p.add_argument("--levels", default="1,10,50")
    p.add_argument("--turns", type=int, default=20)
    p.add_argument("--reps", type=int, default=1, help="interleaved repetitions per level")
    p.add_argument("--upstream-ms", type=float, default=50)
    p.add_argument("--think-ms", type=float, default=900)
    p.add_argument("--window", type=int, default=16_000)
    p.add_argument(
        "--workers", type=int, default=0, help="contextfold serve --workers (0: its default)"
    )
    p.add_argument(
        "--proxies",
        default="relay,litellm,embedded,postgres",
        help="of relay, litellm, embedded, postgres, before-embedded, before-postgres",
    )
    p.add_argument(
        "--before",
        default="",
        help="a checkout of an earlier version: before-embedded and before-postgres run its src",
    )
    p.add_argument("--saturation-sessions", type=int, default=50, help="0: no saturation round")
    p.add_argument("--out", default=str(ROOT / "bench-results" / "gateway_load.json"))
    args = p.parse_args(argv)
    args.schema = f"cf_gateway_load_{uuid.uuid4().hex[:8]}"
    levels = [int(x) for x in args.levels.split(",")]
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    notes: list[str] = []
    cores = os.cpu_count()
    print(
        f"gateway load benchmark: {cores} cores, load average before {load_average()}; "
        f"upstream {args.upstream_ms:g} ms, {args.think_ms:g} ms between turns, {args.turns} "
        f"turns per session, window {args.window}",
        flush=True,
    )
    if "postgres" in args.proxies:
        from contextfold.storage import open_store

        try:
            open_store(f"{PG}?schema={args.schema}").close()
            if "before-postgres" in args.proxies:
                open_store(f"{PG}?schema={args.schema}_before").close()
        except Exception as exc:  # no server: run the rest
            notes.append(f"PostgreSQL skipped: {exc}")
            print(notes[-1], flush=True)
            args.proxies = ",".join(x for x in args.proxies.split(",") if "postgres" not in x)
    procs: list[subprocess.Popen[bytes]] = []
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="cf-gateway-load-") as folder:
        tmp = Path(folder)
        try:
            up_port = free_port()
            upstream = f"http://127.0.0.1:{up_port}"
            up = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.gateway_load_servers", "upstream", str(up_port), str(args.upstream_ms)],
                env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
            )  # fmt: skip
            procs.append(up)
            asyncio.run(wait_ready(upstream + "/v1/models", up))
            proxies = start_proxies(args, tmp, upstream, env, notes)
            procs += [x.proc for x in proxies]
            for x in proxies:
                asyncio.run(wait_ready(x.health, x.proc))
                # imports, pools, caches; enough sessions to reach every worker process
                run_round(x, f"warm{uuid.uuid4().hex[:6]}", 6, 3, 0.0)
            plan = [(n, args.think_ms / 1000) for n in levels for _ in range(args.reps)]
            if args.saturation_sessions:
                plan.append((args.saturation_sessions, 0.0))
            for k, (sessions, think) in enumerate(plan):
                order = proxies[k % len(proxies) :] + proxies[: k % len(proxies)]
                for x in order:
                    s = run_round(x, f"r{k}{uuid.uuid4().hex[:6]}", sessions, args.turns, think)
                    rounds.append(s)
                    print(
                        f"{s['proxy']:26} {sessions:3} sessions{' (saturation)' if not think else ''}: "
                        f"added p50/p95/p99 {fmt(s['all'])} ms, {s['requests_per_s']} req/s, "
                        f"CPU {s['cpu_ms_per_request']} ms/request, {s['errors']} errors",
                        flush=True,
                    )
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
            if "postgres" in args.proxies:
                import psycopg

                with psycopg.connect(PG, autocommit=True) as conn:
                    for schema in (args.schema, f"{args.schema}_before"):
                        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    reps = [r for r in rounds]
    print()
    print(table(reps, levels))
    met, lines = verdict(reps)
    for line in lines:
        print(line)
    print(f"target: {'met' if met else 'MISSED'}; load average after {load_average()}")
    for note in notes:
        print(f"note: {note}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {"args": {k: v for k, v in vars(args).items()}, "cores": cores, "notes": notes,
             "target_met": met, "rounds": rounds, "table": table(reps, levels)},
            indent=2,
        ),
        encoding="utf-8",
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
