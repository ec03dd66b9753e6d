"""A first request that already carries a long history, and the follow-ups of that conversation.

A client that predates the gateway, a gateway restart on another store, another replica: the
first request the gateway sees of a conversation carries its whole history. The gateway stores
every message and, as the history is far over the window, compacts it at once (the emergency
path) before it can forward a view. This benchmark sends such a first request with 1,000, 5,000
and 20,000 messages (the bundled trajectories' messages in a loop, OpenAI Chat Completions,
tool results of a few KB as agents produce them), then ``--follow-ups`` follow-ups of the same
conversation, each adding the answer and one new user message (what a stateless agent resends).

Reported per history length:

- the first request: the time the gateway added (``Server-Timing: contextfold;dur=``, the
  request received to the first byte back, minus the upstream's time) and the client's whole
  wait; the CPU the gateway process used for it;
- the follow-ups: added latency p50 / p95 apart for turns that compacted (header
  ``X-Contextfold-Compaction``) and turns that did not; and the same without the time the body
  took to arrive from the client (``read`` in ``Server-Timing``; a bare relay waits for it too).

The fake upstream answers at once (``--upstream-ms`` to change it). Targets (issue 19): a first
request with 20,000 messages answered with <= 1 s added; its follow-ups add <= 10 ms. Run:
python -m benchmarks.gateway_history [--lengths 1000,5000,20000] [--follow-ups 10]
  [--window 128000] [--stores embedded,postgresql | --store FOLDER_OR_URL]

Both stores by default: a fresh workspace folder, then a fresh schema on the PostgreSQL server
(``$CONTEXTFOLD_TEST_POSTGRES_URL``, default 127.0.0.1:5432 database ``test``), dropped after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
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

from benchmarks.gateway_bench import (  # noqa: E402
    _DUR,
    cpu_seconds,
    free_port,
    gateway_cmd,
    load_average,
    pct,
    wait_ready,
)

FAKE = """
import sys, time
sys.path[:0] = [{root!r}, {src!r}]
from tests.gateway.gateway_fakes import FakeUpstream
from tests.gateway.gateway_fake_wire import Reply
fake = FakeUpstream(port={port}, keep=False, latency={latency})
fake.default = lambda call: Reply(text="Done. Next I will run the tests again.")
fake.start()
print("ready", flush=True)
while True:
    time.sleep(3600)
