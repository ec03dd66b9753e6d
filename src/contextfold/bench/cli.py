"""``contextfold bench``: replay trajectories, print the table, write JSON and the HTML report."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from ..errors import ContextFoldError
from .replay import ReplayConfig, counter, resolve_traces, run_replay
from .report_html import write_report
from .results import ReplayResults, StrategyTotals, Target
from .strategies import ALL_STRATEGIES, CONTEXTFOLD, PEERS, SummarizerSpec

TABLE_COLUMNS: list[tuple[str, str]] = [
    ("cumulative_input_tokens", "input tok"),
    ("input_vs_raw", "in/raw"),
    ("cache_cost", "cache cost"),
    ("cost_vs_raw", "cost/raw"),
    ("cost_vs_mask", "cost/mask"),
    ("peak_view_tokens", "peak"),
    ("overflows", "overfl"),
    ("compactions", "compact"),
    ("summarizer_input_tokens", "summ in"),
    ("retention_first_pct", "first%"),
    ("retention_newest_pct", "newest%"),
    ("recoverability_pct", "recov%"),
    ("artifact_recall_pct", "artif%"),
    ("prepare_p50_ms", "p50 ms"),
    ("prepare_p95_ms", "p95 ms"),
    ("compaction_p50_ms", "comp ms"),
]


#: the default table: what a user comparing strategies on their own traces reads first
USER_COLUMNS: list[tuple[str, str]] = [
    ("cumulative_input_tokens", "input tokens"),
    ("input_vs_raw", "vs raw"),
    ("cache_cost", "cache-aware cost"),
    ("cost_vs_raw", "cost vs raw"),
    ("peak_view_tokens", "peak view"),
    ("overflows", "overflows"),
    ("compactions", "compactions"),
    ("recoverability_pct", "recoverable %"),
    ("prepare_p50_ms", "prepare ms"),
]

COLUMN_LEGEND = (
    "input tokens: sent over all model calls; cache-aware cost: the same, cached prefix "
    "tokens at a tenth; vs raw: against sending the whole history; peak view: largest "
    "request; overflows: requests over the window; recoverable %: removed tool outputs that "
    "read back byte-exact; prepare ms: median time to build a view. --all-columns shows more."
)


def _ints(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        part = part.strip().lower().replace("_", "")
        if not part:
            continue
        mult = 1000 if part.endswith("k") else 1
        try:
            value = int(float(part.rstrip("k")) * mult)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a window size: {part!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"window must be positive: {part!r}")
        out.append(value)
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="contextfold bench",
        description="Replay agent trajectories with several context strategies and compare "
        "cost, cache, retention, recoverability and speed (exact o200k tokens).",
    )
    p.add_argument(
        "--window",
        action="append",
        type=_ints,
        default=None,
        help="context window(s) in tokens, comma separated (default 32000)",
    )
    p.add_argument(
        "--strategies",
        default=",".join(ALL_STRATEGIES),
        help=f"comma separated, from {','.join(ALL_STRATEGIES)} (default: all)",
    )
    p.add_argument(
        "--traces",
        nargs="+",
        default=None,
        metavar="DIR|FILE",
        help="trace folders (*.json) or files (default: the 45 bundled trajectories)",
    )
    p.add_argument("--limit", type=int, default=0, help="only the first N traces")
    p.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    p.add_argument("--out", default="bench-results", help="output folder (default bench-results)")
    p.add_argument(
        "--summarizer",
        choices=("extractive", "openai"),
        default="extractive",
        help="how contextfold summarizes (default extractive: no LLM)",
    )
    p.add_argument(
        "--base-url", default=None, help="OpenAI-compatible endpoint (--summarizer openai)"
    )
    p.add_argument("--model", default=None, help="summarizer model (--summarizer openai)")
    p.add_argument(
        "--counter",
        default=None,
        help="token counter of the contextfold manager (heuristic, o200k_base ...; "
        "default: the library default). The benchmark itself always counts o200k.",
    )
    p.add_argument(
        "--no-recall",
        action="store_true",
        help="skip the recall measurement (restore every output that left the view, asked as "
        "a user would, per tool style)",
    )
    p.add_argument("--no-html", action="store_true", help="skip the HTML report")
    p.add_argument(
        "--targets",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="check contextfold's own development targets (default: only on the bundled "
        "trajectories, where they are defined)",
    )
    p.add_argument(
        "--all-columns",
        action="store_true",
        help="every measure in the table (retention, cache, summarizer, latency percentiles)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--plain", action="store_true", help="plain-text table even if rich is installed"
    )
    return p


#: Cache-aware cost limits (fraction of raw) per window (issue 11); other windows: 0.75.
COST_TARGETS = {32_000: 0.60, 128_000: 0.80}


def evaluate_targets(
    aggregates: Mapping[str, Mapping[str, StrategyTotals]], window: int = 32_000
) -> list[Target]:
    """The targets every contextfold strategy is held to at ``window``: no overflow, the task
    and the newest request kept, every removed output recoverable, files written still named,
    a cache-aware cost limit and a lower cost than every peer replayed alongside."""
    per = aggregates.get(str(window), {})
    out: list[Target] = []
    peers = {
        s: a.get("cost_vs_raw")
        for s, a in per.items()
        if s in (*PEERS, "mask") and a.get("available") and a.get("cost_vs_raw") is not None
    }
    limit = COST_TARGETS.get(window, 0.75)
    for s in CONTEXTFOLD:
        a = per.get(s, {})
        if not a.get("available"):
            continue

        def add(text: str, met: bool, value: float | None, s: str = s) -> None:
            out.append(
                {
                    "strategy": s,
                    "window": window,
                    "text": f"{s}: {text}",
                    "met": bool(met),
                    "value": value,
                }
            )

        add(f"0 overflows (got {a['overflows']})", a["overflows"] == 0, a["overflows"])
        for v, label in (
            (a.get("retention_first_pct"), "first user"),
            (a.get("retention_newest_pct"), "newest user"),
        ):
            add(f"{label} message retained in 100% of views (got {v}%)", v == 100.0, v)
        rec = a.get("recoverability_pct")
        add(
            f"recoverability 100% (got {rec if rec is not None else 'n/a: nothing left'}"
            f"{'' if rec is None else '%'} of {a['tool_outputs_left']} outputs that left)",
            rec is None or rec == 100.0,
            rec,
        )
        v = a.get("cost_vs_raw")
        if s == "progressive":  # the cost limit is the default preset's
            add(
                f"cache-aware cost <= {limit:.0%} of raw (got {_pct(v)})",
                v is not None and v <= limit,
                v,
            )
        if peers and v is not None:
            best = min(peers, key=lambda k: peers[k] or 0.0)
            add(
                f"cheaper than every peer (got {_pct(v)}; cheapest peer {best} {_pct(peers[best])})",
                all(v < (c or 0.0) for c in peers.values()),
                v,
            )
        v = a.get("artifact_recall_pct")
        add(
            f"files written still named in the view >= 99% (got {v if v is not None else 'n/a'}%)",
            v is None or v >= 99.0,
            v,
        )
        v = a.get("prepare_p50_ms")
        add(f"prepare p50 <= 1 ms (got {v} ms)", v is not None and v <= 1.0, v)
    return out


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}%"


def _cell(v: object) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 10 else f"{v:,.1f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def table_rows(
    per: Mapping[str, StrategyTotals],
    strategies: Sequence[str],
    columns: Sequence[tuple[str, str]] = TABLE_COLUMNS,
) -> list[list[str]]:
    rows = []
    for s in strategies:
        a = per.get(s, {})
        if not a.get("available"):
            rows.append([s, "unavailable", *([""] * (len(columns) - 1))])
            continue
        rows.append([s, *(_cell(a.get(k)) for k, _ in columns)])
    return rows


def print_tables(
    results: ReplayResults,
    stream: TextIO,
    plain: bool = False,
    columns: Sequence[tuple[str, str]] = USER_COLUMNS,
) -> None:
    meta = results["meta"]
    strategies = meta["strategies"]
    headers = ["strategy", *(h for _, h in columns)]
    for w in meta["windows"]:
        per = results["aggregates"][str(w)]
        title = f"window {w:,}: {len(meta['traces'])} trajectories"
        rows = table_rows(per, strategies, columns)
        if not plain:
            try:
                from rich.console import Console
                from rich.table import Table
            except ImportError:
                plain = True
        if not plain:
            table = Table(title=title)
            for h in headers:
                table.add_column(h, justify="left" if h == "strategy" else "right")
            for row in rows:
                table.add_row(*(row + [""] * (len(headers) - len(row))))
            wide = max(100, sum(max(len(h), 9) + 3 for h in headers) + 20)
            Console(file=stream, width=wide).print(table)
        else:
            print(title, file=stream)
            print(format_plain(headers, rows), file=stream)
        for s in strategies:
            a = per.get(s, {})
            if not a.get("available"):
                print(f"  {s} unavailable: {a.get('reason', 'not run')}", file=stream)
    if columns is USER_COLUMNS:
        print(COLUMN_LEGEND, file=stream)


def format_plain(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [len(h) for h in headers]
    for row in rows:
        if len(row) == len(headers):
            widths = [max(a, len(b)) for a, b in zip(widths, row, strict=False)]
    lines = [
        "  ".join(
            h.rjust(wd) if i else h.ljust(wd)
            for i, (h, wd) in enumerate(zip(headers, widths, strict=False))
        )
    ]
    for row in rows:
        if len(row) != len(headers):
            lines.append(f"{row[0].ljust(widths[0])}  {' '.join(row[1:])}")
            continue
        lines.append(
            "  ".join(
                c.rjust(wd) if i else c.ljust(wd)
                for i, (c, wd) in enumerate(zip(row, widths, strict=False))
            )
        )
    return "\n".join(lines)


#: seconds between progress lines when stderr is not a terminal
PLAIN_PROGRESS_EVERY = 5.0


class _Progress:
    """A one-line progress indicator on stderr (rich's bar when available and a terminal)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._rich: Any = None
        self._task: Any = None
        self._t0 = self._last = time.perf_counter()
        if enabled and sys.stderr.isatty():
            try:
                from rich.progress import Progress

                self._rich = Progress(transient=True)
            except ImportError:
                self._rich = None

    def __call__(self, done: int, total: int, label: str) -> None:
        if not self.enabled:
            return
        if self._rich is not None:
            if self._task is None:
                self._rich.start()
                self._task = self._rich.add_task("replay", total=total)
            self._rich.update(self._task, completed=done, description=label[:60])
            return
        now = time.perf_counter()
        secs = now - self._t0
        if sys.stderr.isatty():
            end = "\n" if done == total else ""
            sys.stderr.write(f"\r[{done}/{total}] {secs:6.1f}s {label[:70]:<70}{end}")
        elif (
            done == total
            or done * 10 // total != (done - 1) * 10 // total
            or now - self._last >= PLAIN_PROGRESS_EVERY
        ):
            # in a log: a line per 10%, and at least one every few seconds
            sys.stderr.write(f"[{done}/{total}] {secs:.1f}s {label[:70]}\n")
            self._last = now
        sys.stderr.flush()

    def start(self, text: str) -> None:
        """One line before the work starts (the first result can take a while)."""
        if self.enabled and self._rich is None:
            sys.stderr.write(f"contextfold bench: {text}\n")
            sys.stderr.flush()

    def close(self) -> None:
        if self._rich is not None and self._task is not None:
            self._rich.stop()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    windows = tuple(w for group in (args.window or [[32_000]]) for w in group)
    strategies = tuple(s.strip() for s in args.strategies.split(",") if s.strip())
    unknown = [s for s in strategies if s not in ALL_STRATEGIES]
    if unknown:
        print(
            f"contextfold bench: unknown strategies {unknown}; choose from "
            f"{', '.join(ALL_STRATEGIES)}",
            file=sys.stderr,
        )
        return 2
    if args.summarizer == "openai" and not args.model:
        print("contextfold bench: --summarizer openai needs --model", file=sys.stderr)
        return 2
    try:
        traces = resolve_traces(args.traces)
        counter()  # the exact token counter: a missing tokenizer is said once, up front
    except ContextFoldError as exc:
        print(f"contextfold bench: {exc}", file=sys.stderr)
        return 2
    if args.limit > 0:
        traces = traces[: args.limit]
    config = ReplayConfig(
        windows=windows,
        strategies=strategies,
        traces=tuple(traces),
        jobs=max(1, args.jobs),
        summarizer=SummarizerSpec(
            kind=args.summarizer,
            base_url=args.base_url,
            model=args.model,
            token_counter=args.counter,
        ),
    )
    progress = _Progress(enabled=not args.no_progress)
    runs = len(traces) * len(strategies) * len(windows)
    progress.start(
        f"replaying {len(traces)} trajectories x {len(strategies)} strategies x "
        f"{len(windows)} window(s) = {runs} runs, biggest first, {config.jobs} job(s)"
    )
    try:
        results = run_replay(config, progress=progress)
    finally:
        progress.close()
    check = args.targets if args.targets is not None else args.traces is None
    targets: list[Target] = []
    for w in windows if check else ():
        targets += evaluate_targets(results["aggregates"], w)
    presets = [s for s in strategies if s in CONTEXTFOLD]
    if not args.no_recall and presets:
        from .recall import run_recall
        from .recall_report import recall_targets

        progress = _Progress(enabled=not args.no_progress)
        try:
            recall = run_recall(
                traces,
                window=windows[0],
                preset=presets[0],
                jobs=max(1, args.jobs),
                progress=progress,
            )
        finally:
            progress.close()
        results["recall"] = recall["summary"]
        if check:
            targets += recall_targets(recall["summary"])
    results["targets"] = targets
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    print_tables(
        results,
        sys.stdout,
        plain=args.plain,
        columns=TABLE_COLUMNS if args.all_columns else USER_COLUMNS,
    )
    if results.get("recall"):
        from .recall_report import recall_rows, recall_title

        headers, rows = recall_rows(results["recall"])
        print(recall_title(results["recall"]))
        print(format_plain(headers, rows))
        for e in results["recall"].get("errors", []):
            print(f"error: recall {e}", file=sys.stderr)
    if targets:
        print("contextfold's development targets (defined on the bundled trajectories):")
    for t in targets:
        print(("  [met]    " if t["met"] else "  [MISSED] ") + t["text"])
    if config.jobs > 1:
        print(
            f"note: timings measured with {config.jobs} worker processes competing for CPU and "
            "disk; use --jobs 1 for the speed numbers"
        )
    errors = [
        f"{r['trace']} {r['strategy']}@{r['window']}: {r['error']}"
        for r in results["runs"]
        if "error" in r
    ]
    for e in errors[:20]:
        print(f"error: {e}", file=sys.stderr)
    print(f"results: {out / 'results.json'}")
    if not args.no_html:
        print(f"report:  {write_report(results, out / 'report.html', targets)}")
    return 1 if errors else 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
