"""Compaction as stages: the presets are lists of stages, and a stage of the user's own runs
in the pipeline without editing the library."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from contextfold import ContextManager
from contextfold.compaction.pipeline import (
    CompactionPipeline,
    harness_stages,
    preset_stages,
    progressive_stages,
    spec_stages,
)
from contextfold.compaction.stages import (
    Changes,
    CompactionRun,
    EmergencyStage,
    PinnedStage,
    Stage,
    StaleOffloadStage,
    SummarizeStage,
    TierStage,
    TriggerStage,
    WarnStage,
)
from contextfold.core.config import SummaryTriggerConfig
from contextfold.core.messages import check_view
from contextfold.core.records import Tier
from contextfold.errors import ConfigError

SYSTEM = {"role": "system", "content": "You are a coding agent."}
TASK = {"role": "user", "content": "Fix the failing date parser in src/dates.py."}


def turn(i: int, tool: str, out: str) -> list[dict[str, Any]]:
    call = {
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": tool, "arguments": json.dumps({"path": f"f{i}.txt"})},
    }
    return [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{i}", "content": out},
    ]


class OffloadSecretsStage:
    """A user's stage: tool outputs of the ``read_env`` tool leave the view at once (their
    text stays in the offload store, recoverable), whatever the tier. It runs before the tier
    is decided: a run that only moves outputs out is a Warn run."""

    name = "offload_secrets"

    def __init__(self) -> None:
        self.runs = 0

    def apply(self, run: CompactionRun) -> Changes:
        self.runs += 1
        comp = run.compactor
        mark = run.mark()
        view = comp.view
        for i in range(view.boundary, len(view)):
            form = view.forms[i]
            if form.role != "tool" or form.metadata.get("cf_offloaded"):
                continue
            if comp._tool_name(i) == "read_env":
                comp._offload_range(run.scratch, i, i + 1, comp.policies["tight"])
        changes = run.changes_since(mark)
        if changes.offloaded:
            run.notes.append(f"{changes.offloaded} read_env output(s) offloaded")
        return changes


def test_the_presets_are_lists_of_stages() -> None:
    names = [s.name for s in progressive_stages()]
    assert names == [
        "pinned",
        "stale",
        "tier",
        "warn",
        "summarize",
        "emergency",
        "stale_after_tier",
    ]
    assert [s.name for s in spec_stages()] == ["pinned", "tier", "warn", "summarize", "emergency"]
    assert [s.name for s in preset_stages("spec")] == [s.name for s in spec_stages()]
    assert [s.name for s in preset_stages("progressive")] == names
    assert [s.name for s in harness_stages(SummaryTriggerConfig())] == ["trigger"]
    for stage in [
        PinnedStage(),
        StaleOffloadStage(),
        TierStage(),
        WarnStage(),
        SummarizeStage(),
        EmergencyStage(),
        TriggerStage(SummaryTriggerConfig()),
    ]:
        assert isinstance(stage, Stage)


def test_a_user_stage_runs_in_every_prepare_and_its_offload_is_recoverable(
    tmp_path: Path,
) -> None:
    secret = "API_TOKEN=" + "x" * 3_000
    mine = OffloadSecretsStage()
    cm = ContextManager(
        workspace=tmp_path,
        session_id="s",
        context_window=100_000,
        stages=[PinnedStage(), StaleOffloadStage(), mine, *progressive_stages()[2:]],
    )
    cm.add_many(
        [SYSTEM, TASK, *turn(0, "read_file", "def parse(): ..."), *turn(1, "read_env", secret)]
    )
    cm.add({"role": "user", "content": "go on"})
    view = cm.prepare()
    check_view(cm.view_messages)
    assert mine.runs == 1
    assert all(secret not in str(m.get("content")) for m in view)
    assert "def parse(): ..." in json.dumps(view)  # the other tool's output stays
    record = cm.last_prepare
    assert record is not None and record.tier is Tier.WARN
    assert "1 read_env output(s) offloaded" in record.notes
    assert [e.tool_call_id for e in record.offloaded] == ["call_1"]
    # nothing is lost: the original bytes come back, sha256 and all
    entry = cm.offloaded()["call_1"]
    assert cm.offload.read("call_1") == secret
    assert entry.sha256 == hashlib.sha256(secret.encode()).hexdigest()
    assert cm.recover_tool_result("call_1") == secret
    # the next prepare runs the stage again; there is nothing new to offload
    cm.prepare()
    assert mine.runs == 2
    assert cm.last_prepare is not None and cm.last_prepare.tier is Tier.NONE
    # reopened with the same stages, the view is the same
    again = ContextManager(
        workspace=tmp_path, session_id="s", context_window=100_000, stages=[*progressive_stages()]
    )
    assert again.prepare() == cm.prepare()


def test_without_the_user_stage_the_output_stays(tmp_path: Path) -> None:
    cm = ContextManager(workspace=tmp_path, session_id="s", context_window=100_000)
    secret = "API_TOKEN=" + "x" * 3_000
    cm.add_many([SYSTEM, TASK, *turn(1, "read_env", secret)])
    cm.add({"role": "user", "content": "go on"})
    assert secret in json.dumps(cm.prepare())


def test_a_stage_can_call_the_run_off(tmp_path: Path) -> None:
    class Never:
        name = "never"

        def apply(self, run: CompactionRun) -> Changes:
            run.skip()
            return Changes()

    cm = ContextManager(workspace=tmp_path, session_id="s", context_window=100_000)
    cm.add_many([SYSTEM, TASK])
    assert CompactionPipeline([Never()]).run(cm.compactor) is None
    # the manager still gets a record (nothing changed) when its own tier run is called off
    off = ContextManager(
        workspace=tmp_path / "b", session_id="s", context_window=100_000, stages=[Never()]
    )
    off.add_many([SYSTEM, TASK])
    off.prepare()
    assert off.last_prepare is not None and off.last_prepare.tier is Tier.NONE
    assert not off.last_prepare.changed


def test_a_stage_without_apply_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="compaction stage"):
        ContextManager(
            workspace=tmp_path,
            session_id="s",
            stages=[object()],  # type: ignore[list-item]
        )
