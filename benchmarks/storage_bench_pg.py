"""Benchmark: the PostgreSQL store with a big session and with many writers at once.

1. **Cold start.** One session of ``--messages`` trace messages (default 20,000; tool outputs
   repeated to about ``--megabytes``, default 50), outputs over 8 KB offloaded to blobs with an
   evidence row. On a fresh store, median of 5 runs: reopen (open, session info, head, state
   document, newest event; target 300 ms), first restore (evidence search + blob; 100 ms), the
   last 20 messages (20 ms), head round trip. ``--level manager``: the same through
   ``ContextManager(store="postgresql://...")`` (add_many + prepare to write; reopen, restore,
   the session_history tool, prepare p50 with a 1 ms target).
2. **Concurrency.** ``--procs`` processes (16) x ``--sessions`` sessions each (50) replay trace
   messages, interleaved, one transaction per message (``--level manager``: one ContextManager
   per session, ``add`` then ``prepare``). Messages/s, p50/p95 of add (and prepare), conflicts
   (must be 0), and a check that every message is stored exactly once, in order.

Server: ``$CONTEXTFOLD_TEST_POSTGRES_URL`` (default the local test server); fresh schemas,
dropped at the end. Without a server it says so and exits 0 (1 under CONTEXTFOLD_REQUIRE_ALL=1).
Run: ``python -m benchmarks.storage_bench_pg [--level store|manager|both] [--messages N] ...``
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

TRACES = ROOT / "benchmarks" / "traces"
DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
OFFLOAD_BYTES = 8_000
BATCH = 500


def _url() -> str:
    return os.environ.get("CONTEXTFOLD_TEST_POSTGRES_URL") or DEFAULT_URL


def _traces() -> list[list[dict[str, Any]]]:
    out = []
    for path in sorted(TRACES.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if data:
            out.append(data)
    if not out:
        raise SystemExit(f"no trajectories in {TRACES}")
    return out


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    calls = " ".join(
        str(c.get("function", {}).get("arguments", "")) for c in message.get("tool_calls") or []
    )
    return f"{content or ''} {calls}".strip()


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


# --------------------------------------------------------------------------- cold start


def _big_session(n: int, megabytes: float) -> list[dict[str, Any]]:
    """``n`` trace messages (the traces cycled; tool call ids made unique per cycle), tool
    outputs repeated until the whole is about ``megabytes``."""
    flat = [(t, m) for t, trace in enumerate(_traces()) for m in trace]
    messages = []
    for i in range(n):
        t, m = flat[i % len(flat)]
        m = json.loads(json.dumps(m))
        tag = f"~{t}.{i // len(flat)}"  # traces reuse ids (call_1, call_2, ...)
        for call in m.get("tool_calls") or []:
            call["id"] = f"{call['id']}{tag}"
        if m.get("tool_call_id"):
            m["tool_call_id"] = f"{m['tool_call_id']}{tag}"
        messages.append(m)
    size = sum(len(json.dumps(m)) for m in messages)
    tool = [m for m in messages if m.get("role") == "tool" and isinstance(m.get("content"), str)]
    tool_bytes = sum(len(m["content"]) for m in tool) or 1
    factor = max(1.0, (megabytes * 1e6 - size + tool_bytes) / tool_bytes)
    for m in tool:
        body = m["content"]
        m["content"] = (body + "\n") * int(factor) + body[: int(len(body) * (factor % 1))]
    return messages


def build_session(store: Any, sid: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    from contextfold.storage import NewEvent, SearchDoc

    head, blobs, offloaded = 0, 0, ""
    t0 = time.perf_counter()
    for start in range(0, len(messages), BATCH):
        events, docs = [], []
        for i, m in enumerate(messages[start : start + BATCH], start):
            text = _text(m)
            events.append(NewEvent(kind="message", data={"message": m, "uuid": f"{sid}-{i}"}))
            docs.append(
                SearchDoc(
                    namespace="session",
                    doc_id=f"{sid}:{i}",
                    scope="bench",
                    session_id=sid,
                    fields={"body": text},
                    meta={"seq": i},
                )
            )
            if m.get("role") == "tool" and len(text) > OFFLOAD_BYTES:
                sha = store.blobs.put(text.encode())
                blobs += 1
                named = re.search(r"[\w/.-]+\.py\b", text)
                if not offloaded and named:
                    offloaded = f"show me the full output that mentions {named.group(0)}"
                docs.append(
                    SearchDoc(
                        namespace="evidence",
                        doc_id=f"{sid}:ev{i}",
                        scope="bench",
                        session_id=sid,
                        fields={"body": text, "command": text.split("\n", 1)[0][:80]},
                        meta={"sha256": sha, "seq": i},
                    )
                )
        with store.transaction() as tx:
            tx.append(sid, events, expected_seq=head, agent_id="bench", title="cold start")
            tx.index(docs)
            tx.put_doc("state", sid, {"head": head + len(events), "tiers": [0, 0, 0]})
        head += len(events)
    return {"seconds": time.perf_counter() - t0, "blobs": blobs, "query": offloaded or "error"}


def cold_start(url: str, schema: str, n: int, megabytes: float) -> dict[str, Any]:
    from contextfold.storage.postgres import PostgresStore

    messages = _big_session(n, megabytes)
    size = sum(len(json.dumps(m, ensure_ascii=False).encode()) for m in messages)
    sid = "big-session"
    with PostgresStore(url, schema=schema) as store:
        built = build_session(store, sid, messages)
        store._run("analyze", lambda c: c.execute(f"ANALYZE {store.s}.search_docs"))
    runs: dict[str, list[float]] = {"reopen": [], "restore": [], "last20": [], "head": []}
    for _ in range(5):
        t0 = time.perf_counter()
        store = PostgresStore(url, schema=schema)
        info = store.session(sid)
        head = store.head(sid)
        state = store.get_doc("state", sid)
        newest = store.read_last(sid, 1)
        t1 = time.perf_counter()
        hits = store.search("evidence", built["query"], session_id=sid, limit=5)
        body = store.blobs.get(str(hits[0].meta["sha256"])) if hits else b""
        t2 = time.perf_counter()
        last = store.read_last(sid, 20, kinds=["message"])
        t3 = time.perf_counter()
        heads = []
        for _ in range(200):
            h0 = time.perf_counter()
            store.head(sid)
            heads.append(time.perf_counter() - h0)
        store.close()
        assert info is not None and info.messages == n and head == n and state is not None
        assert newest[0].seq == n - 1 and len(last) == 20 and body
        runs["reopen"].append(t1 - t0)
        runs["restore"].append(t2 - t1)
        runs["last20"].append(t3 - t2)
        runs["head"].append(statistics.median(heads))
    return {
        "messages": n,
        "megabytes": size / 1e6,
        "blobs": built["blobs"],
        "build_s": built["seconds"],
        **{k: statistics.median(v) for k, v in runs.items()},
    }


def manager_cold_start(url: str, schema: str, n: int, megabytes: float) -> dict[str, Any]:
    """The same session written through ContextManager (add_many of 250 + prepare), then
    reopened by a new manager on a new store: the library's own cold start."""
    from contextfold import ContextManager

    messages = _big_session(n, megabytes)
    store_url = f"{url}?schema={schema}"
    sid = "big-managed"
    t0 = time.perf_counter()
    with ContextManager(store=store_url, session_id=sid, context_window=128_000) as cm:
        for start in range(0, n, 250):
            cm.add_many(messages[start : start + 250])
            cm.prepare()
        records = len(cm.records())
    build = time.perf_counter() - t0
    query = "show me the full output of the failing pytest run"
    runs: dict[str, list[float]] = {"reopen": [], "restore": [], "last20": [], "prepare": []}
    for _ in range(3):
        t0 = time.perf_counter()
        cm = ContextManager(store=store_url, session_id=sid, context_window=128_000)
        t1 = time.perf_counter()
        found = cm.restore(query)
        t2 = time.perf_counter()
        text, failed = cm.toolbox.run("session_history", {"sessionId": sid, "lastN": 20})
        t3 = time.perf_counter()
        prep = []
        for _ in range(200):
            p0 = time.perf_counter()
            cm.prepare()
            prep.append(time.perf_counter() - p0)
        assert len(cm.history) == n and found and not failed and text
        cm.close()
        runs["reopen"].append(t1 - t0)
        runs["restore"].append(t2 - t1)
        runs["last20"].append(t3 - t2)
        runs["prepare"].append(statistics.median(prep))
    return {
        "messages": n,
        "compactions": records,
        "build_s": build,
        **{k: statistics.median(v) for k, v in runs.items()},
    }


