"""Micro-benchmarks (issue 5, section 4).

1. ``prepare()`` overhead against history size (100 .. 5,000 messages): build the history, call
   ``prepare`` once, then add ONE message and time the next ``prepare``; repeated, median and
   p95. A large window isolates the bookkeeping (no compaction); the 32K window shows the steady
   state once the history has been compacted.
2. Token-estimator error (heuristic vs exact o200k) on English, code, JSON and CJK text.
3. Side by side with langchain-core (the ``langchain`` extra), when installed:
   ``count_tokens_approximately`` in the error table, and ``trim_messages`` on the same
   histories, which is stateless and re-reads the whole history on every call.

Run: ``python -m benchmarks.micro_prepare`` (``make bench`` runs it after the replay).
"""

from __future__ import annotations

import json
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from contextfold.bench.metrics import TokenCounter  # noqa: E402
from contextfold.bench.replay import default_traces_dir, load_trace  # noqa: E402

SIZES = (100, 500, 1_000, 2_000, 5_000)
WINDOWS = (10_000_000, 32_000)


def history(n: int) -> list[dict[str, Any]]:
    """``n`` messages: a system prompt and a task, then real assistant/tool turns from the traces
    (cycled, with fresh tool call ids so the sequence stays valid)."""
    turns: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    for path in sorted(default_traces_dir().glob("deepseek__*.json"))[:6]:
        msgs = load_trace(path)
        for i, m in enumerate(msgs):
            if m["role"] == "assistant" and m.get("tool_calls"):
                ids = {c["id"] for c in m["tool_calls"]}
                results = [
                    r for r in msgs[i + 1 : i + 1 + len(ids)] if r.get("tool_call_id") in ids
                ]
                if len(results) == len(ids) and len(results) == 1:
                    turns.append((m, results))
    if not turns:  # no traces: synthetic turns
        for k in range(50):
            call = {
                "id": "c",
                "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"command": f"ls {k}"})},
            }
            turns.append(
                (
                    {"role": "assistant", "content": f"step {k}", "tool_calls": [call]},
                    [{"role": "tool", "tool_call_id": "c", "content": f"file_{k}.py\n" * 20}],
                )
            )
    out: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing test in the repository."},
    ]
    k = 0
    while len(out) < n:
        a, results = turns[k % len(turns)]
        cid = f"call_{k}"
        call = dict(a["tool_calls"][0], id=cid)
        out.append({**a, "tool_calls": [call]})
        out.append({**results[0], "tool_call_id": cid})
        k += 1
    out = out[:n]
    if out[-1]["role"] == "assistant":  # never end on a call without its result
        out.pop()
    return out


