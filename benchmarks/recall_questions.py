"""Recall asked in natural questions next to exact-command ones, over the bundled trajectories.

Replays every trajectory (as is, and rewritten into the file-tool styles) through
``ContextManager`` at a 32,000-token window, then asks for every tool output that left the view
by its command and by what it is ("what was in views.py when you looked at it?", "what did
running reproduce.py print the second time?", "show me the traceback from reproduce.py", test
results, a grep, a diff; one in five in Chinese). Prints top-1 / top-5 per kind and restore
latency; writes ``bench-results/recall_questions.json`` (every question with its rank).

Run: ``python -m benchmarks.recall_questions [--jobs N] [--limit N] [--sets shell,claude]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from contextfold.bench.recall import STYLE_SETS, run_recall  # noqa: E402
from contextfold.bench.recall_report import recall_rows, recall_targets, recall_title  # noqa: E402

TRACES = ROOT / "benchmarks" / "traces"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.recall_questions")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--limit", type=int, default=0, help="only the first N trajectories")
    p.add_argument("--sets", default=",".join(STYLE_SETS), help="tool styles, comma-separated")
    p.add_argument("--window", type=int, default=32_000)
    p.add_argument("--out", default=str(ROOT / "bench-results" / "recall_questions.json"))
    args = p.parse_args(argv)
    traces = sorted(TRACES.glob("*.json"))
    if args.limit:
        traces = traces[: args.limit]
    got = run_recall(
        traces,
        window=args.window,
        style_sets=[s for s in args.sets.split(",") if s],
        jobs=args.jobs,
    )
    summary = got["summary"]
    print(recall_title(summary))
    headers, rows = recall_rows(summary)
    width = max(len(r[0]) for r in [headers, *rows])
    print(f"{headers[0]:<{width}}  " + "  ".join(f"{h:>9}" for h in headers[1:]))
    for row in rows:
        print(f"{row[0]:<{width}}  " + "  ".join(f"{c:>9}" for c in row[1:]))
    for t in recall_targets(summary):
        print(("ok   " if t["met"] else "MISS ") + t["text"])
    for e in summary.get("errors", []):
        print(f"error: {e}", file=sys.stderr)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(got, indent=1, ensure_ascii=False), encoding="utf-8")
    print(f"written {out}")
    return 1 if summary.get("errors") else 0


if __name__ == "__main__":
    raise SystemExit(main())
