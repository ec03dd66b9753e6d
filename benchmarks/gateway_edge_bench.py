"""How long the gateway takes to answer or refuse requests with many small messages, and what
another client's latency is meanwhile (the figures in docs/security.md).

A gateway (in this process, on a uvicorn thread) in front of the scripted upstream of
tests/gateway/gateway_fakes.py, both on 127.0.0.1. For each size, a new conversation of that many small
messages is sent once while a second client sends one small request after another; the
request's time and status, and the second client's worst and median latency, are printed (one
JSON line per size). Run:

    python -m benchmarks.gateway_edge_bench 2000 5000 9990 100000
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any


def _messages(n: int) -> list[dict[str, Any]]:
    msgs = [{"role": "system", "content": f"system prompt {n}"}]
    msgs += [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message number {i} here"}
        for i in range(n - 1)
    ]
    if msgs[-1]["role"] != "user":
        msgs[-1] = {"role": "user", "content": "the last request"}
    return msgs


def run(sizes: list[int]) -> list[dict[str, Any]]:
    import httpx
    from tests.gateway.gateway_helpers import running

    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as folder, running(Path(folder)) as (_fake, gw):
        client = httpx.Client(base_url=gw.url, timeout=300)
        warm = {"model": "m", "messages": [{"role": "user", "content": "warm up"}]}
        client.post("/v1/chat/completions", json=warm)
        for n in sizes:
            body = json.dumps({"model": "m", "messages": _messages(n)}).encode()
            latencies: list[float] = []
            stop = threading.Event()

            def other(
                n: int = n, stop: threading.Event = stop, latencies: list[float] = latencies
            ) -> None:
                with httpx.Client(base_url=gw.url, timeout=300) as o:
                    k = 0
                    while not stop.is_set():
                        msg = {"role": "user", "content": f"other {n} {k}"}
                        t = time.perf_counter()
                        o.post("/v1/chat/completions", json={"model": "m", "messages": [msg]})
                        latencies.append(time.perf_counter() - t)
                        k += 1

            thread = threading.Thread(target=other)
            thread.start()
            time.sleep(0.3)
            started = time.perf_counter()
            r = client.post("/v1/chat/completions", content=body)
            seconds = time.perf_counter() - started
            time.sleep(0.3)
            stop.set()
            thread.join()
            row = {
                "messages": n,
                "bytes": len(body),
                "status": r.status_code,
                "seconds": round(seconds, 2),
                "other_requests": len(latencies),
                "other_max_ms": round(max(latencies) * 1000),
                "other_p50_ms": round(statistics.median(latencies) * 1000, 1),
                "server_timing": r.headers.get("server-timing", ""),
            }
            print(json.dumps(row), flush=True)
            out.append(row)
        client.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", type=int, nargs="*", default=[2000, 5000, 9990, 100000])
    args = parser.parse_args(argv)
    run(args.sizes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
