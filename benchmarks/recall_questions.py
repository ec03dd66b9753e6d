"""Recall asked in natural and paraphrased questions next to exact-command ones, over the
bundled trajectories, without and with semantic retrieval.

Replays every trajectory (as is, and rewritten into the file-tool styles) through
``ContextManager`` at a 32,000-token window, then asks for every tool output that left the view
by its command, by what it is ("what was in views.py when you looked at it?", "what did
running reproduce.py print the second time?", "show me the traceback from reproduce.py", test
results, a grep, a diff; one in five in Chinese) and in other words than its own ("what came
out when you launched reproduce.py?", "the listing of the folder", "what did the linter
complain about?"; one in three in Chinese). Prints top-1 / top-5 per kind and restore latency,
once with ``CONTEXTFOLD_SEMANTIC=0`` and once with the ``semantic`` extra (when installed),
with what the vectors cost (index time and disk per output); writes
``bench-results/recall_questions.json`` (every question with its rank, both runs).

Run: ``python -m benchmarks.recall_questions [--jobs N] [--limit N] [--sets shell,claude]
[--semantic both|on|off]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from contextfold.bench.recall import STYLE_SETS, run_recall  # noqa: E402
from contextfold.bench.recall_report import recall_rows, recall_targets, recall_title  # noqa: E402
from contextfold.evidence import semantic  # noqa: E402

TRACES = ROOT / "benchmarks" / "traces"
#: Restore p50 that semantic retrieval may add, at most.
SEMANTIC_P50_MS = 10.0


def _run(traces: Sequence[Path], args: argparse.Namespace, on: bool) -> dict[str, Any]:
    before = os.environ.get("CONTEXTFOLD_SEMANTIC")
    os.environ["CONTEXTFOLD_SEMANTIC"] = "1" if on else "0"
    try:
        return run_recall(
            traces,
            window=args.window,
            style_sets=[s for s in args.sets.split(",") if s],
            jobs=args.jobs,
        )
    finally:
        if before is None:
            os.environ.pop("CONTEXTFOLD_SEMANTIC", None)
        else:
            os.environ["CONTEXTFOLD_SEMANTIC"] = before


def _table(runs: Mapping[str, Mapping[str, Any]]) -> None:
    """One row per question kind, top-1 / top-5 of each run side by side."""
    modes = list(runs)
    tables = {m: dict((r[0], r[1:]) for r in recall_rows(runs[m])[1]) for m in modes}
    names = list(dict.fromkeys(n for m in modes for n in tables[m]))
    width = max(len(n) for n in [*names, "question"])
    head = "".join(f"  {m + ' top-1':>13}  {m + ' top-5':>13}" for m in modes)
    print(f"{'question':<{width}}  {'asked':>6}{head}")
    for n in names:
        asked = next(tables[m][n][0] for m in modes if n in tables[m])
        cells = "".join(
            f"  {tables[m][n][1]:>13}  {tables[m][n][2]:>13}" if n in tables[m] else " " * 30
            for m in modes
        )
        print(f"{n:<{width}}  {asked:>6}{cells}")


def _costs(runs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    lines = [
        f"{m}: restore p50 {s.get('restore_p50_ms')} ms, p95 {s.get('restore_p95_ms')} ms; "
        f"vectors {s.get('vectors', 0)}, index {s.get('index_ms_per_output')} ms and "
        f"{s.get('disk_bytes_per_output')} bytes per output"
        for m, s in runs.items()
    ]
    on = runs.get("semantic on")
    if on is not None and on.get("restore_p50_ms") is not None:
        # within the same run: the restores less the time on the question's vector
        added = round(on["restore_p50_ms"] - on["restore_p50_less_semantic_ms"], 3)
        ok = "ok  " if added <= SEMANTIC_P50_MS else "MISS"
        lines.append(
            f"{ok} semantic adds <= {SEMANTIC_P50_MS:g} ms restore p50 (got {added} ms; the "
            f"question's vector was computed for {on.get('semantic_asked')} questions, "
            f"{on.get('semantic_ms_mean')} ms on average over all)"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.recall_questions")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--limit", type=int, default=0, help="only the first N trajectories")
    p.add_argument("--sets", default=",".join(STYLE_SETS), help="tool styles, comma-separated")
    p.add_argument("--window", type=int, default=32_000)
    p.add_argument("--semantic", choices=("both", "on", "off"), default="both")
    p.add_argument("--out", default=str(ROOT / "bench-results" / "recall_questions.json"))
    args = p.parse_args(argv)
    traces = sorted(TRACES.glob("*.json"))
    if args.limit:
        traces = traces[: args.limit]
    installed = semantic.enabled() or os.environ.get("CONTEXTFOLD_SEMANTIC") is not None
    installed = installed and __import__("contextfold.evidence.embed").evidence.embed.available()
    modes = {"both": [False, True], "on": [True], "off": [False]}[args.semantic]
    if not installed and True in modes:
        print("the semantic extra is not installed: running without semantic retrieval only")
        modes = [False]
    got = {f"semantic {'on' if on else 'off'}": _run(traces, args, on) for on in modes}
    summaries = {m: g["summary"] for m, g in got.items()}
    for m, s in summaries.items():
        print(f"{m}: {recall_title(s)}")
    _table(summaries)
    errors = 0
    for m, s in summaries.items():
        for t in recall_targets(s):
            print(f"{'ok  ' if t['met'] else 'MISS'} [{m}] {t['text']}")
        for e in s.get("errors", []):
            errors += 1
            print(f"error [{m}]: {e}", file=sys.stderr)
    for line in _costs(summaries):
        print(line)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(got, indent=1, ensure_ascii=False), encoding="utf-8")
    print(f"written {out}")
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
