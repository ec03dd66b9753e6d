"""The replay loop: one trajectory, one strategy, one window -> per-call series and totals.

Before each assistant message ``i`` the strategy receives ``messages[prev:i]`` and produces
the view for that call. Per call we record the view's exact tokens, the cached prefix against
the previous view, the cache-aware cost, what was compacted and how long ``prepare`` took;
per run we count retention, recoverability (tool outputs whose exact text left the view,
restored byte-exact through the strategy, checked when they leave and again at the end) and
artifact recall (files edited so far that the view names, after every compaction or rewrite).
"""

from __future__ import annotations

import json
import multiprocessing
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ContextFoldError
from ..jsontypes import JSONObject
from .metrics import (
    MsgDict,
    TokenCounter,
    cached_prefix_tokens,
    call_cost,
    content_text,
    is_extension,
    named_share,
    percentile,
    tool_call_edits,
    view_text,
)
from .results import Aggregates, ReplayResults, ReplayRun, StrategyTotals
from .strategies import (
    ALL_STRATEGIES,
    Strategy,
    StrategyUnavailable,
    SummarizerSpec,
    make_strategy,
)

_COUNTER: TokenCounter | None = None


def counter() -> TokenCounter:
    """The process-wide token counter (its cache is shared by every run in the process)."""
    global _COUNTER
    if _COUNTER is None:
        _COUNTER = TokenCounter()
    return _COUNTER


def default_traces_dir() -> Path:
    """The bundled trajectories: ``benchmarks/traces`` of the source checkout this module runs
    from, else the copy an installed wheel carries (``contextfold/_bench_traces``), else the
    same folder under the current directory. ``resolve_traces`` says clearly when none exists."""
    root = Path(__file__).resolve().parents[3]
    candidate = root / "benchmarks" / "traces"
    if candidate.is_dir():
        return candidate
    installed = Path(__file__).resolve().parents[1] / "_bench_traces"
    if installed.is_dir():
        return installed
    return Path.cwd() / "benchmarks" / "traces"


def resolve_traces(specs: Sequence[str | Path] | None) -> list[Path]:
    """Folders (their ``*.json``, sorted) and files, in the order given, without duplicates."""
    items = list(specs) if specs else [default_traces_dir()]
    out: list[Path] = []
    for item in items:
        path = Path(item)
        if path.is_dir():
            found = sorted(path.glob("*.json"))
        elif path.is_file():
            found = [path]
        else:
            raise ContextFoldError(f"trace path {str(path)!r} is neither a folder nor a file")
        for f in found:
            if f not in out:
                out.append(f)
    if not out:
        raise ContextFoldError(f"no *.json traces found in {[str(i) for i in items]}")
    return out


def load_trace(path: Path) -> list[JSONObject]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ContextFoldError(f"cannot read trace {path}: {exc}") from exc
    if not isinstance(data, list) or not all(isinstance(m, dict) for m in data):
        raise ContextFoldError(f"trace {path} is not a JSON list of message objects")
    return data


@dataclass(frozen=True, kw_only=True, slots=True)
class ReplayConfig:
    windows: tuple[int, ...] = (32_000,)
    strategies: tuple[str, ...] = ALL_STRATEGIES
    traces: tuple[Path, ...] = ()
    jobs: int = 1
    summarizer: SummarizerSpec = field(default_factory=SummarizerSpec)


