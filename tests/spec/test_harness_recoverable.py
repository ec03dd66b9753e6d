"""Conformance to the harness-strategies note (four strategies, memory, session log and
tools) and the recoverable-compaction note (blocks, evidence, intent-triggered restore), on
``preset="spec"``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contextfold import ContextManager
from contextfold.compaction.offload import DEFAULT_EVICTION_EXCLUDES
from contextfold.core.config import (
    EvictionConfig,
    SummaryTriggerConfig,
    TruncateArgsConfig,
    spec,
)
from contextfold.errors import ConfigError
from contextfold.evidence.intents import detect_intent
from contextfold.testing import OverflowingModel

from .helpers import NEWEST, SYSTEM, TASK, fill_to, spec_manager, turns
from .test_progressive import at

ERROR = "Traceback (most recent call last):\n" + "\n".join(
    f'  File "src/app.py", line {i}, in f{i}\nValueError: bad value {i}' for i in range(400)
)


def test_harness_strategies_are_off() -> None:
    """Harness note, section 2: the four strategies are off by default, any combination can
    be enabled."""
    cfg = spec()
    assert cfg.summary is None and cfg.eviction is None and cfg.truncate_args is None
    assert cfg.overflow_recovery is False
    assert cfg.with_(summary=SummaryTriggerConfig(), eviction=EvictionConfig()).summary


def test_summary_trigger_defaults() -> None:
    """Harness note, section 2.1: triggerMessages 50, triggerTokens 80,000, keepMessages 20,
    keepTokens 0, flushBeforeCompact and offloadBeforeCompact true, prompt needs {messages}."""
    c = SummaryTriggerConfig()
    assert (c.trigger_messages, c.trigger_tokens, c.keep_messages, c.keep_tokens) == (
        50,
        80_000,
        20,
        0,
    )
    assert c.flush_before_compact and c.offload_before_compact
    with pytest.raises(ConfigError, match="messages"):
        SummaryTriggerConfig(summary_prompt="no placeholder")


def test_summary_trigger_keeps_n_messages(tmp_path: Path) -> None:
    """Harness note, section 2.1: once the trigger fires, everything but the newest
    keepMessages is summarized."""
    cfg = spec().with_(summary=SummaryTriggerConfig(trigger_messages=12, keep_messages=4))
    cm = ContextManager(workspace=tmp_path, session_id="t", context_window=100_000, config=cfg)
    cm.add_many([SYSTEM, TASK, *turns(6, chars=200), NEWEST])
    cm.prepare()
    (rec,) = [r for r in cm.records() if r.strategy == "summary"]
    assert rec.preserved_tail >= 4 and rec.summarized > 0


def test_eviction_defaults() -> None:
    """Harness note, section 2.2: 80K characters, head and tail of about 2K, read_file and the
    file / memory / session tools excluded, shell output not excluded."""
    e = EvictionConfig()
    assert (e.max_chars, e.head_chars, e.tail_chars) == (80_000, 2_000, 2_000)
    for name in ("read_file", "write_file", "edit_file", "grep_files", "glob_files"):
        assert name in DEFAULT_EVICTION_EXCLUDES
    assert (
        "list_files" in DEFAULT_EVICTION_EXCLUDES and "session_search" in DEFAULT_EVICTION_EXCLUDES
    )
    assert "execute" not in DEFAULT_EVICTION_EXCLUDES and "bash" not in DEFAULT_EVICTION_EXCLUDES


def test_truncate_args_defaults() -> None:
    """Harness note, section 2.3: write_file / edit_file arguments above 2000 characters are
    cut with "... [truncated] ..." before the summary."""
    t = TruncateArgsConfig()
    assert t.tools == ("write_file", "edit_file") and t.max_arg_length == 2_000
    assert t.truncation_text == "... [truncated] ..."


def test_no_overflow_recovery_without_summary_compaction(tmp_path: Path) -> None:
    """Harness note, section 2.4: without summary compaction the overflow error goes to the
    caller, no retry."""
    cm = spec_manager(tmp_path, window=100_000)
    cm.add_many([SYSTEM, TASK, *turns(4), NEWEST])
    model = OverflowingModel(limit=100)
    with pytest.raises(Exception) as info:
        cm.call(model)
    assert "maximum context length" in str(info.value) and len(model.calls) == 1


def test_overflow_recovery_with_summary_compaction(tmp_path: Path) -> None:
    """Harness note, section 2.4: with summary compaction on, an overflow compacts to a
    minimal summary plus the newest message and retries once."""
    cfg = spec().with_(summary=SummaryTriggerConfig(), overflow_recovery=True)
    cm = ContextManager(workspace=tmp_path, session_id="o", context_window=100_000, config=cfg)
    cm.add_many([SYSTEM, TASK, *turns(20), NEWEST])
    model = OverflowingModel(limit=2_000)
    assert cm.call(model)["content"] == "ok"
    # the first call overflowed; then the agent's model was asked for the summary (no summary
    # model of its own), then the request was retried once with the newest message last
    asks = [c for c in model.calls if "structured compaction" not in str(c[-1]["content"])]
    assert len(asks) == 2 and asks[1][-1] == NEWEST


def test_memory_works_without_compaction(tmp_path: Path) -> None:
    """Harness note, section 3: memory can be used on its own, compaction off."""
    cfg = spec().with_(tiers=None)
    cm = ContextManager(workspace=tmp_path, session_id="m", context_window=100_000, config=cfg)
    cm.add({"role": "user", "content": "The API must listen on port 5433."})
    assert cm.flush_memory() == 1
    assert "5433" in cm.recovery.memory.get()


def test_flush_before_compact(tmp_path: Path) -> None:
    """Harness note, section 3.1: facts of the messages about to be summarized go to memory
    (MEMORY.md and topic files) before the summary."""
    cm = spec_manager(tmp_path)
    cm.add_many([SYSTEM, TASK, {"role": "user", "content": "Requirement: port 5433 only."}])
    fill_to(cm, 0.85)
    cm.add(NEWEST)
    cm.prepare()
    assert cm.records()[0].summarized > 0
    assert "5433" in cm.recovery.memory.get("MEMORY.md")


def test_raw_log_keeps_what_compaction_removed(tmp_path: Path) -> None:
    """Harness note, sections 3.2 and 5: the permanent log keeps every message; the session
    tools read it whatever compaction did."""
    cm = at(tmp_path, 0.97)
    cm.prepare()
    text, err = cm.toolbox.run(
        "session_history", {"sessionId": "s", "offset": len(cm.history) - 2, "lastN": 1}
    )
    assert not err and TASK["content"] in text
    names = {t["function"]["name"] for t in cm.tool_schemas()}
    assert {
        "session_list",
        "session_history",
        "session_search",
        "memory_search",
        "memory_get",
    } <= names


def test_compact_block_fields(tmp_path: Path) -> None:
    """Recoverable note, sections 3.1 and 4.1: after a compaction its CompactBlock has the
    boundary uuid, tokens before / after, the summary, items and evidence pointers."""
    cm = at(tmp_path, 0.85)
    cm.prepare()
    rec = cm.records()[0]
    block = [b for b in cm.recovery.store.blocks() if b.strategy == "progressive"][-1]
    assert block.compact_boundary_uuid == rec.boundary_uuid is not None
    assert block.token_after == rec.tokens_after and block.token_before > block.token_after
    assert block.evidence and all(p.sha256 for p in block.evidence)
    assert {p.source_scope for p in block.evidence} == {"main_agent"}


def test_three_intents() -> None:
    """Recoverable note, section 5.2: explicit_detail, historical_verification,
    continue_previous_failure."""
    assert detect_intent("What was the exact error earlier?").value == "explicit_detail"  # type: ignore[union-attr]
    assert detect_intent("这个判断有证据吗？").value == "historical_verification"  # type: ignore[union-attr]
    assert detect_intent("按那个错误继续修").value == "continue_previous_failure"  # type: ignore[union-attr]


def _with_error(tmp_path: Path, compact: bool) -> list[dict[str, object]]:
    cm = spec_manager(tmp_path, window=60_000)
    cm.add_many([SYSTEM, TASK])
    call = {
        "role": "assistant",
        "content": "Running the tests.",
        "tool_calls": [
            {
                "id": "t1",
                "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"cmd": "pytest"})},
            }
        ],
    }
    cm.add_many([call, {"role": "tool", "tool_call_id": "t1", "content": ERROR}])
    if compact:
        fill_to(cm, 0.85, chars=2_000)
    cm.add(
        {"role": "user", "content": "What was the exact error earlier? Show the full traceback."}
    )
    return cm.prepare()


def test_injection_only_once_a_summary_exists(tmp_path: Path) -> None:
    """Recoverable note, sections 4.4 and 5.1: evidence is injected only when the session
    has a compact summary and the newest query asks for it; then as a system-reminder right
    before the newest user message."""
    before = _with_error(tmp_path / "a", compact=False)
    assert not any("<system-reminder>" in str(d["content"]) for d in before)
    after = _with_error(tmp_path / "b", compact=True)
    assert any(str(d["content"]).startswith("[Context Compaction]") for d in after)
    reminder = [i for i, d in enumerate(after) if "<system-reminder>" in str(d["content"])]
    assert reminder == [len(after) - 2]
    assert "ValueError: bad value" in str(after[reminder[0]]["content"])


def test_null_summary_model_is_the_agents_own_model(tmp_path: Path) -> None:
    """Harness note, section 2.1: with no summary model of its own, compaction summaries
    are written by the agent's main model."""
    prompts: list[str] = []

    def agent_model(messages: list[dict[str, object]]) -> dict[str, object]:
        text = str(messages[-1]["content"])
        if "Produce a structured compaction" in text:
            prompts.append(text)
            return {
                "role": "assistant",
                "content": "## Anchors\n\n### User Intent\nFix it\n\n## Summary\nby the agent",
            }
        return {"role": "assistant", "content": "ok"}

    cm = spec_manager(tmp_path)
    cm.add_many([SYSTEM, TASK])
    fill_to(cm, 0.85)
    cm.add(NEWEST)
    cm.call(agent_model)
    rec = cm.records()[0]
    assert prompts and rec.summary_text == "by the agent"
    assert rec.summarizer == "LLMSummarizer"


