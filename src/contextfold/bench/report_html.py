"""One self-contained HTML report (inline CSS and SVG, no scripts, no network)."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path

from .results import ReplayResults, ReplayRun, StrategyTotals, Target

STRATEGY_COLORS = {
    "raw": "#7f7f7f",
    "truncate": "#e69f00",
    "mask": "#56b4e9",
    "progressive": "#009e73",
    "harness": "#cc79a7",
    "anthropic-clear": "#d55e00",
    "codex-compact": "#0072b2",
    "langchain-summary": "#8c564b",
    "openhands-condenser": "#9467bd",
}
TIER_COLORS = {
    "warn": "#f0c419",
    "soft": "#0072b2",
    "full": "#d55e00",
    "emergency": "#b00020",
    "truncate": "#8a6d00",
    "clear": "#d55e00",
    "compact": "#0072b2",
    "summary": "#8c564b",
    "condense": "#9467bd",
}
_EXTRA = ["#8c564b", "#17becf", "#bcbd22", "#9467bd"]

CSS = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;
background:#fff}
h1{font-size:22px;margin:0 0 4px} h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin:18px 0 6px} .meta{color:#555;font-size:12px}
table{border-collapse:collapse;margin:8px 0;font-size:12px}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:right} th{background:#f4f4f4}
td.l,th.l{text-align:left} .miss{color:#b00020;font-weight:600} .ok{color:#087f23}
.grid{display:flex;flex-wrap:wrap;gap:10px} .card{border:1px solid #e3e3e3;padding:4px}
.card .t{font-size:11px;color:#333;max-width:560px;overflow:hidden;white-space:nowrap;
text-overflow:ellipsis} .legend span{display:inline-block;margin-right:14px;font-size:12px}
.sw{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-2px}
"""


def _color(strategy: str, k: int) -> str:
    return STRATEGY_COLORS.get(strategy, _EXTRA[k % len(_EXTRA)])


def _fmt(v: object, digits: int = 1) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    if isinstance(v, int):
        return f"{v:,}"
    return html.escape(str(v))


def _legend(strategies: Sequence[str], tiers: bool) -> str:
    parts = [
        f'<span><i class="sw" style="background:{_color(s, k)}"></i>{html.escape(s)}</span>'
        for k, s in enumerate(strategies)
    ]
    parts.append('<span><i class="sw" style="background:#d00;height:2px"></i>window</span>')
    if tiers:
        parts += [
            f'<span><i class="sw" style="background:{c};border-radius:6px"></i>{t}</span>'
            for t, c in TIER_COLORS.items()
        ]
    return f'<div class="legend">{"".join(parts)}</div>'


def timeline_svg(
    series: Mapping[str, Sequence[int]],
    events: Mapping[str, Sequence[Sequence[int | str]]],
    window: int,
    strategies: Sequence[str],
    width: int = 560,
    height: int = 200,
) -> str:
    """View tokens per call, one line per strategy, the window as a dashed line and
    compaction markers (contextfold tiers and truncations) coloured by tier."""
    pad_l, pad_r, pad_t, pad_b = 48, 8, 8, 22
    w, h = width - pad_l - pad_r, height - pad_t - pad_b
    n = max((len(v) for v in series.values()), default=0)
    peak = max((max(v) for v in series.values() if v), default=0)
    ymax = max(window * 1.15, min(peak * 1.05, window * 4.0), 1.0)

    def x(i: int) -> float:
        return pad_l + (w * i / max(1, n - 1))

    def y(v: float) -> float:
        return pad_t + h - h * min(v, ymax) / ymax

    out = [
        f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">',
        f'<rect x="{pad_l}" y="{pad_t}" width="{w}" height="{h}" fill="#fafafa" stroke="#ccc"/>',
    ]
    for frac in (0.0, 0.5, 1.0):
        v = ymax * frac
        out.append(
            f'<text x="{pad_l - 4}" y="{y(v) + 4:.1f}" font-size="10" text-anchor="end" '
            f'fill="#555">{v / 1000:.0f}K</text>'
        )
    out.append(
        f'<text x="{pad_l + w / 2:.0f}" y="{height - 4}" font-size="10" text-anchor="middle" '
        f'fill="#555">model call (1..{n})</text>'
    )
    wy = y(window)
    out.append(
        f'<line x1="{pad_l}" x2="{pad_l + w}" y1="{wy:.1f}" y2="{wy:.1f}" stroke="#d00" '
        f'stroke-width="1.2" stroke-dasharray="5,3"/>'
    )
    for k, s in enumerate(strategies):
        vals = series.get(s)
        if not vals:
            continue
        pts = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(vals))
        sw = '3.5" stroke-opacity="0.55' if s == "raw" else "1.5"
        out.append(
            f'<polyline fill="none" stroke="{_color(s, k)}" stroke-width="{sw}" points="{pts}">'
            f"<title>{html.escape(s)}</title></polyline>"
        )
    for s in strategies:
        vals = series.get(s) or []
        for call, tier in events.get(s, ()):
            color = TIER_COLORS.get(str(tier))
            if color is None or not (0 <= int(call) < len(vals)):
                continue
            cx, cy = x(int(call)), y(vals[int(call)])
            rad = 2.0 if tier == "warn" else 3.5
            out.append(
                f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{rad}" fill="{color}" stroke="#fff" '
                f'stroke-width="0.8"><title>{html.escape(s)}: {html.escape(str(tier))} '
                f"at call {int(call) + 1}</title></circle>"
            )
    out.append("</svg>")
    return "".join(out)