# --------------------------------------------------------------------------- concurrency


def replay_worker(
    url: str, schema: str, proc: int, sessions: int, per_session: int, start_at: float
) -> dict[str, Any]:
    from contextfold.storage import ConcurrentWriteError, NewEvent, SearchDoc
    from contextfold.storage.postgres import PostgresStore

    traces = _traces()
    plan = []
    for k in range(sessions):
        trace = traces[(proc * sessions + k) % len(traces)][:per_session]
        plan.append((f"p{proc}-s{k}", trace))
    heads = dict.fromkeys((sid for sid, _ in plan), 0)
    adds: list[float] = []
    conflicts = 0
    with PostgresStore(url, schema=schema, max_size=2) as store:
        delay = start_at - time.time()
        if delay > 0:
            time.sleep(delay)
        t0 = time.perf_counter()
        for i in range(max(len(t) for _, t in plan)):
            for sid, trace in plan:
                if i >= len(trace):
                    continue
                a0 = time.perf_counter()
                try:
                    with store.transaction() as tx:
                        tx.append(
                            sid,
                            [NewEvent(kind="message", data={"message": trace[i], "i": i})],
                            expected_seq=heads[sid],
                            agent_id=f"agent{proc}",
                        )
                        tx.index(
                            [
                                SearchDoc(
                                    namespace="session",
                                    doc_id=f"{sid}:{i}",
                                    scope=f"agent{proc}",
                                    session_id=sid,
                                    fields={"body": _text(trace[i])},
                                    meta={"seq": i},
                                )
                            ]
                        )
                except ConcurrentWriteError:
                    conflicts += 1
                    continue
                heads[sid] += 1
                adds.append(time.perf_counter() - a0)
        elapsed = time.perf_counter() - t0
    expected = {sid: len(trace) for sid, trace in plan}
    return {"adds": adds, "conflicts": conflicts, "elapsed": elapsed, "expected": expected}


