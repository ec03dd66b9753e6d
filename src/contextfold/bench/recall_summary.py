"""The figures of the recall bench (:mod:`.recall`): top-1 / top-5 per tool style and per
question kind (exact, natural, paraphrased), restore latency, what the semantic vectors cost,
and the first misses."""

from __future__ import annotations

from collections.abc import Sequence

from ..evidence import semantic
from .metrics import percentile
from .results import (
    RecallFigures,
    RecallMiss,
    RecallQuestion,
    RecallRates,
    RecallRun,
    VectorTotals,
)

K = 5
#: Questions that name the call (its command, tool and arguments, file, error type).
EXACT_KINDS = ("call", "path", "error", "ordinal")
MAX_SHOWN_MISSES = 40


def summarize(runs: Sequence[RecallRun]) -> RecallFigures:
    """top-1 / top-5 per tool style and per question kind, restore latency, the misses."""
    qs = [(r, q) for r in runs if "questions" in r for q in r["questions"]]

    def rates(items: Sequence[RecallQuestion]) -> RecallRates:
        n = len(items)
        top1 = sum(1 for q in items if q["rank"] == 1)
        top5 = sum(1 for q in items if q["rank"] is not None and q["rank"] <= K)
        return {
            "questions": n,
            "top1": round(top1 / n, 4) if n else None,
            "top5": round(top5 / n, 4) if n else None,
        }

    from .natural import NATURAL_KINDS
    from .paraphrase import PARAPHRASE_KINDS

    exact = [q for _, q in qs if q["kind"] in EXACT_KINDS]
    by_style = {s: rates([q for q in exact if q["style"] == s]) for s in ("shell", "file")}
    by_kind = {
        f"{s}/{k}": rates([q for _, q in qs if q["style"] == s and q["kind"] == k])
        for s in ("shell", "file")
        for k in EXACT_KINDS
    }
    natural = {k: rates([q for _, q in qs if q["kind"] == k]) for k in NATURAL_KINDS}
    natural["all"] = rates([q for _, q in qs if q["kind"] in NATURAL_KINDS])
    para = {k: rates([q for _, q in qs if q["kind"] == f"para/{k}"]) for k in PARAPHRASE_KINDS}
    para["all"] = rates([q for _, q in qs if q["kind"].startswith("para/")])
    para["zh"] = rates([q for _, q in qs if q["kind"].startswith("para/") and _zh(q["query"])])
    ms = [q["ms"] for _, q in qs]
    sem = [q.get("sem_ms", 0.0) for _, q in qs]
    bare = [q["ms"] - q.get("sem_ms", 0.0) for _, q in qs]
    misses = [_miss(r, q) for r, q in qs if q["rank"] != 1][:MAX_SHOWN_MISSES]
    return {
        "by_style": by_style,
        "by_kind": {k: v for k, v in by_kind.items() if v["questions"]},
        "natural": {k: v for k, v in natural.items() if v["questions"]},
        "paraphrase": {k: v for k, v in para.items() if v["questions"]},
        "semantic": semantic.enabled(),
        **_vector_totals(runs),
        "restore_p50_ms": round(percentile(ms, 50), 3) if ms else None,
        "restore_p95_ms": round(percentile(ms, 95), 3) if ms else None,
        # the same restores less the time spent on the question's vector (same run, so the
        # difference is what semantic retrieval adds, not the machine's load between runs)
        "restore_p50_less_semantic_ms": round(percentile(bare, 50), 3) if bare else None,
        "semantic_ms_mean": round(sum(sem) / len(sem), 3) if sem else None,
        "semantic_asked": sum(1 for s in sem if s > 0),
        "outputs_left": sum(int(r.get("left", 0)) for r in runs),
        "errors": [f"{r['trace']} ({r['set']}): {r['error']}" for r in runs if "error" in r],
        "misses": misses,
    }


def _miss(run: RecallRun, question: RecallQuestion) -> RecallMiss:
    return {"trace": run["trace"], "set": run["set"], **question}


def _zh(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


def _vector_totals(runs: Sequence[RecallRun]) -> VectorTotals:
    """Index time and disk per output vector over the runs (None: no vector computed)."""
    n = sum(int(r.get("vectors", 0)) for r in runs)
    secs = sum(float(r.get("vector_seconds", 0.0)) for r in runs)
    size = sum(int(r.get("vector_bytes", 0)) for r in runs)
    return {
        "vectors": n,
        "index_ms_per_output": round(1000 * secs / n, 3) if n else None,
        "disk_bytes_per_output": round(size / n, 1) if n else None,
    }


__all__ = ["EXACT_KINDS", "MAX_SHOWN_MISSES", "K", "summarize"]
