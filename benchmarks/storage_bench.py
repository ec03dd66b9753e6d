"""Storage benchmark (issue 8): cold start of a big session, and many writers at once.

1. Cold start. Builds one session of ``--messages`` messages (default 20,000, about 50 MB of
   text: the bundled trajectories replayed in a loop, tool outputs repeated to reach
   ``--megabytes``) through ``ContextManager.add`` / ``prepare`` as an agent would, then, in a
   fresh process each time: reopen (``ContextManager(store=store, session_id=...)`` on a store
   the process has open, as a worker has its pool; importing contextfold and opening the store
   are reported apart), the first ``restore``, a ``session_history`` of the last 20 messages,
   and ``prepare()`` with nothing to compact (p50 over 200 calls). Targets: 300 ms, 100 ms,
   20 ms, 1 ms.
2. Concurrency. ``--procs`` processes (16) x ``--sessions`` sessions (50) each replay the
   first ``--per-session`` messages (40) of a trajectory against one workspace, interleaving
   their sessions: messages/s, p50/p95 of ``add`` and ``prepare``, then a check that every
   message is stored exactly once (and indexed exactly once).

Backends: the embedded SQLite workspace; ``--store URL`` adds another (``postgresql://...``).
Run: ``python -m benchmarks.storage_bench [--messages N] [--procs P] [--skip-build]``
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from contextfold import ContextManager  # noqa: E402

TRACES = ROOT / "benchmarks" / "traces"
WINDOW = 32_000


def _traces() -> list[list[dict[str, Any]]]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(TRACES.glob("*.json"))]


def _renamed(msgs: list[dict[str, Any]], tag: str, repeat: int) -> list[dict[str, Any]]:
    """A copy with unique tool call ids (and tool outputs repeated ``repeat`` times)."""
    out = []
    for m in msgs:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [{**c, "id": f"{c['id']}-{tag}"} for c in m["tool_calls"]]
        if m.get("role") == "tool":
            m["tool_call_id"] = f"{m['tool_call_id']}-{tag}"
            if isinstance(m.get("content"), str) and repeat > 1:
                m["content"] = "\n".join([m["content"]] * repeat)
        out.append(m)
    return out


def session_messages(n: int, megabytes: float) -> list[dict[str, Any]]:
    """``n`` trace messages, tool outputs repeated until the session holds ``megabytes``."""
    traces = _traces()

    def make(repeat: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [traces[0][0]]  # one system prompt, at the start
        loop = 0
        while len(out) < n:
            for t in traces:
                out.extend(_renamed(t[1:], f"l{loop}", repeat))
                loop += 1
                if len(out) >= n:
                    break
        out = out[:n]
        while out[-1].get("role") == "assistant" and out[-1].get("tool_calls"):
            out.pop()  # never end on an unanswered call
        return out

    repeat = 1
    while True:
        msgs = make(repeat)
        if sum(len(json.dumps(m)) for m in msgs) >= megabytes * 1e6 or repeat >= 20:
            return msgs
        repeat += 1


def build(target: str, msgs: list[dict[str, Any]]) -> float:
    t0 = time.perf_counter()
    cm = _manager(target, "big")
    for i, m in enumerate(msgs):
        if m.get("role") == "assistant" and i > 0:
            cm.prepare()
        cm.add(m)
        if i % 2000 == 0:
            print(f"  built {i:,} messages ({time.perf_counter() - t0:.0f} s)", flush=True)
    cm.prepare()
    cm.close()
    return time.perf_counter() - t0


def _manager(target: str, sid: str, **kw: Any) -> ContextManager:
    if "://" in target:
        return ContextManager(store=target, session_id=sid, context_window=WINDOW, **kw)
    return ContextManager(workspace=target, session_id=sid, context_window=WINDOW, **kw)


_PROBE = """
import json, statistics, sys, time
from pathlib import Path
sys.path.insert(0, {src!r})
t0 = time.perf_counter()
from contextfold import ContextManager
from contextfold.storage import open_store
target, query = sys.argv[1], sys.argv[2]
# the store (connection pool, database file) as a worker has it open already
store = open_store(target if "://" in target else Path(target))
connect = time.perf_counter() - t0
t0 = time.perf_counter()
cm = ContextManager(store=store, session_id="big", context_window=32000)
reopen = time.perf_counter() - t0
t0 = time.perf_counter()
hits = cm.restore(query, k=5)
restore = time.perf_counter() - t0
cm2 = ContextManager(store=store, session_id="big", context_window=32000)
t0 = time.perf_counter()
text = cm2.handle_tool_call({{"id": "h", "function": {{"name": "session_history",
    "arguments": json.dumps({{"sessionId": "big", "lastN": 20}})}}}})["content"]
history = time.perf_counter() - t0
cm.prepare()
times = []
for _ in range(200):
    t0 = time.perf_counter()
    cm.prepare()
    times.append(time.perf_counter() - t0)
print(json.dumps(dict(reopen=reopen, restore=restore, history=history, connect=connect,
    prepare_p50=statistics.median(times), hits=len(hits), messages=len(cm.view),
    lazy=not cm.view.complete, history_ok="messages" in text)))