def manager_worker(
    url: str, schema: str, proc: int, sessions: int, per_session: int, start_at: float
) -> dict[str, Any]:
    """One process: ``sessions`` ContextManagers on one shared PostgresStore, interleaved,
    ``add`` then ``prepare`` for every message (window 32,000: compactions happen)."""
    from contextfold import ContextManager
    from contextfold.storage.postgres import PostgresStore

    traces = _traces()
    adds: list[float] = []
    prepares: list[float] = []
    expected = {}
    with PostgresStore(url, schema=schema, max_size=2) as store:
        managers = []
        for k in range(sessions):
            sid = f"p{proc}-s{k}"
            trace = traces[(proc * sessions + k) % len(traces)][:per_session]
            managers.append(
                (
                    ContextManager(
                        store=store, session_id=sid, context_window=32_000, agent_id=f"agent{proc}"
                    ),
                    trace,
                )
            )
            expected[sid] = len(trace)
        delay = start_at - time.time()
        if delay > 0:
            time.sleep(delay)
        t0 = time.perf_counter()
        for i in range(max(len(t) for _, t in managers)):
            for cm, trace in managers:
                if i >= len(trace):
                    continue
                a0 = time.perf_counter()
                cm.add(trace[i])
                a1 = time.perf_counter()
                cm.prepare()
                prepares.append(time.perf_counter() - a1)
                adds.append(a1 - a0)
        elapsed = time.perf_counter() - t0
        for cm, _ in managers:
            cm.close()
    return {
        "adds": adds,
        "prepares": prepares,
        "conflicts": 0,
        "elapsed": elapsed,
        "expected": expected,
    }


def _stored_ok(store: Any, sid: str, trace: list[dict[str, Any]], level: str) -> bool:
    import uuid as uuidlib

    events = list(store.read(sid, kinds=["message"]))
    if level == "store":
        return [e.seq for e in events] == list(range(len(trace))) and all(
            e.data["i"] == e.seq and e.data["message"] == trace[e.seq] for e in events
        )
    want = [
        str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"contextfold:{sid}:{i}"))
        for i in range(len(trace))
    ]
    return [e.data.get("uuid") for e in events] == want


