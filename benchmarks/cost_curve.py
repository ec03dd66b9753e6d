"""The cost / retention trade-off of the default policy, one knob at a time.

Replays every bundled trajectory with ``progressive`` under several tier settings and prints,
per setting, the cache-aware cost and input as fractions of sending everything, compactions,
overflows and the retention figures (task and newest request verbatim, files written still
named, removed outputs restorable byte-exact). At 32K the knobs are the compaction thresholds
and the target; at 128K the working window. Run: ``python -m benchmarks.cost_curve``
(``--limit N`` for a quick look).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from contextfold.bench.replay import load_trace, replay_one, resolve_traces  # noqa: E402
from contextfold.bench.strategies import ContextFoldStrategy, Strategy  # noqa: E402
from contextfold.core.config import LATE_COMPACTION_TIERS, TierConfig, progressive  # noqa: E402

DEFAULT = TierConfig()
#: the default tiers, compacted between an answer and the next request as the gateway does
#: (the same object: the curve tells the rows apart by it)
AHEAD = replace(DEFAULT)
CURVES: dict[int, list[tuple[str, TierConfig]]] = {
    32_000: [
        ("compaction late: 60/70/80%, target 30%, no stale batches", LATE_COMPACTION_TIERS),
        (
            "soft 70%, target 15%",
            replace(
                DEFAULT,
                warn_threshold=0.6,
                soft_threshold=0.7,
                full_threshold=0.8,
                target_ratio=0.15,
            ),
        ),
        ("soft 60%, target 15%", replace(DEFAULT, target_ratio=0.15)),
        ("default: warn 55%, soft 60%, full 75%, target 10%", DEFAULT),
        ("default, compacted ahead as the gateway does", AHEAD),
        (
            "warn 40%, soft 50%, full 70%, target 10%",
            replace(DEFAULT, warn_threshold=0.40, soft_threshold=0.50, full_threshold=0.70),
        ),
        (
            "soft 45%, target 10%",
            replace(DEFAULT, warn_threshold=0.35, soft_threshold=0.45, full_threshold=0.70),
        ),
    ],
    128_000: [
        ("whole window (working_window=0)", replace(DEFAULT, working_window=0)),
        ("working_window=96,000", replace(DEFAULT, working_window=96_000)),
        ("working_window=80,000", replace(DEFAULT, working_window=80_000)),
        ("default: working_window=64,000", DEFAULT),
        ("default, compacted ahead as the gateway does", AHEAD),
        ("working_window=48,000", replace(DEFAULT, working_window=48_000)),
    ],
}


def _factory(tiers: TierConfig, ahead: bool = False) -> Any:
    config = progressive().with_(tiers=tiers)

    def build(window: int) -> Strategy:
        return ContextFoldStrategy("progressive", window, config=config, ahead=ahead)

    return build


def curve(window: int, traces: list[Path]) -> list[dict[str, Any]]:
    data = [load_trace(p) for p in traces]
    raw = [replay_one(d, "raw", window) for d in data]
    raw_cost = sum(r["cache_cost"] for r in raw)
    raw_in = sum(r["cumulative_input_tokens"] for r in raw)
    rows = []
    for label, tiers in CURVES[window]:
        ahead = tiers is AHEAD
        runs = [replay_one(d, "progressive", window, factory=_factory(tiers, ahead)) for d in data]
        calls = sum(r["calls"] for r in runs)
        left = sum(r["tool_outputs_left"] for r in runs)
        expected = sum(r["artifact_expected"] for r in runs)
        rows.append(
            {
                "setting": label,
                "cost_vs_raw": sum(r["cache_cost"] for r in runs) / raw_cost,
                "input_vs_raw": sum(r["cumulative_input_tokens"] for r in runs) / raw_in,
                "compactions": sum(r["compactions"] for r in runs),
                "overflows": sum(r["overflows"] for r in runs),
                "first_pct": 100 * sum(r["retained_first_user"] for r in runs) / calls,
                "newest_pct": 100 * sum(r["retained_newest_user"] for r in runs) / calls,
                "files_pct": 100 * sum(r["artifact_named"] for r in runs) / expected
                if expected
                else 100.0,
                "recoverable_pct": 100 * sum(r["tool_outputs_recoverable"] for r in runs) / left
                if left
                else 100.0,
            }
        )
    return rows


def table(window: int, rows: list[dict[str, Any]]) -> str:
    out = [
        f"window {window:,}: setting | cost/raw | input/raw | compactions | overflows | "
        "task / newest kept | files named | recoverable",
    ]
    for r in rows:
        out.append(
            f"| {r['setting']} | {r['cost_vs_raw']:.3f} | {r['input_vs_raw']:.3f} | "
            f"{r['compactions']} | {r['overflows']} | {r['first_pct']:.0f}% / "
            f"{r['newest_pct']:.0f}% | {r['files_pct']:.1f}% | {r['recoverable_pct']:.0f}% |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.cost_curve")
    p.add_argument("--limit", type=int, default=0, help="only the first N traces")
    p.add_argument("--window", type=int, action="append", choices=sorted(CURVES))
    args = p.parse_args(argv)
    traces = resolve_traces(None)
    if args.limit > 0:
        traces = traces[: args.limit]
    for window in args.window or sorted(CURVES):
        print(table(window, curve(window, traces)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