def replay_one(
    messages: Sequence[MsgDict],
    strategy_name: str,
    window: int,
    summarizer: SummarizerSpec | None = None,
    *,
    factory: Callable[[int], Strategy] | None = None,
) -> ReplayRun:
    """Replay one trajectory with one strategy at one window; returns the run's dict.
    ``factory(window)`` builds the strategy instead of its name (e.g. a custom config)."""
    tc = counter()
    strat = factory(window) if factory else make_strategy(strategy_name, window, tc, summarizer)
    first_user = next(
        (content_text(m.get("content")) for m in messages if m.get("role") == "user"), None
    )
    view_tokens: list[int] = []
    cached: list[int] = []
    costs: list[float] = []
    events: list[list[int | str]] = []
    prepare_ms: list[float] = []
    compaction_ms: list[float] = []
    tiers: dict[str, int] = {}
    summ_in = summ_out = 0
    keep_first = keep_newest = 0
    originals: dict[str, str] = {}
    left: dict[str, bool] = {}  # tool_call_id -> restored byte-exact when it left
    named = expected = art_events = 0
    edited: list[str] = []
    newest_user: str | None = None
    prev_view: list[MsgDict] | None = None
    prev_i = 0
    try:
        for i, msg in enumerate(messages):
            if msg.get("role") != "assistant" or i == 0:
                continue
            new = messages[prev_i:i]
            newest_user = _note_new(new, originals, edited) or newest_user
            prev_i = i
            strat.add(new)
            t0 = time.perf_counter()
            step = strat.prepare()
            ms = (time.perf_counter() - t0) * 1000
            view = step.view
            n = tc.view(view)
            c = cached_prefix_tokens(prev_view, view, tc)
            call = len(view_tokens)
            view_tokens.append(n)
            cached.append(c)
            costs.append(call_cost(n, c))
            prepare_ms.append(ms)
            summ_in += step.summarizer_input_tokens
            summ_out += step.summarizer_output_tokens
            compacted = bool(step.tier) and step.tier != "warn"  # warn only reports
            if step.tier:
                tiers[step.tier] = tiers.get(step.tier, 0) + 1
                events.append([call, step.tier])
            if compacted:
                compaction_ms.append(ms)
            # retention
            contents = [content_text(m.get("content")) for m in view]
            if first_user is not None and _present(first_user, contents):
                keep_first += 1
            if newest_user is not None and _present(newest_user, contents):
                keep_newest += 1
            _note_left(strat, view, contents, originals, left)
            # artifact recall after each compaction / rewrite
            if compacted or not is_extension(prev_view, view):
                art_events += 1
                got, total = named_share(edited, view_text(view))
                named += got
                expected += total
            prev_view = view
        recoverable = sum(
            1 for tid, ok in left.items() if ok and strat.recover(tid) == originals[tid]
        )
    finally:
        strat.close()
    calls = len(view_tokens)
    return {
        "strategy": strategy_name,
        "window": window,
        "calls": calls,
        "view_tokens": view_tokens,
        "cached_tokens": cached,
        "events": events,
        "cumulative_input_tokens": sum(view_tokens),
        "cached_input_tokens": sum(cached),
        "cache_cost": round(sum(costs) + summ_in + summ_out, 1),
        "peak_view_tokens": max(view_tokens, default=0),
        "overflows": sum(1 for v in view_tokens if v > window),
        "compactions": len(compaction_ms),
        "tiers": tiers,
        "summarizer_input_tokens": summ_in,
        "summarizer_output_tokens": summ_out,
        "retained_first_user": keep_first,
        "retained_newest_user": keep_newest,
        "tool_outputs": len(originals),
        "tool_outputs_left": len(left),
        "tool_outputs_recoverable": recoverable,
        "artifact_events": art_events,
        "artifact_named": named,
        "artifact_expected": expected,
        "edited_files": edited,
        "prepare_ms": [round(x, 4) for x in prepare_ms],
        "compaction_ms": [round(x, 4) for x in compaction_ms],
    }


def _note_new(new: Sequence[MsgDict], originals: dict[str, str], edited: list[str]) -> str | None:
    """Record the tool outputs and edited files of the messages just added; the newest user
    request among them (None when there is none)."""
    newest_user: str | None = None
    for m in new:
        role = m.get("role")
        if role == "user":
            newest_user = content_text(m.get("content"))
        elif role == "tool" and m.get("tool_call_id"):
            text = content_text(m.get("content"))
            if text:
                originals[str(m["tool_call_id"])] = text
        elif role == "assistant":
            edited.extend(f for f in tool_call_edits(m) if f not in edited)
    return newest_user


def _note_left(
    strat: Strategy,
    view: Sequence[MsgDict],
    contents: Sequence[str],
    originals: dict[str, str],
    left: dict[str, bool],
) -> None:
    """Tool outputs that left the view now, each with whether it is restored byte-exact."""
    in_view = {
        str(m.get("tool_call_id")): t
        for m, t in zip(view, contents, strict=False)
        if m.get("role") == "tool"
    }
    joined: str | None = None
    for tid, orig in originals.items():
        if tid in left or in_view.get(tid) == orig:
            continue
        if joined is None:
            joined = "\n".join(contents)
        if orig in joined:
            continue
        left[tid] = strat.recover(tid) == orig


def _present(text: str, contents: Sequence[str]) -> bool:
    return any(text == c for c in contents) or any(text in c for c in contents)


def _task(args: tuple[str, str, int, SummarizerSpec]) -> ReplayRun:
    path, strategy, window, summ = args
    base: ReplayRun = {"trace": Path(path).name, "strategy": strategy, "window": window}
    try:
        run = replay_one(load_trace(Path(path)), strategy, window, summ)
    except StrategyUnavailable as exc:
        return {**base, "unavailable": str(exc)}
    except Exception as exc:  # one broken run must not kill the benchmark
        return {**base, "error": f"{type(exc).__name__}: {exc}"}
    run.update(base)
    return run