def billed_svg(
    view: Sequence[int],
    cached: Sequence[int],
    window: int,
    color: str,
    ymax: float,
    width: int = 360,
    height: int = 150,
) -> str:
    """One strategy on one trajectory: the view per call (line) and the part of it billed at
    the full rate because it was not a cached prefix (bars: spikes are cache misses)."""
    pad_l, pad_r, pad_t, pad_b = 40, 6, 6, 18
    w, h = width - pad_l - pad_r, height - pad_t - pad_b
    n = max(1, len(view))

    def x(i: float) -> float:
        return pad_l + w * i / n

    def y(v: float) -> float:
        return pad_t + h - h * min(v, ymax) / ymax

    out = [
        f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">',
        f'<rect x="{pad_l}" y="{pad_t}" width="{w}" height="{h}" fill="#fafafa" stroke="#ccc"/>',
        f'<text x="{pad_l - 4}" y="{pad_t + 9}" font-size="10" text-anchor="end" fill="#555">'
        f"{ymax / 1000:.0f}K</text>",
        f'<text x="{pad_l - 4}" y="{pad_t + h}" font-size="10" text-anchor="end" fill="#555">0'
        "</text>",
    ]
    bw = max(0.6, w / n - 0.4)
    for i, (v, c) in enumerate(zip(view, cached, strict=False)):
        billed = v - c
        if billed <= 0:
            continue
        out.append(
            f'<rect x="{x(i):.1f}" y="{y(billed):.1f}" width="{bw:.1f}" '
            f'height="{pad_t + h - y(billed):.1f}" fill="#444" fill-opacity="0.45"/>'
        )
    pts = " ".join(f"{x(i + 0.5):.1f},{y(v):.1f}" for i, v in enumerate(view))
    out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.6" points="{pts}"/>')
    wy = y(window)
    out.append(
        f'<line x1="{pad_l}" x2="{pad_l + w}" y1="{wy:.1f}" y2="{wy:.1f}" stroke="#d00" '
        f'stroke-width="1" stroke-dasharray="4,3"/>'
    )
    out.append(
        f'<text x="{pad_l + w / 2:.0f}" y="{height - 4}" font-size="10" text-anchor="middle" '
        f'fill="#555">model call (1..{len(view)})</text></svg>'
    )
    return "".join(out)