"""


def cold_start(target: str, query: str, runs: int) -> dict[str, float]:
    script = _PROBE.format(src=str(ROOT / "src"))
    rows = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", script, target, query],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
    keys = ("reopen", "restore", "history", "prepare_p50", "connect")
    res = {k: statistics.median(r[k] for r in rows) * 1000 for k in keys}
    res["messages"] = rows[0]["messages"]
    res["hits"] = rows[0]["hits"]
    res["lazy"] = all(r["lazy"] for r in rows)
    return res


# --------------------------------------------------------------------------- concurrency


def _worker(target: str, proc: int, sessions: int, per: int, queue: Any) -> None:
    traces = _traces()
    managers = []
    plans = []
    for s in range(sessions):
        sid = f"p{proc:02d}-s{s:03d}"
        managers.append(_manager(target, sid, agent_id=f"agent{proc}"))
        msgs = traces[(proc * sessions + s) % len(traces)][:per]
        while msgs and msgs[-1].get("role") == "assistant" and msgs[-1].get("tool_calls"):
            msgs = msgs[:-1]
        plans.append(msgs)
    adds: list[float] = []
    preps: list[float] = []
    for i in range(per):
        for cm, msgs in zip(managers, plans, strict=True):
            if i >= len(msgs):
                continue
            if msgs[i].get("role") == "assistant" and i > 0:
                t0 = time.perf_counter()
                cm.prepare()
                preps.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            cm.add(msgs[i])
            adds.append(time.perf_counter() - t0)
    for cm in managers:
        cm.close()
    queue.put((adds, preps, {m.session_id: len(p) for m, p in zip(managers, plans, strict=True)}))


def concurrency(target: str, procs: int, sessions: int, per: int) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    workers = [
        ctx.Process(target=_worker, args=(target, p, sessions, per, queue)) for p in range(procs)
    ]
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    results = [queue.get(timeout=3600) for _ in workers]
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - t0
    adds = sorted(a for r in results for a in r[0])
    preps = sorted(p for r in results for p in r[1])
    expected: dict[str, int] = {}
    for r in results:
        expected.update(r[2])
    # every message exactly once, in the log and in the index
    bad = 0
    check = _manager(target, "check")
    store = check.store
    for sid, n in expected.items():
        events = list(store.read(sid, kinds=["message"]))
        positions = [e.data["pos"] for e in events]
        uuids = {e.data["uuid"] for e in events}
        info = store.session(sid)
        if positions != list(range(n)) or len(uuids) != n or info is None or info.messages != n:
            bad += 1
    check.close()
    total = sum(expected.values())

    def pct(xs: list[float], q: float) -> float:
        return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000 if xs else 0.0

    return {
        "processes": procs,
        "sessions": len(expected),
        "messages": total,
        "seconds": elapsed,
        "messages_per_s": total / elapsed,
        "add_p50_ms": pct(adds, 0.5),
        "add_p95_ms": pct(adds, 0.95),
        "prepare_p50_ms": pct(preps, 0.5),
        "prepare_p95_ms": pct(preps, 0.95),
        "sessions_not_exact": bad,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.storage_bench")
    p.add_argument("--messages", type=int, default=20_000)
    p.add_argument("--megabytes", type=float, default=50.0)
    p.add_argument("--runs", type=int, default=3, help="fresh processes per cold-start figure")
    p.add_argument("--procs", type=int, default=16)
    p.add_argument("--sessions", type=int, default=50)
    p.add_argument("--per-session", type=int, default=40)
    p.add_argument("--store", action="append", default=[], help="another backend URL")
    p.add_argument("--workspace", help="reuse this folder (built if empty)")
    p.add_argument("--skip-concurrency", action="store_true")
    p.add_argument("--out", default=str(ROOT / "bench-results" / "storage.json"))
    args = p.parse_args(argv)
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="cf-storage-") as tmp:
        targets = [args.workspace or str(Path(tmp) / "ws"), *args.store]
        msgs = session_messages(args.messages, args.megabytes)
        mb = sum(len(json.dumps(m)) for m in msgs) / 1e6
        for target in targets:
            name = "postgresql" if "://" in target else "sqlite"
            probe = _manager(target, "big")
            existing = len(probe.history)
            probe.close()
            built = 0.0
            if existing == 0:
                print(f"== {name}: building {len(msgs):,} messages ({mb:.0f} MB)", flush=True)
                built = build(target, msgs)
            cold = cold_start(
                target, "show me the full error output of `python reproduce_issue.py`", args.runs
            )
            cold["build_s"] = built
            cold["megabytes"] = mb
            report[f"cold_start_{name}"] = cold
            print(
                f"{name}: {cold['messages']:,.0f} messages / {mb:.0f} MB: reopen "
                f"{cold['reopen']:.0f} ms, first restore {cold['restore']:.0f} ms, "
                f"session_history(20) {cold['history']:.1f} ms, prepare p50 "
                f"{cold['prepare_p50']:.3f} ms (importing contextfold and opening the store "
                f"before: {cold['connect']:.0f} ms)",
                flush=True,
            )
            if not args.skip_concurrency:
                ctarget = str(Path(tmp) / "many") if "://" not in target else target
                conc = concurrency(ctarget, args.procs, args.sessions, args.per_session)
                report[f"concurrency_{name}"] = conc
                print(
                    f"{name}: {conc['processes']} processes x {args.sessions} sessions: "
                    f"{conc['messages']:,} messages in {conc['seconds']:.0f} s = "
                    f"{conc['messages_per_s']:.0f} messages/s; add p50 {conc['add_p50_ms']:.1f} "
                    f"/ p95 {conc['add_p95_ms']:.1f} ms; prepare p50 "
                    f"{conc['prepare_p50_ms']:.1f} / p95 {conc['prepare_p95_ms']:.1f} ms; "
                    f"sessions not exactly once: {conc['sessions_not_exact']}",
                    flush=True,
                )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1), encoding="utf-8")
    bad = sum(v.get("sessions_not_exact", 0) for v in report.values())
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
