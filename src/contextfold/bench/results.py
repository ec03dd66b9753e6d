"""The shapes of the benchmark's results: the rows ``results.json`` holds, typed.

A replay run (:class:`ReplayRun`) is one trajectory, one strategy, one window; a run that could
not be made carries ``unavailable`` or ``error`` instead of its numbers. The totals of a
strategy at a window are a :class:`StrategyTotals` (an unavailable strategy has only
``available``, ``reason`` and ``runs``). The recall measurement has its own rows
(:class:`RecallRun`, :class:`RecallQuestion`) and figures (:class:`RecallSummary`). Every
development target checked is a :class:`Target`.
"""

from __future__ import annotations

from typing import TypedDict


class ReplayRunKey(TypedDict):
    """What names a replay run."""

    strategy: str
    window: int


class ReplayRun(ReplayRunKey, total=False):
    """One replay (see :func:`contextfold.bench.replay.replay_one`)."""

    trace: str
    #: the strategy cannot run here (a peer library that is not installed ...)
    unavailable: str
    #: the run failed: the exception's type and message
    error: str
    calls: int
    view_tokens: list[int]
    cached_tokens: list[int]
    #: ``[call, tier]`` for each call at which the strategy compacted (or warned)
    events: list[list[int | str]]
    cumulative_input_tokens: int
    cached_input_tokens: int
    cache_cost: float
    peak_view_tokens: int
    overflows: int
    compactions: int
    tiers: dict[str, int]
    summarizer_input_tokens: int
    summarizer_output_tokens: int
    retained_first_user: int
    retained_newest_user: int
    tool_outputs: int
    tool_outputs_left: int
    tool_outputs_recoverable: int
    artifact_events: int
    artifact_named: int
    artifact_expected: int
    edited_files: list[str]
    prepare_ms: list[float]
    compaction_ms: list[float]


class StrategyTotals(TypedDict, total=False):
    """One strategy at one window over every trajectory (see
    :func:`contextfold.bench.replay.aggregate`)."""

    available: bool
    reason: str | None
    runs: int
    errors: list[str]
    calls: int
    cumulative_input_tokens: int
    cache_cost: float
    peak_view_tokens: int
    overflows: int
    compactions: int
    tiers: dict[str, int]
    summarizer_input_tokens: int
    summarizer_output_tokens: int
    retention_first_pct: float | None
    retention_newest_pct: float | None
    tool_outputs_left: int
    recoverability_pct: float | None
    artifact_events: int
    artifact_recall_pct: float | None
    prepare_p50_ms: float
    prepare_p95_ms: float
    compaction_p50_ms: float | None
    compaction_mean_ms: float | None
    cost_vs_raw: float | None
    input_vs_raw: float | None
    cost_vs_mask: float | None


#: the totals per window (its size as a string, as in JSON) and strategy
Aggregates = dict[str, dict[str, StrategyTotals]]


class ReplayMeta(TypedDict, total=False):
    """How the replay was run."""

    windows: list[int]
    strategies: list[str]
    traces: list[str]
    summarizer: str
    manager_token_counter: str
    jobs: int
    seconds: float
    python: str
    token_encoding: str
    cached_rate: float


class Target(TypedDict):
    """One development target and whether it is met."""

    strategy: str
    window: int
    text: str
    met: bool
    value: float | None


class RecallQuestion(TypedDict):
    """One question asked of ``restore`` and where its answer ranked (None: not in the top k)."""

    style: str
    kind: str
    query: str
    rank: int | None
    ms: float
    sem_ms: float
    got: list[str | None]
    why: list[str]
    want: str


class RecallMiss(RecallQuestion):
    """A question whose answer was not the top hit, with the run it was asked in."""

    trace: str
    set: str


class VectorCost(TypedDict):
    """What the semantic vectors of one replay cost."""

    vectors: float
    vector_seconds: float
    vector_bytes: int


class RecallMeasure(VectorCost):
    """One trajectory's recall measurement (see :func:`contextfold.bench.recall.measure`)."""

    outputs: int
    left: int
    questions: list[RecallQuestion]


class RecallRunKey(TypedDict):
    """What names a recall run: the trajectory and its tool style set."""

    trace: str
    set: str


class RecallRun(RecallRunKey, total=False):
    """A recall run: the measurement, or the error that stopped it."""

    error: str
    outputs: int
    left: int
    questions: list[RecallQuestion]
    vectors: float
    vector_seconds: float
    vector_bytes: int


class RecallRates(TypedDict):
    """top-1 / top-5 over some questions (None when there were none)."""

    questions: int
    top1: float | None
    top5: float | None


class VectorTotals(TypedDict):
    """Index time and disk per output vector over the runs (None: no vector computed)."""

    vectors: int
    index_ms_per_output: float | None
    disk_bytes_per_output: float | None


class RecallFigures(TypedDict):
    """The figures of the recall bench (see :func:`contextfold.bench.recall_summary.summarize`)."""

    by_style: dict[str, RecallRates]
    by_kind: dict[str, RecallRates]
    natural: dict[str, RecallRates]
    paraphrase: dict[str, RecallRates]
    semantic: bool
    vectors: int
    index_ms_per_output: float | None
    disk_bytes_per_output: float | None
    restore_p50_ms: float | None
    restore_p95_ms: float | None
    restore_p50_less_semantic_ms: float | None
    semantic_ms_mean: float | None
    semantic_asked: int
    outputs_left: int
    errors: list[str]
    misses: list[RecallMiss]


class RecallSummary(RecallFigures, total=False):
    """The figures and how the measurement was run."""

    window: int
    preset: str
    style_sets: list[str]
    k: int
    seconds: float


class RecallResults(TypedDict):
    """What :func:`contextfold.bench.recall.run_recall` returns."""

    summary: RecallSummary
    runs: list[RecallRun]


class ReplayResultsBase(TypedDict):
    """What :func:`contextfold.bench.replay.run_replay` returns."""

    meta: ReplayMeta
    runs: list[ReplayRun]
    aggregates: Aggregates


class ReplayResults(ReplayResultsBase, total=False):
    """The content of ``results.json``: the replay, the recall figures and the targets."""

    recall: RecallSummary
    targets: list[Target]


__all__ = [
    "Aggregates",
    "RecallFigures",
    "RecallMeasure",
    "RecallMiss",
    "RecallQuestion",
    "RecallRates",
    "RecallResults",
    "RecallRun",
    "RecallRunKey",
    "RecallSummary",
    "ReplayMeta",
    "ReplayResults",
    "ReplayResultsBase",
    "ReplayRun",
    "ReplayRunKey",
    "StrategyTotals",
    "Target",
    "VectorCost",
    "VectorTotals",
]