"""


def history(length: int, tag: str) -> list[dict[str, Any]]:
    """About ``length`` messages of the bundled trajectories, whole trajectories looped (tool
    call ids made unique), then one user message; ``tag`` makes the conversation a new one."""
    from tests.conftest import load_trace, trace_files

    traces = [load_trace(p) for p in trace_files()]
    out: list[dict[str, Any]] = [
        dict(traces[0][0]),
        {**traces[0][1], "content": f"[{tag}] {traces[0][1]['content']}"},
    ]
    loop = 0
    while len(out) < length - 1:
        trace = traces[loop % len(traces)]
        loop += 1
        body = trace[2:]
        if len(out) + len(body) > length - 1 and len(out) > 2:
            break
        for m in body:
            m = dict(m)
            if m.get("tool_calls"):
                m["tool_calls"] = [{**c, "id": f"{c['id']}_{loop}"} for c in m["tool_calls"]]
            if m.get("tool_call_id"):
                m["tool_call_id"] = f"{m['tool_call_id']}_{loop}"
            out.append(m)
    out.append({"role": "user", "content": "Please go on with the task."})
    return out


async def conversation(
    base: str, length: int, follow_ups: int, gateway_pid: int, tag: str
) -> dict[str, Any]:
    import httpx
    import orjson

    messages = history(length, tag)
    headers = {"authorization": f"Bearer sk-history-{tag}", "content-type": "application/json"}
    turns: list[dict[str, Any]] = []
    async with httpx.AsyncClient(timeout=600) as client:
        for turn in range(follow_ups + 1):
            data = orjson.dumps({"model": "gpt-bench", "messages": messages})
            cpu0 = cpu_seconds(gateway_pid)
            t0 = time.perf_counter()
            resp = await client.post(base + "/v1/chat/completions", content=data, headers=headers)
            total = (time.perf_counter() - t0) * 1000
            if resp.status_code != 200:
                raise RuntimeError(
                    f"{length} messages, turn {turn}: HTTP {resp.status_code} {resp.text[:300]}"
                )
            parts = {k: float(v) for k, v in _DUR.findall(resp.headers.get("server-timing", ""))}
            turns.append(
                {
                    "messages": len(messages),
                    "added_ms": parts.get("contextfold", float("nan")),
                    # the body's arrival from the client (a relay waits for it too)
                    "body_read_ms": parts.get("read", 0.0),
                    "parts": parts,
                    "total_ms": total,
                    "gateway_cpu_ms": (cpu_seconds(gateway_pid) - cpu0) * 1000,
                    "compaction": resp.headers.get("x-contextfold-compaction"),
                }
            )
            answer = resp.json()["choices"][0]["message"]
            messages.append({"role": "assistant", "content": answer.get("content") or ""})
            messages.append({"role": "user", "content": f"Good. Now step {turn + 1}, please."})
    first, rest = turns[0], turns[1:]
    plain = [t["added_ms"] for t in rest if not t["compaction"]]
    own = [t["added_ms"] - t["body_read_ms"] for t in rest if not t["compaction"]]
    compacting = [t["added_ms"] for t in rest if t["compaction"]]
    return {
        "history_messages": first["messages"],
        "request_bytes": len(orjson.dumps({"model": "gpt-bench", "messages": messages})),
        "first_added_ms": round(first["added_ms"], 1),
        "first_total_ms": round(first["total_ms"], 1),
        "first_gateway_cpu_ms": round(first["gateway_cpu_ms"], 1),
        "first_compaction": first["compaction"],
        "follow_ups": len(rest),
        "follow_up_added_ms_p50": round(pct(plain, 0.5), 2) if plain else None,
        "follow_up_added_ms_p95": round(pct(plain, 0.95), 2) if plain else None,
        "follow_up_added_after_body_ms_p50": round(pct(own, 0.5), 2) if own else None,
        "follow_up_added_after_body_ms_p95": round(pct(own, 0.95), 2) if own else None,
        "follow_ups_with_compaction": len(compacting),
        "compacting_follow_up_added_ms_p50": round(pct(compacting, 0.5), 2) if compacting else None,
        "turns": turns,
    }


def report(r: dict[str, Any]) -> None:
    comp = (
        f"; {r['follow_ups_with_compaction']} compacting follow-ups: added p50 "
        f"{r['compacting_follow_up_added_ms_p50']} ms"
        if r["follow_ups_with_compaction"]
        else ""
    )
    print(
        f"  {r['history_messages']:>6} messages ({r['request_bytes'] / 1e6:.1f} MB): first request "
        f"added {r['first_added_ms'] / 1000:.2f} s (client's wait {r['first_total_ms'] / 1000:.2f}"
        f" s, gateway CPU {r['first_gateway_cpu_ms'] / 1000:.2f} s, compaction "
        f"{r['first_compaction']}); {r['follow_ups']} follow-ups: added p50 "
        f"{r['follow_up_added_ms_p50']} / p95 {r['follow_up_added_ms_p95']} ms, of which after "
        f"the body arrived p50 {r['follow_up_added_after_body_ms_p50']} / p95 "
        f"{r['follow_up_added_after_body_ms_p95']} ms{comp}",
        flush=True,
    )


def _store_for(kind: str, tmp: str) -> tuple[str, tuple[str, str] | None]:
    """The ``--store`` of one round: a fresh workspace folder, or a fresh PostgreSQL schema
    (created now, dropped by :func:`_drop`)."""
    if kind == "embedded":
        return str(Path(tmp) / "ws"), None
    if kind == "postgresql":
        import uuid

        from contextfold.storage import open_store

        server = os.environ.get("CONTEXTFOLD_TEST_POSTGRES_URL") or (
            "postgresql://postgres@127.0.0.1:5432/test"
        )
        schema = (server, f"cf_history_bench_{uuid.uuid4().hex[:8]}")
        url = f"{server}?schema={schema[1]}"
        open_store(url).close()  # created once, before the gateway starts
        return url, schema
    return kind, None  # a folder or URL given as is


def _drop(schema: tuple[str, str] | None) -> None:
    if schema is not None:
        import psycopg

        with psycopg.connect(schema[0], autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema[1]}" CASCADE')


def run_store(
    kind: str,
    lengths: list[int],
    follow_ups: int,
    window: int,
    profile: str | None,
    upstream_ms: float = 0.0,
) -> list[dict[str, Any]]:
    """One gateway on a fresh store of ``kind``: a warm-up, then each history length."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    fake_port, gw_port = free_port(), free_port()
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="cf-gateway-history-") as tmp:
        store, schema = _store_for(kind, tmp)
        code = FAKE.format(
            root=str(ROOT), src=str(ROOT / "src"), port=fake_port, latency=upstream_ms / 1000
        )
        fake = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL)
        cmd = [*gateway_cmd(profile), "serve", "--upstream"]
        gateway = subprocess.Popen(
            [
                *cmd,
                f"http://127.0.0.1:{fake_port}",
                "--port",
                str(gw_port),
                "--store",
                store,
                "--window",
                str(window),
                "--log-level",
                "warning",
                # the gateway's defaults refuse more than 10,000 messages or 32 MiB, and answer 503
                # to a request not prepared within 30 s
                "--max-messages",
                "100000",
                "--max-body-bytes",
                str(256 * 1024 * 1024),
                "--request-timeout",  # default 30 s: a first request may take longer
                "3600",
                # under cProfile one process, so the profile holds the request work
                *(["--workers", "1"] if profile else []),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
        )
        try:
            base = f"http://127.0.0.1:{gw_port}"
            asyncio.run(wait_ready(f"http://127.0.0.1:{fake_port}/v1/models"))
            asyncio.run(wait_ready(base + "/healthz"))
            asyncio.run(conversation(base, 40, 2, gateway.pid, "warm-up"))
            for n in lengths:
                r = asyncio.run(conversation(base, n, follow_ups, gateway.pid, f"h{n}"))
                r["store"] = "embedded" if kind == "embedded" else kind.split("://")[0]
                report(r)
                results.append(r)
        finally:
            for proc in (gateway, fake):
                proc.terminate()
            for proc in (gateway, fake):
                proc.wait(timeout=30)
            _drop(schema)
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gateway_history")
    ap.add_argument("--lengths", default="1000,5000,20000", help="history lengths, comma separated")
    ap.add_argument("--follow-ups", type=int, default=10)
    ap.add_argument("--window", type=int, default=128_000)
    ap.add_argument(
        "--upstream-ms",
        type=float,
        default=0.0,
        help="the fake upstream's time per answer (default 0: at once)",
    )
    ap.add_argument(
        "--stores",
        default="embedded,postgresql",
        help="comma separated: embedded (a fresh workspace folder), postgresql (a fresh schema "
        "on $CONTEXTFOLD_TEST_POSTGRES_URL, default the local test server); skipped with a note "
        "when it cannot be reached",
    )
    ap.add_argument("--store", help="one workspace folder or postgresql:// URL instead")
    ap.add_argument("--profile", help="run the gateway under cProfile, stats written here")
    ap.add_argument("--out", default=str(ROOT / "bench-results" / "gateway_history.json"))
    args = ap.parse_args(argv)
    lengths = [int(x) for x in args.lengths.split(",") if x]
    kinds = [args.store] if args.store else [k for k in args.stores.split(",") if k]
    results: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    for kind in kinds:
        print(
            f"gateway, first request with a long history; {kind} store; window {args.window:,}; "
            f"load average before: {load_average()}",
            flush=True,
        )
        try:
            results += run_store(
                kind, lengths, args.follow_ups, args.window, args.profile, args.upstream_ms
            )
        except (ImportError, OSError) as exc:  # no psycopg, no server: said, not hidden
            skipped[kind] = f"{type(exc).__name__}: {exc}"
            print(f"  skipped: {skipped[kind]}", flush=True)
        except Exception as exc:
            if kind == "postgresql" and type(exc).__module__.startswith(("psycopg", "contextfold")):
                skipped[kind] = f"{type(exc).__name__}: {exc}"
                print(f"  skipped: {skipped[kind]}", flush=True)
            else:
                raise
    big = [r for r in results if r["history_messages"] >= 19_000]
    verdict = {
        "first_20000_le_1s": bool(big) and all(r["first_added_ms"] <= 1000 for r in big),
        "follow_ups_le_10ms": bool(results)
        and all((r["follow_up_added_after_body_ms_p95"] or 0) <= 10 for r in results),
    }
    print(f"targets: {verdict}; load average after: {load_average()}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    data = {"window": args.window, "targets": verdict, "skipped": skipped, "results": results}
    out.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
