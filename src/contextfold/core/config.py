"""Configuration: plain frozen objects, validated when built, and the presets.

``progressive()`` is tiered compaction (tiers by window ratio, ingest offload on) plus recovery;
``harness()`` is the harness strategies' defaults (all four strategies off until enabled);
``spec()`` is the design notes as written (every difference of the default switched back).
Copy and change any of them with :func:`dataclasses.replace`; invalid combinations raise
:class:`ConfigError`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from ..errors import ConfigError

#: tools whose results eviction never moves out of the view (file and memory tools, recall)
DEFAULT_EVICTION_EXCLUDES: tuple[str, ...] = (
    "read_file",
    "write_file",
    "edit_file",
    "grep_files",
    "glob_files",
    "list_files",
    "memory_*",
    "session_search",
    "read_offloaded",
    "recall",
)


def _ratio(name: str, value: float) -> None:
    if not isinstance(value, int | float) or not 0.0 < float(value) <= 1.0:
        raise ConfigError(f"{name} must be a ratio in (0, 1], got {value!r}")


def _nonneg(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"{name} must be a non-negative integer, got {value!r}")


def _choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}")


@dataclass(frozen=True, kw_only=True, slots=True)
class TierConfig:
    """Tiered compaction thresholds (ratios of the working window: what the context window
    leaves after the fixed prefix, i.e. the leading system messages, the tool schemas and the
    answer's reserve, at most ``working_window`` tokens). An agent with a big system prompt
    and many tools therefore compacts as rarely as one without.

    The defaults are tuned for the bill (``contextfold bench``, docs/benchmarks.md): messages that
    grow past 55-60% of the working window are summarized down to the newest turns, so each
    call re-reads a small cached prefix, and compactions stay rare enough that their cache
    misses cost less than the re-reading they save; in between the messages are sent verbatim. ``LATE_COMPACTION_TIERS`` compacts only near the window's end.
    """

    warn_threshold: float = 0.55
    soft_threshold: float = 0.60
    full_threshold: float = 0.75
    emergency_threshold: float = 0.95
    #: Messages always kept verbatim at the end (the split never breaks a tool pair, so the
    #: tail may hold a few more).
    min_tail_messages: int = 6
    #: Head tool results above this many characters are offloaded at compaction time.
    offload_threshold: int = 4_000
    preview_lines: int = 10
    #: After a Soft/Full/Emergency compaction the view is brought under this ratio when the
    #: tail allows, so the next turns append to a stable prefix instead of compacting again.
    target_ratio: float = 0.10
    #: A pinned message (system prompt, first or newest user message) above this share of the
    #: window is shown as head and tail with a pointer to its full text (kept byte-exact).
    pinned_max_ratio: float = 0.50
    #: Tool outputs older than the newest ``stale_after`` results and above
    #: ``stale_min_chars`` (and long call arguments) are offloaded in one batch once the tokens
    #: they free reach ``stale_batch_ratio`` of the view from the first of them on (and
    #: ``stale_min_gain`` tokens), so the cache miss of the rewrite pays for itself, and only
    #: once the messages reach the Warn line (a small view is left as it is). The same batch
    #: shortens the previews of older offloaded outputs to two short lines. 0 turns it off.
    stale_after: int = 5
    stale_min_chars: int = 1_000
    stale_batch_ratio: float = 0.35
    stale_min_gain: int = 2_000
    stale_preview_lines: int = 5
    #: Compute the tiers and the target on at most this many tokens of what the window leaves
    #: after the fixed prefix (0: all of it).
    #: A large window then costs like a smaller one: compaction starts earlier, the view stays
    #: small, every call re-reads less. The window itself still bounds every view.
    working_window: int = 64_000
    #: A Warn offload (or a stale batch) that leaves the messages above the middle of
    #: ``target_ratio`` and ``warn_threshold`` goes on to Soft in the same run: one compaction
    #: instead of a rewrite of the view on every following turn.
    warn_escalates: bool = True
    #: Facts of the messages a summary replaces go to memory first (used when no summary
    #: strategy is configured; its own ``flush_before_compact`` wins otherwise).
    flush_before_compact: bool = True
    #: What the tier ratios are of: ``"room"`` the part of the window the fixed prefix (system
    #: messages, tool schemas, reserve) leaves, at most ``working_window``; ``"window"`` the
    #: whole context window (the design notes).
    ratio_of: Literal["room", "window"] = "room"
    #: Soft and Full summarize more of the head when that is needed to reach ``target_ratio``,
    #: and skip a summary that would not make the view smaller. False: Soft summarizes exactly
    #: the oldest half of the head and Full the whole head.
    extend_to_target: bool = True
    #: Large tool results in the kept tail are offloaded too when the view is still above
    #: the target after the summary. False: the tail is kept verbatim.
    offload_tail: bool = True
    #: The Warn record's ``preserved_tail``: every message after the boundary
    #: (``"after_boundary"``) or only the ``min_tail_messages`` tail (``"tail"``).
    warn_preserved_tail: Literal["after_boundary", "tail"] = "after_boundary"
    #: Emergency: ``"summary"`` keeps the newest messages within the target and gives the
    #: dropped ones an extractive summary; ``"minimal_tail"`` truncates to the newest turn
    #: (the pinned messages stay) with no summary.
    emergency: Literal["summary", "minimal_tail"] = "summary"
    #: When the LLM summarizer fails: ``"extractive"`` summary instead, or ``"truncate"``
    #: (the range is dropped from the view without a summary, token-budget truncation).
    llm_fallback: Literal["extractive", "truncate"] = "extractive"
    #: Merging anchors over compactions: ``"union"`` (list anchors keep old and new items,
    #: the newest 12 shown) or ``"replace"`` (a new non-N/A anchor replaces the old one of
    #: its type, old ones the new summary left N/A are kept).
    anchor_merge: Literal["union", "replace"] = "union"
    #: A failed memory flush is written to the record's error (``"record"``) or skipped
    #: silently (``"skip"``, only logged at debug level).
    memory_errors: Literal["record", "skip"] = "record"

    def __post_init__(self) -> None:
        for name in (
            "pinned_max_ratio",
            "warn_threshold",
            "soft_threshold",
            "full_threshold",
            "emergency_threshold",
            "target_ratio",
        ):
            _ratio(name, getattr(self, name))
        if not (
            self.warn_threshold
            < self.soft_threshold
            < self.full_threshold
            < self.emergency_threshold
            <= 1.0
        ):
            raise ConfigError(
                "thresholds must satisfy warn < soft < full < emergency <= 1, got "
                f"{self.warn_threshold} / {self.soft_threshold} / {self.full_threshold} / "
                f"{self.emergency_threshold}"
            )
        if self.target_ratio >= self.warn_threshold:
            raise ConfigError(
                f"target_ratio ({self.target_ratio}) must be below warn_threshold "
                f"({self.warn_threshold})"
            )
        _nonneg("min_tail_messages", self.min_tail_messages)
        for name in ("stale_after", "stale_min_chars", "stale_min_gain", "working_window"):
            _nonneg(name, getattr(self, name))
        _ratio("stale_batch_ratio", self.stale_batch_ratio)
        _nonneg("offload_threshold", self.offload_threshold)
        _choice("ratio_of", self.ratio_of, ("room", "window"))
        _choice("warn_preserved_tail", self.warn_preserved_tail, ("after_boundary", "tail"))
        _choice("emergency", self.emergency, ("summary", "minimal_tail"))
        _choice("llm_fallback", self.llm_fallback, ("extractive", "truncate"))
        _choice("anchor_merge", self.anchor_merge, ("union", "replace"))
        _choice("memory_errors", self.memory_errors, ("record", "skip"))
        for name in ("preview_lines", "stale_preview_lines"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")


#: Compaction late (60/70/80/95% of the whole window, target 30%, no stale batches, Warn
#: never goes on to Soft): larger
#: views, fewer compactions, a higher bill (the thresholds before the cost tuning).
LATE_COMPACTION_TIERS = TierConfig(
    warn_threshold=0.60,
    soft_threshold=0.70,
    full_threshold=0.80,
    target_ratio=0.30,
    stale_after=0,
    working_window=0,
    warn_escalates=False,
)


@dataclass(frozen=True, kw_only=True, slots=True)
class SummaryTriggerConfig:
    """Trigger-based summary compaction: summarize when the view reaches a message or token
    count (a harness strategy)."""

    trigger_messages: int = 50
    trigger_tokens: int = 80_000
    keep_messages: int = 20
    keep_tokens: int = 0
    #: Facts of the messages about to be summarized go to memory first; applies to every
    #: compaction of the session (tiers included) when this strategy is configured.
    flush_before_compact: bool = True
    #: Tool results of the summarized range above ``offload_chars`` are written to files
    #: (exact, sha256) before the summary, and the summary lists where; False summarizes them
    #: as they are. The session log keeps every message in full either way.
    offload_before_compact: bool = True
    offload_chars: int = 4_000
    #: Custom prompt; must contain "{messages}".
    summary_prompt: str | None = None

    def __post_init__(self) -> None:
        for name in (
            "trigger_messages",
            "trigger_tokens",
            "keep_messages",
            "keep_tokens",
            "offload_chars",
        ):
            _nonneg(name, getattr(self, name))
        if self.trigger_messages == 0 and self.trigger_tokens == 0:
            raise ConfigError("summary compaction needs trigger_messages or trigger_tokens > 0")
        if self.keep_messages == 0 and self.keep_tokens == 0:
            raise ConfigError("keep_messages or keep_tokens must be > 0")
        if (
            self.trigger_messages
            and self.keep_tokens == 0
            and (self.keep_messages >= self.trigger_messages)
        ):
            raise ConfigError(
                f"keep_messages ({self.keep_messages}) must be below trigger_messages "
                f"({self.trigger_messages})"
            )
        if (
            self.keep_tokens
            and self.trigger_tokens
            and not self.trigger_messages
            and self.keep_tokens >= self.trigger_tokens
        ):
            raise ConfigError(
                f"keep_tokens ({self.keep_tokens}) must be below trigger_tokens "
                f"({self.trigger_tokens})"
            )
        if self.summary_prompt is not None and "{messages}" not in self.summary_prompt:
            raise ConfigError("summary_prompt must contain the {messages} placeholder")


@dataclass(frozen=True, kw_only=True, slots=True)
class EvictionConfig:
    """Large tool-result eviction at ingest: head and tail kept, the rest in a file (a harness
    strategy)."""

    max_chars: int = 80_000
    head_chars: int = 2_000
    tail_chars: int = 2_000
    exclude_tools: tuple[str, ...] = DEFAULT_EVICTION_EXCLUDES
    #: Folder for evicted results; default: the session's tool_results folder.
    offload_root: Path | None = None

    def __post_init__(self) -> None:
        _nonneg("max_chars", self.max_chars)
        _nonneg("head_chars", self.head_chars)
        _nonneg("tail_chars", self.tail_chars)
        if self.head_chars + self.tail_chars >= self.max_chars:
            raise ConfigError("head_chars + tail_chars must be smaller than max_chars")


@dataclass(frozen=True, kw_only=True, slots=True)
class TruncateArgsConfig:
    """Argument truncation on the text sent to the summarizer (a harness strategy)."""

    tools: tuple[str, ...] = ("write_file", "edit_file")
    max_arg_length: int = 2_000
    truncation_text: str = "... [truncated] ..."

    def __post_init__(self) -> None:
        if self.max_arg_length < 16:
            raise ConfigError(f"max_arg_length must be >= 16, got {self.max_arg_length}")


@dataclass(frozen=True, kw_only=True, slots=True)
class RecoveryConfig:
    """Recoverable compaction: evidence index and intent-triggered injection."""

    index_evidence: bool = True
    inject: bool = True
    #: Share of the context window the injected evidence may take.
    injection_budget_ratio: float = 0.08
    #: Inject evidence only once the session has a compaction summary in its view. False:
    #: also for outputs offloaded on arrival, before any summary.
    inject_requires_summary: bool = False

    def __post_init__(self) -> None:
        if not 0.0 < self.injection_budget_ratio <= 0.5:
            raise ConfigError("injection_budget_ratio must be in (0, 0.5]")


@dataclass(frozen=True, kw_only=True, slots=True)
class ContextConfig:
    """Everything the ContextManager does, in one validated object."""

    preset: Literal["progressive", "harness", "spec", "custom"] = "progressive"
    #: Tiered compaction; None turns the progressive compactor off.
    tiers: TierConfig | None = field(default_factory=TierConfig)
    #: Ingest offload: tool results above this many characters are offloaded when they
    #: arrive (10,000). 0 turns it off.
    ingest_offload_chars: int = 10_000
    summary: SummaryTriggerConfig | None = None
    eviction: EvictionConfig | None = None
    truncate_args: TruncateArgsConfig | None = field(default_factory=TruncateArgsConfig)
    #: Overflow recovery: on a context-overflow error, compact and retry once (for a window the
    #: error states, as the tiers would for it when the newest turns fit; else hard, keeping
    #: the newest message group and a summary).
    overflow_recovery: bool = True
    recovery: RecoveryConfig | None = field(default_factory=RecoveryConfig)
    #: Summary format: five structured anchors or four sections (intent, summary, artifacts,
    #: next steps).
    summary_style: Literal["anchors", "sections"] = "anchors"
    #: Tokens kept free for the model's answer (added to the view's estimate).
    reserve_output_tokens: int = 0
    #: Agents whose sessions this agent may read through the session tools ("*" = all).
    allow_agents: tuple[str, ...] = ()
    #: Manual ``compact()``: ``"full"`` summarizes the whole head with the summarizer;
    #: ``"emergency"`` is CompactForce (truncation, no LLM call).
    manual_compact: Literal["full", "emergency"] = "full"
    #: Who writes summaries when the ContextManager has no ``summarizer``: the extractive
    #: summarizer (``"summarizer"``, no model call) or, inside ``cm.call(fn)``, the agent's own
    #: model ``fn`` (``"agent"``).
    summary_model: Literal["summarizer", "agent"] = "summarizer"
    #: Language of the compaction notice (``record.notification()``): ``"en"`` or ``"zh"``.
    locale: Literal["en", "zh"] = "en"
    #: Token estimate when the ContextManager is given no ``counter``: None for the default
    #: heuristic, ``"chars4"`` for characters / 4, or any counter name ``counter`` accepts.
    token_counter: str | None = None

    def __post_init__(self) -> None:
        _nonneg("ingest_offload_chars", self.ingest_offload_chars)
        _nonneg("reserve_output_tokens", self.reserve_output_tokens)
        _choice("manual_compact", self.manual_compact, ("full", "emergency"))
        _choice("locale", self.locale, ("en", "zh"))
        _choice("summary_model", self.summary_model, ("summarizer", "agent"))
        if self.summary_style not in ("anchors", "sections"):
            raise ConfigError(
                f"summary_style must be 'anchors' or 'sections', got {self.summary_style!r}"
            )
        if (
            self.eviction is not None
            and self.ingest_offload_chars
            and self.ingest_offload_chars >= self.eviction.max_chars
        ):
            # both set: ingest offload would never leave anything for eviction: allowed, noted
            pass

    @property
    def flushes_before_compact(self) -> bool:
        """Whether facts go to memory before a compaction summarizes messages: the summary
        strategy's ``flush_before_compact`` when it is configured (for every compaction of the
        session, tiers included), else the tiers' own."""
        if self.summary is not None:
            return self.summary.flush_before_compact
        return self.tiers is None or self.tiers.flush_before_compact

    def with_(self, **changes: object) -> ContextConfig:
        fields: dict[str, Any] = changes  # checked by the dataclass, as with ContextConfig(...)
        return replace(self, preset="custom", **fields)


