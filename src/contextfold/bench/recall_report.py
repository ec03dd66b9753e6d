"""The recall measurement in the benchmark's outputs: targets, the terminal table, HTML."""

from __future__ import annotations

import html

from .results import RecallSummary, Target

TARGET_TOP1 = 0.95
TARGET_TOP5 = 0.99
TARGET_P50_MS = 20.0


def recall_targets(summary: RecallSummary) -> list[Target]:
    """Issue 11 targets: top-1 >= 0.95 and top-5 >= 0.99 per tool style, restore p50 <= 20 ms."""
    out: list[Target] = []
    window = summary.get("window", 32_000)
    for style, got in summary.get("by_style", {}).items():
        if not got.get("questions"):
            continue
        for key, v, goal in (
            ("top1", got.get("top1"), TARGET_TOP1),
            ("top5", got.get("top5"), TARGET_TOP5),
        ):
            out.append(
                {
                    "strategy": f"recall/{style}",
                    "window": window,
                    "text": f"recall {style} tools: {key} >= {goal} (got {v} over "
                    f"{got['questions']} questions)",
                    "met": v is not None and v >= goal,
                    "value": v,
                }
            )
    for kind, got in summary.get("natural", {}).items():
        for key, v, goal in (
            ("top1", got.get("top1"), TARGET_TOP1),
            ("top5", got.get("top5"), TARGET_TOP5),
        ):
            out.append(
                {
                    "strategy": f"recall/natural/{kind}",
                    "window": window,
                    "text": f"recall natural questions ({kind}): {key} >= {goal} (got {v} over "
                    f"{got['questions']} questions)",
                    "met": v is not None and v >= goal,
                    "value": v,
                }
            )
    p50 = summary.get("restore_p50_ms")
    out.append(
        {
            "strategy": "recall",
            "window": window,
            "text": f"restore p50 <= {TARGET_P50_MS:g} ms (got {p50} ms)",
            "met": p50 is not None and p50 <= TARGET_P50_MS,
            "value": p50,
        }
    )
    return out


def recall_rows(summary: RecallSummary) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the recall table (per tool style, then per question kind)."""
    headers = ["tool style / question", "questions", "top-1", "top-5"]
    rows: list[list[str]] = []
    natural = [(f"natural/{k}", v) for k, v in summary.get("natural", {}).items()]
    natural += [(f"paraphrase/{k}", v) for k, v in summary.get("paraphrase", {}).items()]
    named = [*summary.get("by_style", {}).items(), *summary.get("by_kind", {}).items()]
    for name, got in [*named, *natural]:
        if not got.get("questions"):
            continue
        rows.append(
            [
                name,
                str(got["questions"]),
                f"{got['top1']:.3f}" if got.get("top1") is not None else "n/a",
                f"{got['top5']:.3f}" if got.get("top5") is not None else "n/a",
            ]
        )
    return headers, rows


def recall_title(summary: RecallSummary) -> str:
    return (
        f"recall of outputs that left the view ({summary.get('preset')} preset, window "
        f"{int(summary.get('window', 0)):,}; {summary.get('outputs_left', 0)} outputs, "
        f"restore p50 {summary.get('restore_p50_ms')} ms, p95 {summary.get('restore_p95_ms')} ms)"
    )


def recall_html(summary: RecallSummary) -> str:
    """The recall section of the HTML report."""
    headers, rows = recall_rows(summary)
    out = [f"<h2>{html.escape(recall_title(summary))}</h2>", "<table><tr>"]
    out += [
        f'<th class="{"l" if i == 0 else ""}">{html.escape(h)}</th>' for i, h in enumerate(headers)
    ]
    out.append("</tr>")
    for row in rows:
        cells = "".join(
            f'<td class="{"l" if i == 0 else ""}">{html.escape(c)}</td>' for i, c in enumerate(row)
        )
        out.append(f"<tr>{cells}</tr>")
    out.append("</table>")
    for t in recall_targets(summary):
        cls = "ok" if t["met"] else "miss"
        out.append(f'<div class="{cls}">{"✓" if t["met"] else "✗"} {html.escape(t["text"])}</div>')
    misses = summary.get("misses") or []
    if misses:
        out.append(f"<h3>First {len(misses)} questions whose answer was not the top hit</h3><ul>")
        for m in misses:
            rank = m.get("rank") or "not in top 5"
            out.append(
                f"<li>{html.escape(str(m.get('query', '')))} <small>(rank {rank}; "
                f"{html.escape(str(m.get('trace', ''))[:60])}, {m.get('set')})</small></li>"
            )
        out.append("</ul>")
    return "\n".join(out)


__all__ = ["recall_html", "recall_rows", "recall_targets", "recall_title"]