def test_subagent_output_in_the_same_store(tmp_path: Path) -> None:
    """Recoverable note, sections 3.3 and 4.3: a worker's long output is filed with
    sourceScope sub_agent, its agentRunId and parentMessageUuid, and can be restored."""
    cm = spec_manager(tmp_path)
    cm.add_many([SYSTEM, TASK])
    parent = cm.history[-1].uuid
    pointers = cm.add_subagent_output("worker-1", ERROR, parent_message_uuid=parent)
    (p,) = pointers
    assert (p.source_scope, p.agent_run_id, p.parent_message_uuid) == (
        "sub_agent",
        "worker-1",
        parent,
    )
    assert "error" in " ".join(p.content_types) or "stack_trace" in p.content_types
    hits = cm.restore("ValueError bad value 399")
    assert hits and hits[0].text == ERROR and hits[0].sha256_ok is True


def test_restore_prefers_the_archived_copy(tmp_path: Path) -> None:
    """Recoverable note, section 5.4: a body comes back from archivedToolResultPath first
    (then toolResultPath, the transcript, the preview), checked by sha256."""
    cm = spec_manager(tmp_path, window=60_000)
    cm.add_many([SYSTEM, TASK])
    call = {
        "role": "assistant",
        "content": "Running the tests.",
        "tool_calls": [
            {
                "id": "t1",
                "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"cmd": "pytest"})},
            }
        ],
    }
    cm.add_many([call, {"role": "tool", "tool_call_id": "t1", "content": ERROR}])
    fill_to(cm, 0.85, chars=2_000)
    cm.add(NEWEST)
    cm.prepare()
    hits = [h for h in cm.restore("ValueError bad value 399") if h.pointer.tool_use_id == "t1"]
    assert hits and hits[0].source == "archived" and hits[0].text == ERROR
    assert hits[0].sha256_ok is True