def per_strategy_section(runs: Sequence[ReplayRun], window: int, strategies: Sequence[str]) -> str:
    """Small multiples on the longest trajectory: one timeline per strategy."""
    mine = [r for r in runs if r["window"] == window and "calls" in r]
    if not mine:
        return ""
    longest = max(mine, key=lambda r: (r["calls"], r["trace"]))["trace"]
    by = {r["strategy"]: r for r in mine if r["trace"] == longest}
    peak = max((max(r["view_tokens"], default=0) for r in by.values()), default=0)
    ymax = max(window * 1.1, min(peak * 1.05, window * 4.0), 1.0)
    parts = [
        "<h3>Per strategy: view tokens per call (line) and tokens billed at the full rate "
        "(bars) on the longest trajectory</h3>",
        f'<div class="meta">{html.escape(longest)}. A bar as tall as the line is a call whose '
        "prefix cache missed; low bars mean the call mostly re-read a cached prefix at 0.1.</div>",
        '<div class="grid">',
    ]
    for k, s in enumerate(strategies):
        r = by.get(s)
        if r is None:
            continue
        cost = float(r.get("cache_cost", 0.0))
        parts.append(
            f'<div class="card"><div class="t">{html.escape(s)}: cost {cost / 1000:,.0f}K, '
            f"{r.get('overflows', 0)} calls over the window</div>"
            f"{billed_svg(r['view_tokens'], r['cached_tokens'], window, _color(s, k), ymax)}"
            "</div>"
        )
    parts.append("</div>")
    return "".join(parts)


def label_room(labels: Sequence[str], font_px: int = 12) -> int:
    """Pixels left of the bars for the widest label at ``font_px`` (with a margin)."""
    return 16 + int(max((len(x) for x in labels), default=4) * font_px * 0.6 + 0.5)


def bars_svg(
    values: Mapping[str, float | None], title: str, strategies: Sequence[str], width: int = 560
) -> str:
    """Horizontal bars, one per strategy, labelled with the value and the ratio to raw."""
    rows = [s for s in strategies if values.get(s) is not None]
    # room on the left for the longest name (about 7.2 px a character at 12 px), never cut off
    bar_h, gap, pad_t = 22, 8, 24
    pad_l = label_room(rows)
    width = max(width, pad_l + 320)
    height = pad_t + len(rows) * (bar_h + gap) + 8
    vmax = max((float(values[s] or 0) for s in rows), default=1.0) or 1.0
    raw = values.get("raw")
    out = [
        f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">',
        f'<text x="0" y="15" font-size="13" font-weight="600">{html.escape(title)}</text>',
    ]
    span = width - pad_l - 150
    for k, s in enumerate(rows):
        v = float(values[s] or 0)
        top = pad_t + k * (bar_h + gap)
        bw = max(1.0, span * v / vmax)
        label = f"{v / 1e6:,.2f}M"
        if raw:
            label += f"  ({v / raw:.0%} of raw)"
        out.append(
            f'<text x="{pad_l - 6}" y="{top + 15}" font-size="12" text-anchor="end">'
            f"{html.escape(s)}</text>"
            f'<rect x="{pad_l}" y="{top}" width="{bw:.1f}" height="{bar_h}" '
            f'fill="{_color(s, strategies.index(s))}"/>'
            f'<text x="{pad_l + bw + 6:.1f}" y="{top + 15}" font-size="11">{label}</text>'
        )
    out.append("</svg>")
    return "".join(out)


_COLUMNS: list[tuple[str, str, int]] = [
    ("cumulative_input_tokens", "cumulative input", 0),
    ("input_vs_raw", "input / raw", 3),
    ("cache_cost", "cache-aware cost", 0),
    ("cost_vs_raw", "cost / raw", 3),
    ("cost_vs_mask", "cost / mask", 3),
    ("peak_view_tokens", "peak view", 0),
    ("overflows", "overflows", 0),
    ("compactions", "compactions", 0),
    ("summarizer_input_tokens", "summ. in", 0),
    ("retention_first_pct", "first user %", 1),
    ("retention_newest_pct", "newest user %", 1),
    ("recoverability_pct", "recoverable %", 1),
    ("artifact_recall_pct", "artifact recall %", 1),
    ("prepare_p50_ms", "prepare p50 ms", 3),
    ("prepare_p95_ms", "prepare p95 ms", 3),
    ("compaction_p50_ms", "compaction p50 ms", 2),
]