def concurrency(
    url: str, schema: str, procs: int, sessions: int, per_session: int, level: str = "store"
) -> dict[str, Any]:
    from contextfold.storage.postgres import PostgresStore

    start_at = time.time() + 3 + procs * 0.4  # every process imported and connected
    t0 = time.time()
    with ProcessPoolExecutor(procs, mp_context=get_context("spawn")) as pool:
        futures = [
            pool.submit(
                replay_worker if level == "store" else manager_worker,
                url,
                schema,
                p,
                sessions,
                per_session,
                start_at,
            )
            for p in range(procs)
        ]
        results = [f.result() for f in futures]
    wall = time.time() - max(t0, start_at)
    adds = [a for r in results for a in r["adds"]]
    prepares = [a for r in results for a in r.get("prepares", [])]
    expected: dict[str, int] = {}
    for r in results:
        expected.update(r["expected"])
    bad = 0
    traces = _traces()
    with PostgresStore(url, schema=schema) as store:
        for p in range(procs):
            for k in range(sessions):
                sid = f"p{p}-s{k}"
                trace = traces[(p * sessions + k) % len(traces)][:per_session]
                bad += 0 if _stored_ok(store, sid, trace, level) else 1
        indexed = store._rows(
            "count", f"SELECT count(*) FROM {store.s}.search_docs WHERE namespace='session'", ()
        )[0][0]
    total = sum(expected.values())
    return {
        "processes": procs,
        "sessions": procs * sessions,
        "messages": total,
        "level": level,
        "stored_ok": bad == 0 and len(adds) == total and (level != "store" or indexed == total),
        "bad_sessions": bad,
        "conflicts": sum(r["conflicts"] for r in results),
        "per_s": len(adds) / wall if wall > 0 else float("nan"),
        "add_p50": _pct(adds, 0.5),
        "add_p95": _pct(adds, 0.95),
        "prepare_p50": _pct(prepares, 0.5),
        "prepare_p95": _pct(prepares, 0.95),
        "wall_s": wall,
    }


# --------------------------------------------------------------------------- main


def _mark(value: float, target: float) -> str:
    return f"{_ms(value)} ({'ok' if value <= target else 'MISSED'}: <= {target * 1000:g} ms)"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.storage_bench_pg")
    p.add_argument("--messages", type=int, default=20_000)
    p.add_argument("--megabytes", type=float, default=50.0)
    p.add_argument("--procs", type=int, default=16)
    p.add_argument("--sessions", type=int, default=50, help="sessions per process")
    p.add_argument("--per-session", type=int, default=40, help="messages per session")
    p.add_argument(
        "--level",
        choices=["store", "manager", "both"],
        default="both",
        help="measure the Store API, ContextManager on the store, or both",
    )
    p.add_argument("--skip-cold", action="store_true")
    p.add_argument("--skip-concurrency", action="store_true")
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_args(argv)
    url = _url()
    try:
        import psycopg

        with psycopg.connect(url, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        print(f"PostgreSQL benchmark skipped: no server at {url} ({exc})")
        return 1 if os.environ.get("CONTEXTFOLD_REQUIRE_ALL") == "1" else 0
    base = f"cf_bench_{uuid.uuid4().hex[:8]}"
    levels = ["store", "manager"] if args.level == "both" else [args.level]
    figures: dict[str, Any] = {"server": url.split("@")[-1]}
    schemas: list[str] = []
    ok = True
    try:
        for level in levels:
            if not args.skip_cold:
                schemas.append(f"{base}_{level}")
                if level == "store":
                    cold = cold_start(url, schemas[-1], args.messages, args.megabytes)
                    extra = f"head round trip p50 {_ms(cold['head'])}"
                    size = f" / {cold['megabytes']:.1f} MB, {cold['blobs']} offloaded blobs"
                else:
                    cold = manager_cold_start(url, schemas[-1], args.messages, args.megabytes)
                    extra = f"prepare p50 {_mark(cold['prepare'], 0.001)}"
                    size = f", {cold['compactions']} compactions"
                figures[f"cold_start_{level}"] = cold
                print(
                    f"[{level}] cold start, {cold['messages']:,} messages{size} (written in "
                    f"{cold['build_s']:.1f} s):\n  reopen {_mark(cold['reopen'], 0.3)}, first "
                    f"restore {_mark(cold['restore'], 0.1)}, last 20 messages "
                    f"{_mark(cold['last20'], 0.02)}, {extra}",
                    flush=True,
                )
            if not args.skip_concurrency:
                schemas.append(f"{base}_{level}_c")
                conc = concurrency(
                    url, schemas[-1], args.procs, args.sessions, args.per_session, level
                )
                figures[f"concurrency_{level}"] = conc
                prep = (
                    f", prepare p50 {_ms(conc['prepare_p50'])} p95 {_ms(conc['prepare_p95'])}"
                    if level == "manager"
                    else ""
                )
                print(
                    f"[{level}] {conc['processes']} processes x {args.sessions} sessions "
                    f"({conc['messages']:,} messages): {conc['per_s']:,.0f} messages/s, "
                    f"{'add' if level == 'manager' else 'append'} p50 {_ms(conc['add_p50'])} "
                    f"p95 {_ms(conc['add_p95'])}{prep}, conflicts {conc['conflicts']}, every "
                    f"message stored exactly once: {conc['stored_ok']}",
                    flush=True,
                )
                ok &= bool(conc["stored_ok"]) and conc["conflicts"] == 0
    finally:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            for name in schemas:
                conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2), encoding="utf-8")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
