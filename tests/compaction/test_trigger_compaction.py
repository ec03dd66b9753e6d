"""Seed 002 2.1: trigger-based summary compaction through the ContextManager."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contextfold import ContextManager
from contextfold.compaction.summarizers.base import SummaryRequest
from contextfold.compaction.summarizers.extractive import ExtractiveSummarizer
from contextfold.compaction.summarizers.llm import LLMSummarizer
from contextfold.core.config import SummaryTriggerConfig, harness, harness_all_on
from contextfold.core.messages import check_view
from contextfold.core.records import Tier
from contextfold.core.wire import from_openai
from contextfold.testing import ScriptedLLM, ScriptedSummarizer
from tests.support.store_helpers import log_lines

SECTIONS = ("## SESSION INTENT", "## SUMMARY", "## ARTIFACTS", "## NEXT STEPS")
FOUR_SECTION_REPLY = (
    "## SESSION INTENT\nFix the date parser in src/dates.py.\n\n"
    "## SUMMARY\nRan the steps; the parser fails on ISO weeks.\n\n"
    "## ARTIFACTS\n- src/dates.py rewritten\n- build id 4242\n\n"
    "## NEXT STEPS\n- run the test suite\n"
)
SYSTEM = {"role": "system", "content": "You are a coding agent."}
TASK = {
    "role": "user",
    "content": "Fix the failing date parser in src/dates.py. You must never edit tests/.",
}


class QuarterCounter:
    name = "quarter"

    def count_text(self, text: str) -> int:
        return len(text) // 4


def manager(tmp_path: Path, summary: SummaryTriggerConfig, **kw: Any) -> ContextManager:
    kw.setdefault("context_window", 200_000)
    return ContextManager(
        workspace=tmp_path,
        session_id="t",
        token_counter=QuarterCounter(),
        config=harness(summary=summary),
        **kw,
    )


def turn(i: int, out: str = "", n_calls: int = 1) -> list[dict[str, Any]]:
    calls = [
        {
            "id": f"call_{i}_{k}",
            "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": f"ls {i} {k}"})},
        }
        for k in range(n_calls)
    ]
    msgs: list[dict[str, Any]] = [
        {"role": "assistant", "content": f"Next I will run step {i}.", "tool_calls": calls}
    ]
    for k in range(n_calls):
        msgs.append(
            {"role": "tool", "tool_call_id": f"call_{i}_{k}", "content": out or f"out {i}.{k}"}
        )
    return msgs


def base(cm: ContextManager) -> None:
    cm.add(SYSTEM)
    cm.add(TASK)


def valid(view: list[dict[str, Any]]) -> None:
    check_view([from_openai(d, i) for i, d in enumerate(view)])


def compaction_text(view: list[dict[str, Any]]) -> str:
    texts = [
        d["content"]
        for d in view
        if isinstance(d.get("content"), str) and d["content"].startswith("[Context Compaction]")
    ]
    assert len(texts) == 1, view
    return str(texts[0])


# ------------------------------------------------------------------------------- triggers


def test_message_trigger_fires_at_the_threshold_and_not_before(tmp_path: Path) -> None:
    cm = manager(tmp_path, SummaryTriggerConfig(trigger_messages=12, keep_messages=4))
    base(cm)
    for i in range(4):
        cm.add_many(turn(i))  # 2 + 8 = 10 messages
    cm.add(turn(4)[0])
    assert len(cm.view_messages) == 11
    cm.prepare()
    assert cm.last_prepare is not None and cm.last_prepare.tier is Tier.NONE
    cm.add(turn(4)[1])  # 12 messages: fires
    view = cm.prepare()
    rec = cm.last_prepare
    assert rec is not None and rec.changed and rec.strategy == "summary"
    assert "triggerMessages 12" in rec.reason
    assert len(cm.history) == 12  # the history is never shortened
    assert view[-4:] == [m for m in (turn(3) + turn(4))]
    valid(view)


def test_token_trigger_fires_alone(tmp_path: Path) -> None:
    trig = SummaryTriggerConfig(trigger_messages=0, trigger_tokens=2_000, keep_messages=2)
    cm = manager(tmp_path, trig)
    base(cm)
    i = 0
    while cm.view_tokens < 1_900:
        cm.add_many(turn(i, "y" * 400))
        i += 1
        view = cm.prepare()
        assert cm.last_prepare is not None and cm.last_prepare.tier is Tier.NONE
    while cm.last_prepare is not None and not cm.last_prepare.changed:
        cm.add_many(turn(i, "y" * 400))
        i += 1
        view = cm.prepare()
    rec = cm.last_prepare
    assert rec is not None and "triggerTokens 2000" in rec.reason
    assert rec.tokens_before >= 2_000 and rec.tokens_after < rec.tokens_before
    valid(view)


@pytest.mark.parametrize(
    ("trig", "why"),
    [
        (
            SummaryTriggerConfig(trigger_messages=1_000, trigger_tokens=1_000, keep_messages=4),
            "triggerTokens",
        ),
        (
            SummaryTriggerConfig(trigger_messages=10, trigger_tokens=1_000_000, keep_messages=4),
            "triggerMessages",
        ),
    ],
)
def test_either_trigger_fires(tmp_path: Path, trig: SummaryTriggerConfig, why: str) -> None:
    cm = manager(tmp_path, trig)
    base(cm)
    for i in range(5):
        cm.add_many(turn(i, "z" * 1_000))  # 12 messages, ~1,300 tokens
    cm.prepare()
    assert cm.last_prepare is not None and cm.last_prepare.changed
    assert why in cm.last_prepare.reason


def test_token_trigger_is_capped_below_a_small_window(tmp_path: Path) -> None:
    # triggerTokens 80,000 cannot fire in a 10,000 window: the trigger fires at 75% of it
    cm = manager(tmp_path, SummaryTriggerConfig(trigger_messages=0), context_window=10_000)
    base(cm)
    i = 0
    while cm.view_tokens < 7_600:
        cm.add_many(turn(i, "q" * 1_000))
        i += 1
    cm.prepare()
    assert cm.last_prepare is not None and cm.last_prepare.changed
    assert "triggerTokens 7500" in cm.last_prepare.reason


# ------------------------------------------------------------------------------- the kept tail


def test_keep_messages_never_splits_a_tool_pair(tmp_path: Path) -> None:
    cm = manager(tmp_path, SummaryTriggerConfig(trigger_messages=13, keep_messages=3))
    base(cm)
    for i in range(3):
        cm.add_many(turn(i))
    last = turn(3, n_calls=4)  # assistant + 4 results: n - 3 falls inside the group
    cm.add_many(last)
    view = cm.prepare()
    assert cm.last_prepare is not None and cm.last_prepare.changed
    assert view[-5:] == last  # the whole group is kept, not only its last 3 messages
    valid(view)
    assert view[:2] == [SYSTEM, TASK]


def test_keep_messages_exact_tail(tmp_path: Path) -> None:
    cm = manager(tmp_path, SummaryTriggerConfig(trigger_messages=20, keep_messages=6))
    base(cm)
    sent: list[dict[str, Any]] = []
    for i in range(9):
        sent += turn(i)
    cm.add_many(sent)
    view = cm.prepare()
    rec = cm.last_prepare
    assert rec is not None and rec.changed
    assert view[-6:] == sent[-6:]
    assert view[-7]["content"].startswith("[Context Compaction]")
    assert rec.preserved_tail == 6
    assert rec.summarized == len(sent) + 1 - 6  # the task message is summarized (and pinned)


def test_keep_tokens_overrides_keep_messages(tmp_path: Path) -> None:
    trig = SummaryTriggerConfig(trigger_messages=20, keep_messages=15, keep_tokens=700)
    cm = manager(tmp_path, trig)
    base(cm)
    for i in range(10):
        cm.add_many(turn(i, "k" * 1_000))  # ~270 tokens per pair
    view = cm.prepare()
    assert cm.last_prepare is not None and cm.last_prepare.changed
    idx = next(i for i, d in enumerate(view) if str(d.get("content")).startswith("[Context"))
    tail = view[idx + 1 :]
    tail_tokens = sum(cm.view.tokens_of(i) for i in range(cm.view.boundary, len(cm.view)))
    assert tail_tokens <= 700
    assert len(tail) == 4  # two pairs fit 700 tokens, not 15 messages
    assert tail[0]["role"] == "assistant"
    valid(view)


# ------------------------------------------------------------------------------- summary format


def test_harness_llm_prompt_has_the_four_sections(tmp_path: Path) -> None:
    llm = ScriptedLLM(default=FOUR_SECTION_REPLY)
    cm = manager(
        tmp_path,
        SummaryTriggerConfig(trigger_messages=10, keep_messages=4),
        summarizer=LLMSummarizer(llm),
        fact_extractor="extractive",
    )
    base(cm)
    for i in range(5):
        cm.add_many(turn(i))
    cm.prepare()
    assert len(llm.calls) == 1
    prompt = llm.prompts[0]
    positions = [prompt.index(s) for s in SECTIONS]
    assert positions == sorted(positions)
    assert "Fix the failing date parser in src/dates.py." in prompt  # the transcript
    rec = cm.last_prepare
    assert rec is not None and rec.summarizer == "LLMSummarizer"
    assert rec.summary_text.startswith("Ran the steps")


def test_extractive_summarizer_fills_the_four_sections() -> None:
    msgs = [from_openai(TASK, 0)] + [from_openai(m, i + 1) for i, m in enumerate(turn(0))]
    text = ExtractiveSummarizer().summarize(SummaryRequest(messages=msgs, style="sections"))
    positions = [text.index(s) for s in SECTIONS]
    assert positions == sorted(positions)
    assert "date parser" in text.split("## SUMMARY")[0]


def test_harness_default_summary_style_is_sections(tmp_path: Path) -> None:
    summ = ScriptedSummarizer(default=FOUR_SECTION_REPLY)
    cm = ContextManager(
        workspace=tmp_path,
        session_id="t",
        token_counter=QuarterCounter(),
        preset="harness",
        summarizer=summ,
    )
    base(cm)
    for i in range(25):
        cm.add_many(turn(i))
    cm.prepare()
    assert len(summ.requests) == 1
    assert summ.requests[0].style == "sections"
    assert summ.requests[0].prompt is None  # the default four-section prompt


def test_four_section_summary_reaches_the_view_with_its_artifacts(tmp_path: Path) -> None:
    summ = ScriptedSummarizer(default=FOUR_SECTION_REPLY)
    cm = manager(
        tmp_path, SummaryTriggerConfig(trigger_messages=10, keep_messages=4), summarizer=summ
    )
    base(cm)
    for i in range(5):
        cm.add_many(turn(i))
    text = compaction_text(cm.prepare())
    assert "build id 4242" in text
    assert "src/dates.py rewritten" in text
    for section in SECTIONS:
        assert section in text


def test_custom_summary_prompt_is_sent_to_the_llm(tmp_path: Path) -> None:
    prompt = "CUSTOM-PROMPT-7 Summarize tersely.\n<<<\n{messages}\n>>>"
    llm = ScriptedLLM(default=FOUR_SECTION_REPLY)
    trig = SummaryTriggerConfig(trigger_messages=10, keep_messages=4, summary_prompt=prompt)
    cm = manager(tmp_path, trig, summarizer=LLMSummarizer(llm), fact_extractor="extractive")
    base(cm)
    for i in range(5):
        cm.add_many(turn(i))
    cm.prepare()
    sent = llm.prompts[0]
    assert sent.startswith("CUSTOM-PROMPT-7 Summarize tersely.\n<<<\n")
    assert sent.endswith("\n>>>")
    assert "{messages}" not in sent
    assert '"command": "ls 0 0"' in sent
    assert "## SESSION INTENT" not in sent  # the default template is not used


def test_dedicated_summary_model_is_used_and_main_model_is_not(tmp_path: Path) -> None:
    """The summarizer's own model (a ScriptedLLM) writes the summary; the agent's model is
    only called by the agent (here: never during prepare)."""
    mini = ScriptedLLM([FOUR_SECTION_REPLY, FOUR_SECTION_REPLY], model_name="mini")
    main = ScriptedLLM([], model_name="main")
    cm = manager(
        tmp_path,
        SummaryTriggerConfig(trigger_messages=10, keep_messages=4),
        summarizer=LLMSummarizer(mini),
        fact_extractor="extractive",
    )
    base(cm)
    for i in range(5):
        cm.add_many(turn(i))
    cm.prepare()
    for i in range(5, 9):
        cm.add_many(turn(i))
    view = cm.prepare()
    mini.assert_done()
    assert main.calls == []
    assert len(mini.calls) == 2
    # the second call merges the first summary in
    assert "Ran the steps; the parser fails on ISO weeks." in mini.prompts[1]
    valid(view)


def test_summarizer_failure_falls_back_to_extractive(tmp_path: Path) -> None:
    llm = ScriptedLLM([RuntimeError("model down")])
    cm = manager(
        tmp_path,
        SummaryTriggerConfig(trigger_messages=10, keep_messages=4),
        summarizer=LLMSummarizer(llm),
    )
    base(cm)
    for i in range(5):
        cm.add_many(turn(i))
    view = cm.prepare()
    rec = cm.last_prepare
    assert rec is not None and rec.changed
    assert "LLM summary failed" in rec.error
    assert "fallback" in rec.summarizer
    assert "date parser" in compaction_text(view)
    valid(view)


# ------------------------------------------------------------------------------- memory flush


def test_flush_before_compact_writes_memory_once(tmp_path: Path) -> None:
    seen: list[bool] = []
    holder: list[ContextManager] = []

    def summarize(request: SummaryRequest) -> str:
        # the flush runs before the summary, in the compaction's unit of work
        cm = holder[0]
        seen.append(bool(cm.session.pending_docs("memory") or cm.store.docs("memory")))
        return FOUR_SECTION_REPLY

    summ = ScriptedSummarizer(default=None, steps=[summarize, summarize])
    cm = manager(
        tmp_path, SummaryTriggerConfig(trigger_messages=10, keep_messages=4), summarizer=summ
    )
    holder.append(cm)
    base(cm)
    cm.add({"role": "user", "content": "Use PORT=8080 for the dev server."})
    for i in range(5):
        cm.add_many(turn(i))
    cm.prepare()
    assert seen == [True]
    text = cm.recovery.memory.get()
    assert "You must never edit tests/." in text
    assert "PORT=8080" in text
    first = text
    # the second compaction sees the same facts again (the task is pinned): no duplicates
    cm.add({"role": "user", "content": "Use PORT=8080 for the dev server."})
    for i in range(5, 10):
        cm.add_many(turn(i))
    cm.prepare()
    assert seen == [True, True]
    summ.assert_done()
    text = cm.recovery.memory.get()
    assert text.startswith(first)
    fact_lines = [ln for ln in text.splitlines() if ln.startswith("- [")]
    assert len(fact_lines) == len(set(fact_lines))
    assert sum("PORT=8080" in ln for ln in fact_lines) == 1
    assert sum("never edit tests/" in ln for ln in fact_lines) == 1
    hits = json.dumps(cm.handle_tool_call(memory_call("dev server port")))
    assert "PORT=8080" in hits


def memory_call(query: str) -> dict[str, Any]:
    return {
        "id": "m1",
        "type": "function",
        "function": {"name": "memory_search", "arguments": json.dumps({"query": query})},
    }


def test_flush_is_skipped_when_disabled(tmp_path: Path) -> None:
    trig = SummaryTriggerConfig(trigger_messages=10, keep_messages=4, flush_before_compact=False)
    cm = manager(tmp_path, trig)
    base(cm)
    for i in range(5):
        cm.add_many(turn(i))
    cm.prepare()
    assert cm.last_prepare is not None and cm.last_prepare.changed
    assert not (tmp_path / "memory").exists()


def test_raw_log_keeps_every_message_through_compaction(tmp_path: Path) -> None:
    cm = manager(tmp_path, SummaryTriggerConfig(trigger_messages=10, keep_messages=4))
    base(cm)
    for i in range(12):
        cm.add_many(turn(i))
        cm.prepare()
    logged = log_lines(tmp_path, "t")
    assert len(logged) == len(cm.history) == 26
    assert [e["uuid"] for e in logged] == [m.uuid for m in cm.history]
    assert logged[1]["message"] == TASK
    assert cm.compactor.state.compactions >= 2


def test_trigger_compaction_survives_a_restart(tmp_path: Path) -> None:
    trig = SummaryTriggerConfig(trigger_messages=10, keep_messages=4)
    cm = manager(tmp_path, trig)
    base(cm)
    for i in range(5):
        cm.add_many(turn(i))
    view = cm.prepare()
    again = manager(tmp_path, trig)
    assert again.view_messages == cm.view_messages
    assert again.prepare() == view


def test_harness_all_on_trajectory_stays_valid(tmp_path: Path) -> None:
    cm = ContextManager(
        workspace=tmp_path,
        session_id="t",
        token_counter=QuarterCounter(),
        config=harness_all_on(),
        context_window=50_000,
    )
    base(cm)
    newest = TASK
    for i in range(120):
        if i % 17 == 5:
            newest = {"role": "user", "content": f"Also handle case {i}."}
            cm.add(newest)
        cm.add_many(turn(i, "r" * (i * 37 % 3_000), n_calls=1 + i % 3))
        view = cm.prepare()
        valid(view)
        assert newest in view
        assert view[:2] == [SYSTEM, TASK]
        assert len(view) <= 50 + 4  # keepMessages 20 after each trigger at 50