def progressive() -> ContextConfig:
    """The default: tiered compaction with ingest offload, argument truncation and recovery."""
    return ContextConfig(preset="progressive")


def harness(
    *,
    summary: SummaryTriggerConfig | None = None,
    eviction: EvictionConfig | None = None,
    truncate_args: TruncateArgsConfig | None = None,
    overflow_recovery: bool = False,
) -> ContextConfig:
    """The harness strategies (trigger summaries, eviction, argument truncation, overflow
    recovery), every one off until enabled; any combination allowed."""
    return ContextConfig(
        preset="harness",
        tiers=None,
        ingest_offload_chars=0,
        summary=summary,
        eviction=eviction,
        truncate_args=truncate_args,
        overflow_recovery=overflow_recovery,
        summary_style="sections",
    )


def harness_all_on() -> ContextConfig:
    """The four harness strategies enabled at their documented defaults."""
    return harness(
        summary=SummaryTriggerConfig(),
        eviction=EvictionConfig(),
        truncate_args=TruncateArgsConfig(),
        overflow_recovery=True,
    )


#: The design notes' tiers, exactly: 60/70/80/95% of the whole window, Soft summarizes the
#: oldest half of the head and Full all of it, the tail stays verbatim, Emergency truncates to
#: the minimal tail, a failed LLM summary is token-budget truncation, anchors merge by
#: replacement, a failed memory flush is skipped silently.
SPEC_TIERS = TierConfig(
    warn_threshold=0.60,
    soft_threshold=0.70,
    full_threshold=0.80,
    emergency_threshold=0.95,
    min_tail_messages=6,
    offload_threshold=4_000,
    preview_lines=10,
    stale_after=0,
    working_window=0,
    warn_escalates=False,
    ratio_of="window",
    extend_to_target=False,
    offload_tail=False,
    warn_preserved_tail="tail",
    emergency="minimal_tail",
    llm_fallback="truncate",
    anchor_merge="replace",
    memory_errors="skip",
)


def spec() -> ContextConfig:
    """The design notes as written: :data:`SPEC_TIERS`, ingest offload at 10,000 characters,
    the other strategies off (argument truncation, trigger summaries, eviction, overflow
    recovery), evidence injected only once a compact summary exists, manual ``compact()`` as
    CompactForce, the Chinese notice, tokens estimated as characters / 4."""
    return ContextConfig(
        preset="spec",
        tiers=SPEC_TIERS,
        ingest_offload_chars=10_000,
        summary=None,
        eviction=None,
        truncate_args=None,
        overflow_recovery=False,
        recovery=RecoveryConfig(inject_requires_summary=True),
        summary_style="anchors",
        manual_compact="emergency",
        summary_model="agent",
        locale="zh",
        token_counter="chars4",
    )


PRESETS = {"progressive": progressive, "harness": harness_all_on, "spec": spec}


def resolve_preset(name: str | ContextConfig | None) -> ContextConfig:
    if name is None:
        return progressive()
    if isinstance(name, ContextConfig):
        return name
    try:
        return PRESETS[name]()
    except KeyError:
        raise ConfigError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}") from None