def summary_table(per: Mapping[str, StrategyTotals], strategies: Sequence[str]) -> str:
    head = "".join(f"<th>{html.escape(label)}</th>" for _, label, _ in _COLUMNS)
    rows = [f'<table><tr><th class="l">strategy</th>{head}<th class="l">tiers</th></tr>']
    for s in strategies:
        agg = per.get(s, {})
        if not agg.get("available"):
            reason = html.escape(str(agg.get("reason", "not run")))
            rows.append(
                f'<tr><td class="l">{html.escape(s)}</td>'
                f'<td class="l" colspan="{len(_COLUMNS) + 1}">unavailable: {reason}</td></tr>'
            )
            continue
        cells = "".join(f"<td>{_fmt(agg.get(key), d)}</td>" for key, _, d in _COLUMNS)
        tiers = ", ".join(f"{k} {v}" for k, v in sorted(agg.get("tiers", {}).items()))
        rows.append(
            f'<tr><td class="l">{html.escape(s)}</td>{cells}'
            f'<td class="l">{html.escape(tiers) or "-"}</td></tr>'
        )
    rows.append("</table>")
    return "".join(rows)


def render(results: ReplayResults, targets: Sequence[Target] = ()) -> str:
    meta = results.get("meta", {})
    strategies: list[str] = list(meta.get("strategies", []))
    runs: list[ReplayRun] = list(results.get("runs", []))
    parts = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        "<title>contextfold replay benchmark</title>",
        f"<style>{CSS}</style></head><body>",
        "<h1>contextfold replay benchmark</h1>",
        f'<div class="meta">{len(meta.get("traces", []))} trajectories · windows '
        f"{', '.join(str(w) for w in meta.get('windows', []))} · summarizer "
        f"{html.escape(str(meta.get('summarizer', '')))} · exact {meta.get('token_encoding', '')}"
        f" tokens · cached prefix billed at {meta.get('cached_rate', 0.1)} · "
        f"{meta.get('seconds', 0)} s</div>",
    ]
    for w in meta.get("windows", []):
        per = results.get("aggregates", {}).get(str(w), {})
        parts.append(f"<h2>Window {int(w):,} tokens</h2>")
        parts.append(summary_table(per, strategies))
        for t in targets:
            if int(t.get("window", w)) != int(w):
                continue
            cls = "ok" if t.get("met") else "miss"
            parts.append(
                f'<div class="{cls}">{"✓" if t.get("met") else "✗"} '
                f"{html.escape(str(t.get('text', '')))}</div>"
            )
        avail = [s for s in strategies if per.get(s, {}).get("available")]
        parts.append('<div class="grid">')
        parts.append(
            bars_svg(
                {s: per[s]["cache_cost"] for s in avail},
                "Cache-aware cost (tokens, all trajectories)",
                strategies,
            )
        )
        parts.append(
            bars_svg(
                {s: per[s]["cumulative_input_tokens"] for s in avail},
                "Cumulative input tokens (all trajectories)",
                strategies,
            )
        )
        parts.append("</div>")
        parts.append(per_strategy_section(runs, int(w), strategies))
        parts.append("<h3>Per trajectory: view tokens per model call</h3>")
        parts.append(_legend(strategies, tiers=True))
        traces = sorted({r["trace"] for r in runs if r["window"] == w})
        parts.append('<div class="grid">')
        for trace in traces:
            mine = {
                r["strategy"]: r
                for r in runs
                if r["window"] == w and r["trace"] == trace and "calls" in r
            }
            series = {s: r["view_tokens"] for s, r in mine.items()}
            events = {s: r["events"] for s, r in mine.items() if s != "mask"}
            parts.append(
                f'<div class="card"><div class="t" title="{html.escape(trace)}">'
                f"{html.escape(trace)}</div>"
                f"{timeline_svg(series, events, int(w), strategies)}</div>"
            )
        parts.append("</div>")
    if results.get("recall"):
        from .recall_report import recall_html

        parts.append(recall_html(results["recall"]))
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(results: ReplayResults, path: Path, targets: Sequence[Target] = ()) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(results, targets), encoding="utf-8")
    return path
