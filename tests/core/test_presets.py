"""Presets (issue 3, part 1): progressive, harness, harness_all_on and every default of the
seed 002 tables; invalid combinations fail when the config is built."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from contextfold import ContextManager
from contextfold.compaction.offload import EVICTION_POLICY, OffloadPolicy
from contextfold.core.config import (
    LATE_COMPACTION_TIERS,
    ContextConfig,
    EvictionConfig,
    SummaryTriggerConfig,
    TierConfig,
    TruncateArgsConfig,
    harness,
    harness_all_on,
    progressive,
    resolve_preset,
)
from contextfold.core.records import Tier
from contextfold.errors import ConfigError
from tests.support.store_helpers import log_lines


class QuarterCounter:
    """1 token per 4 characters: makes ratios easy to reason about in tests."""

    name = "quarter"

    def count_text(self, text: str) -> int:
        return len(text) // 4


def manager(tmp_path: Path, **kw: Any) -> ContextManager:
    kw.setdefault("context_window", 200_000)
    return ContextManager(workspace=tmp_path, session_id="p", token_counter=QuarterCounter(), **kw)


def bash_turn(i: int, out: str) -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": f"Running step {i}.",
            "tool_calls": [
                {
                    "id": f"call_{i}",
                    "type": "function",
                    "function": {"name": "bash", "arguments": json.dumps({"command": f"ls {i}"})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": f"call_{i}", "content": out},
    ]


# ------------------------------------------------------------------------------- presets


def test_progressive_is_the_default_preset(tmp_path: Path) -> None:
    default = manager(tmp_path / "a")
    named = manager(tmp_path / "b", preset="progressive")
    assert default.config == named.config == progressive()
    cfg = default.config
    assert cfg.preset == "progressive"
    assert cfg.tiers == TierConfig()
    assert cfg.ingest_offload_chars == 10_000
    assert cfg.summary is None and cfg.eviction is None
    assert cfg.summary_style == "anchors"
    assert cfg.overflow_recovery is True


def test_progressive_tier_defaults() -> None:
    t = TierConfig()
    assert (t.warn_threshold, t.soft_threshold, t.full_threshold, t.emergency_threshold) == (
        0.55,
        0.60,
        0.75,
        0.95,
    )
    assert (t.target_ratio, t.stale_after, t.working_window) == (0.10, 5, 64_000)
    assert t.warn_escalates and not LATE_COMPACTION_TIERS.warn_escalates
    assert t.min_tail_messages == 6
    assert t.offload_threshold == 4_000
    assert t.preview_lines == 10


def test_harness_preset_turns_on_all_four_strategies_at_their_defaults(tmp_path: Path) -> None:
    cm = manager(tmp_path, preset="harness")
    cfg = cm.config
    assert cfg == harness_all_on()
    assert cfg.preset == "harness"
    assert cfg.summary == SummaryTriggerConfig()
    assert cfg.eviction == EvictionConfig()
    assert cfg.truncate_args == TruncateArgsConfig()
    assert cfg.overflow_recovery is True
    assert cfg.tiers is None  # seed 000's tiers are not part of seed 002
    assert cfg.ingest_offload_chars == 0
    assert cfg.summary_style == "sections"
    assert resolve_preset("harness") == harness_all_on()


def test_harness_config_has_every_strategy_off() -> None:
    cfg = harness()
    assert cfg.preset == "harness"
    assert cfg.summary is None
    assert cfg.eviction is None
    assert cfg.truncate_args is None
    assert cfg.overflow_recovery is False
    assert cfg.tiers is None
    assert cfg.ingest_offload_chars == 0


def test_harness_all_off_view_is_the_full_history(tmp_path: Path) -> None:
    """All four strategies off: 120 messages (far above triggerMessages 50), a 100,000-char
    bash result (above the eviction threshold) and a huge write_file argument all pass through
    untouched; nothing is written besides the raw log."""
    cm = manager(tmp_path, config=harness())
    sent: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Refactor the whole package."},
    ]
    for i in range(58):
        sent += bash_turn(i, f"output of step {i}")
    sent += bash_turn(99, "B" * 100_000)
    big_args = json.dumps({"path": "a.py", "content": "x = 1\n" * 3_000})
    sent += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "w1",
                    "type": "function",
                    "function": {"name": "write_file", "arguments": big_args},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "w1", "content": "written"},
    ]
    cm.add_many(sent)
    assert len(sent) > 120
    view = cm.prepare()
    assert view == sent
    rec = cm.last_prepare
    assert rec is not None and rec.tier is Tier.NONE and not rec.changed
    assert not (tmp_path / "blobs").exists()  # nothing offloaded
    assert {e.kind for e in cm.store.read("p")} == {"message"}  # no records, offloads, state
    assert cm.store.docs("memory") == {}
    assert len(log_lines(tmp_path, "p")) == len(sent)


def test_presets_are_plain_config_objects_users_can_copy_and_change() -> None:
    cfg = harness(summary=SummaryTriggerConfig(trigger_messages=30, keep_messages=10))
    changed = cfg.with_(overflow_recovery=True)
    assert changed.preset == "custom" and changed.overflow_recovery is True
    assert changed.summary == cfg.summary
    assert cfg.overflow_recovery is False  # frozen: the original is untouched
    copied = replace(progressive(), ingest_offload_chars=20_000)
    assert copied.ingest_offload_chars == 20_000 and copied.tiers == TierConfig()
    with pytest.raises(AttributeError):
        cfg.overflow_recovery = True  # type: ignore[misc]


# ------------------------------------------------------------------------------- seed tables


def test_summary_trigger_defaults_match_the_seed_table() -> None:
    s = SummaryTriggerConfig()
    assert s.trigger_messages == 50
    assert s.trigger_tokens == 80_000
    assert s.keep_messages == 20
    assert s.keep_tokens == 0
    assert s.flush_before_compact is True
    assert s.offload_before_compact is True
    assert s.summary_prompt is None  # the default four-section prompt


def test_eviction_defaults_match_the_seed() -> None:
    e = EvictionConfig()
    assert e.max_chars == 80_000
    assert e.head_chars == 2_000 and e.tail_chars == 2_000
    assert e.offload_root is None
    for name in (
        "read_file",
        "write_file",
        "edit_file",
        "grep_files",
        "glob_files",
        "list_files",
        "memory_*",
        "session_search",
    ):
        assert name in e.exclude_tools, name


@pytest.mark.parametrize(
    "tool",
    [
        "read_file",
        "write_file",
        "edit_file",
        "grep_files",
        "glob_files",
        "list_files",
        "memory_search",
        "memory_get",
        "session_search",
    ],
)
def test_default_excluded_tools_are_never_evicted(tool: str) -> None:
    e = EvictionConfig()
    policy = replace(EVICTION_POLICY, exclude_tools=e.exclude_tools)
    assert not policy.applies("x" * 200_000, tool)


@pytest.mark.parametrize("tool", ["bash", "shell", "execute", "run_shell_command", None])
def test_shell_output_is_never_excluded(tool: str | None) -> None:
    e = EvictionConfig()
    policy = OffloadPolicy(
        name="eviction", threshold=e.max_chars, style="head_tail", exclude_tools=e.exclude_tools
    )
    assert policy.applies("x" * 80_001, tool)
    assert not policy.applies("x" * 80_000, tool)  # "above" 80,000 characters


def test_truncate_args_defaults_match_the_seed() -> None:
    t = TruncateArgsConfig()
    assert t.max_arg_length == 2_000
    assert t.truncation_text == "... [truncated] ..."
    assert t.tools == ("write_file", "edit_file")


def test_overflow_recovery_default_per_preset() -> None:
    assert progressive().overflow_recovery is True
    assert harness().overflow_recovery is False
    assert harness_all_on().overflow_recovery is True


# ------------------------------------------------------------------------------- validation


def test_summary_prompt_without_placeholder_is_rejected() -> None:
    with pytest.raises(ConfigError, match="messages"):
        SummaryTriggerConfig(summary_prompt="Summarize the conversation please.")
    ok = SummaryTriggerConfig(summary_prompt="Summarize:\n{messages}")
    assert ok.summary_prompt == "Summarize:\n{messages}"


@pytest.mark.parametrize(
    "kw",
    [
        {"trigger_messages": 20, "keep_messages": 20},
        {"trigger_messages": 20, "keep_messages": 30},
        {"trigger_messages": 0, "trigger_tokens": 0},
        {"keep_messages": 0, "keep_tokens": 0},
        {"trigger_messages": -1},
        {"trigger_tokens": -5},
        {"keep_tokens": -1},
    ],
)
def test_invalid_summary_trigger_combinations(kw: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        SummaryTriggerConfig(**kw)


def test_keep_tokens_not_below_the_only_trigger_is_rejected() -> None:
    with pytest.raises(ConfigError):
        SummaryTriggerConfig(trigger_messages=0, trigger_tokens=10_000, keep_tokens=10_000)


def test_keep_tokens_overrides_keep_messages_in_validation() -> None:
    # keepTokens non-zero overrides keepMessages, so keep_messages >= trigger_messages is fine
    cfg = SummaryTriggerConfig(trigger_messages=10, keep_messages=20, keep_tokens=2_000)
    assert cfg.keep_tokens == 2_000


@pytest.mark.parametrize(
    "kw",
    [
        {"warn_threshold": 0.7, "soft_threshold": 0.6},
        {"soft_threshold": 0.85, "full_threshold": 0.8},
        {"full_threshold": 0.96, "emergency_threshold": 0.95},
        {"emergency_threshold": 1.2},
        {"warn_threshold": 0.0},
        {"target_ratio": 0.6},
        {"min_tail_messages": -1},
        {"preview_lines": 0},
    ],
)
def test_thresholds_out_of_order_are_rejected(kw: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        TierConfig(**kw)


@pytest.mark.parametrize(
    "kw",
    [
        {"max_chars": 4_000},  # head + tail (4,000) must stay below the threshold
        {"head_chars": -1},
        {"max_chars": -1},
    ],
)
def test_invalid_eviction_configs(kw: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        EvictionConfig(**kw)


def test_invalid_truncate_args_and_context_configs() -> None:
    with pytest.raises(ConfigError):
        TruncateArgsConfig(max_arg_length=10)
    with pytest.raises(ConfigError):
        ContextConfig(summary_style="bullets")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        ContextConfig(ingest_offload_chars=-1)
    with pytest.raises(ConfigError):
        ContextConfig(reserve_output_tokens=-1)


def test_preset_and_config_together_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="either preset or config"):
        manager(tmp_path, preset="harness", config=harness())
    assert not (tmp_path / "sessions").exists()  # nothing written before failing


def test_unknown_preset_and_bad_window_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown preset"):
        manager(tmp_path, preset="aggressive")
    with pytest.raises(ConfigError):
        manager(tmp_path, context_window=0)


def test_preset_accepts_a_config_object(tmp_path: Path) -> None:
    cfg = harness(eviction=EvictionConfig(max_chars=50_000))
    cm = manager(tmp_path, preset=cfg)
    assert cm.config is cfg
    assert cm.compactor.policies["eviction"].threshold == 50_000
    assert "ingest" not in cm.compactor.policies