def _stats(samples: Sequence[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"median_ms": round(statistics.median(ordered), 4), "p95_ms": round(p95, 4)}


def bench_prepare(sizes: Sequence[int] = SIZES, reps: int = 30) -> list[dict[str, Any]]:
    try:
        from contextfold import ContextManager  # type: ignore[attr-defined]
    except ImportError as exc:
        return [{"unavailable": f"contextfold.ContextManager: {exc}"}]
    rows: list[dict[str, Any]] = []
    for window in WINDOWS:
        for n in sizes:
            msgs = history(n)
            with tempfile.TemporaryDirectory(prefix="cf-micro-") as tmp:
                cm = ContextManager(workspace=tmp, session_id="micro", context_window=window)
                t0 = time.perf_counter()
                for m in msgs:
                    cm.add(m)
                add_all = (time.perf_counter() - t0) * 1000
                t0 = time.perf_counter()
                cm.prepare()
                first = (time.perf_counter() - t0) * 1000
                times, adds = [], []
                for r in range(reps):
                    t0 = time.perf_counter()
                    cm.add({"role": "user", "content": f"ping {r}: please continue."})
                    adds.append((time.perf_counter() - t0) * 1000)
                    t0 = time.perf_counter()
                    cm.prepare()
                    times.append((time.perf_counter() - t0) * 1000)
                close = getattr(cm, "close", None)
                if callable(close):
                    close()
            rows.append(
                {
                    "window": window,
                    "history": len(msgs),
                    "add_all_ms": round(add_all, 1),
                    "first_prepare_ms": round(first, 2),
                    "add_one_median_ms": round(statistics.median(adds), 4),
                    **_stats(times),
                }
            )
    return rows


def bench_langchain_trim(sizes: Sequence[int] = SIZES, reps: int = 10) -> list[dict[str, Any]]:
    try:
        from langchain_core.messages.utils import (
            convert_to_messages,
            count_tokens_approximately,
            trim_messages,
        )
    except ImportError:
        return [
            {"unavailable": "langchain-core is not installed (pip install contextfold[langchain])"}
        ]
    rows = []
    for n in sizes:
        msgs = convert_to_messages(history(n))
        trim_messages(msgs, max_tokens=32_000, token_counter=count_tokens_approximately)
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            trim_messages(
                msgs,
                max_tokens=32_000,
                token_counter=count_tokens_approximately,
                strategy="last",
                include_system=True,
                start_on="human",
            )
            times.append((time.perf_counter() - t0) * 1000)
        rows.append({"history": len(msgs), **_stats(times)})
    return rows


# --------------------------------------------------------------------------- estimator error

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


def samples() -> dict[str, list[str]]:
    traces = sorted(default_traces_dir().glob("*.json"))
    english = []
    json_texts = []
    for path in traces[::3]:
        msgs = load_trace(path)
        user = next((m["content"] for m in msgs if m["role"] == "user"), "")
        if isinstance(user, str) and user:
            english.append(user[:6000])
        json_texts.append(json.dumps(msgs[:12], ensure_ascii=False)[:8000])
    code = [
        p.read_text(encoding="utf-8")[:8000]
        for p in sorted((ROOT / "src" / "contextfold").glob("*.py"))[:12]
    ]
    cjk = []
    seeds = default_traces_dir().parent / "seeds"
    for path in sorted(seeds.glob("*.txt")):
        lines = [
            ln
            for ln in path.read_text(encoding="utf-8").splitlines()
            if ln.strip() and len(_CJK.findall(ln)) >= 0.4 * len(ln.strip())
        ]
        for k in range(0, len(lines), 40):
            cjk.append("\n".join(lines[k : k + 40]))
    return {"english": english, "code": code, "json": json_texts, "cjk": [c for c in cjk if c]}


def estimators() -> dict[str, Callable[[str], int]]:
    exact = TokenCounter()
    out: dict[str, Callable[[str], int]] = {
        "o200k exact (bpe_openai)": lambda t: len(exact.encode(t)),
        "chars/4": lambda t: round(len(t) / 4),
    }
    try:
        from contextfold.core.tokens import HeuristicCounter

        h = HeuristicCounter()
        out["contextfold heuristic"] = h.count_text
    except ImportError:
        pass
    try:
        from langchain_core.messages import HumanMessage
        from langchain_core.messages.utils import count_tokens_approximately

        out["langchain approx"] = lambda t: count_tokens_approximately(
            [HumanMessage(t)], extra_tokens_per_message=0
        )
    except ImportError:
        pass
    return out


def bench_estimators() -> list[dict[str, Any]]:
    tc = TokenCounter()
    rows = []
    for kind, texts in samples().items():
        exact = [tc.count(t) for t in texts]
        for name, est in estimators().items():
            errs = [(est(t) - e) / e for t, e in zip(texts, exact, strict=True) if e]
            t0 = time.perf_counter()
            for t in texts:
                est(t)
            secs = time.perf_counter() - t0
            chars = sum(len(t) for t in texts)
            rows.append(
                {
                    "text": kind,
                    "estimator": name,
                    "samples": len(errs),
                    "mean_abs_err_pct": round(100 * statistics.mean(abs(x) for x in errs), 1)
                    if errs
                    else None,
                    "max_abs_err_pct": round(100 * max(abs(x) for x in errs), 1) if errs else None,
                    "bias_pct": round(100 * statistics.mean(errs), 1) if errs else None,
                    "mchars_per_s": round(chars / secs / 1e6, 1) if secs else None,
                }
            )
    return rows


def print_rows(title: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n{title}")
    if not rows:
        return
    if "unavailable" in rows[0]:
        print(f"  unavailable: {rows[0]['unavailable']}")
        return
    keys = list(rows[0])
    widths = [max(len(k), *(len(str(r.get(k))) for r in rows)) for k in keys]
    print("  " + "  ".join(k.rjust(w) for k, w in zip(keys, widths, strict=True)))
    for r in rows:
        print("  " + "  ".join(str(r.get(k)).rjust(w) for k, w in zip(keys, widths, strict=True)))


def run(out_dir: Path | None = None, sizes: Sequence[int] = SIZES) -> dict[str, Any]:
    result = {
        "prepare_vs_history": bench_prepare(sizes),
        "langchain_trim_messages": bench_langchain_trim(sizes),
        "token_estimators": bench_estimators(),
    }
    print_rows("prepare() after adding one message, by history size", result["prepare_vs_history"])
    print_rows(
        "langchain_core trim_messages on the same histories (window 32000)",
        result["langchain_trim_messages"],
    )
    print_rows("token estimators vs exact o200k_base", result["token_estimators"])
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "micro.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    return result


if __name__ == "__main__":
    run(ROOT / "bench-results")