def run_replay(
    config: ReplayConfig,
    progress: Callable[[int, int, str], None] | None = None,
) -> ReplayResults:
    """Run every (trace, window, strategy) and return ``{"meta", "runs", "aggregates"}``."""
    traces = list(config.traces) or resolve_traces(None)
    # Biggest traces first so the pool is not left waiting on one long tail.
    order = sorted(traces, key=lambda p: -p.stat().st_size)
    tasks = [
        (str(p), s, w, config.summarizer)
        for p in order
        for w in config.windows
        for s in config.strategies
    ]
    runs: list[ReplayRun] = []
    done = 0

    def tick(run: ReplayRun) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, len(tasks), f"{run['strategy']} @{run['window']} {run['trace'][:48]}")

    t0 = time.perf_counter()
    if config.jobs <= 1:
        for task in tasks:
            run = _task(task)
            runs.append(run)
            tick(run)
    else:
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(processes=min(config.jobs, len(tasks))) as pool:
            for run in pool.imap_unordered(_task, tasks):
                runs.append(run)
                tick(run)
    rank = {s: k for k, s in enumerate(config.strategies)}
    runs.sort(key=lambda r: (r["window"], rank.get(r["strategy"], 99), r["trace"]))
    return {
        "meta": {
            "windows": list(config.windows),
            "strategies": list(config.strategies),
            "traces": [p.name for p in traces],
            "summarizer": config.summarizer.kind,
            "manager_token_counter": config.summarizer.token_counter or "default",
            "jobs": config.jobs,
            "seconds": round(time.perf_counter() - t0, 2),
            "python": sys.version.split()[0],
            "token_encoding": "o200k_base",
            "cached_rate": 0.1,
        },
        "runs": runs,
        "aggregates": aggregate(runs, config.windows, config.strategies),
    }


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 4) if b else None


def aggregate(
    runs: Iterable[ReplayRun], windows: Sequence[int], strategies: Sequence[str]
) -> Aggregates:
    """Totals per window and strategy; ratios against ``raw``/``mask`` over the traces both
    completed."""
    runs = list(runs)
    out: Aggregates = {}
    for w in windows:
        per: dict[str, StrategyTotals] = {}
        ok_by: dict[str, dict[str, ReplayRun]] = {}
        for s in strategies:
            mine = [r for r in runs if r["window"] == w and r["strategy"] == s]
            ok = [r for r in mine if "calls" in r]
            ok_by[s] = {r["trace"]: r for r in ok}
            if not ok:
                reason = next((r.get("unavailable") or r.get("error") for r in mine), "no runs")
                per[s] = {"available": False, "reason": reason, "runs": 0}
                continue
            views = sum(r["calls"] for r in ok)
            left = sum(r["tool_outputs_left"] for r in ok)
            expected = sum(r["artifact_expected"] for r in ok)
            prep = [x for r in ok for x in r["prepare_ms"]]
            comp = [x for r in ok for x in r["compaction_ms"]]
            tiers: dict[str, int] = {}
            for r in ok:
                for k, v in r["tiers"].items():
                    tiers[k] = tiers.get(k, 0) + v
            per[s] = {
                "available": True,
                "runs": len(ok),
                "errors": [f"{r['trace']}: {r['error']}" for r in mine if "error" in r],
                "calls": views,
                "cumulative_input_tokens": sum(r["cumulative_input_tokens"] for r in ok),
                "cache_cost": round(sum(r["cache_cost"] for r in ok), 1),
                "peak_view_tokens": max(r["peak_view_tokens"] for r in ok),
                "overflows": sum(r["overflows"] for r in ok),
                "compactions": sum(r["compactions"] for r in ok),
                "tiers": tiers,
                "summarizer_input_tokens": sum(r["summarizer_input_tokens"] for r in ok),
                "summarizer_output_tokens": sum(r["summarizer_output_tokens"] for r in ok),
                "retention_first_pct": round(
                    100 * sum(r["retained_first_user"] for r in ok) / views, 2
                )
                if views
                else None,
                "retention_newest_pct": round(
                    100 * sum(r["retained_newest_user"] for r in ok) / views, 2
                )
                if views
                else None,
                "tool_outputs_left": left,
                "recoverability_pct": round(
                    100 * sum(r["tool_outputs_recoverable"] for r in ok) / left, 2
                )
                if left
                else None,
                "artifact_events": sum(r["artifact_events"] for r in ok),
                "artifact_recall_pct": round(
                    100 * sum(r["artifact_named"] for r in ok) / expected, 2
                )
                if expected
                else None,
                "prepare_p50_ms": round(percentile(prep, 50), 4),
                "prepare_p95_ms": round(percentile(prep, 95), 4),
                "compaction_p50_ms": round(percentile(comp, 50), 3) if comp else None,
                "compaction_mean_ms": round(sum(comp) / len(comp), 3) if comp else None,
            }
        for s in strategies:
            if not per[s].get("available"):
                continue
            for ref in ("raw", "mask"):
                if ref not in ok_by or not ok_by[ref] or ref == s:
                    continue
                common = set(ok_by[s]) & set(ok_by[ref])
                mine_c = sum(ok_by[s][t]["cache_cost"] for t in common)
                ref_c = sum(ok_by[ref][t]["cache_cost"] for t in common)
                if ref == "mask":
                    per[s]["cost_vs_mask"] = _ratio(mine_c, ref_c)
                    continue
                per[s]["cost_vs_raw"] = _ratio(mine_c, ref_c)
                mine_i = sum(ok_by[s][t]["cumulative_input_tokens"] for t in common)
                ref_i = sum(ok_by[ref][t]["cumulative_input_tokens"] for t in common)
                per[s]["input_vs_raw"] = _ratio(mine_i, ref_i)
        out[str(w)] = per
    return out
