"""Automatic injection through the gateway never injects evidence the view still shows: every
output in the reminder block is one whose tool result left the view sent upstream (replaced by
a placeholder or removed), and the client's task message is never in it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.gateway.gateway_fakes import Reply
from tests.gateway.gateway_helpers import long_trace, running
from tests.gateway.test_gateway_openai import _ask, _client, replay

QUESTIONS = (
    "What was the exact error output of the first test run earlier?",
    "Show me again what the last command printed before, in full",
    "之前第一次运行的完整输出是什么？",
)


def _shown_results(sent: list[dict[str, Any]]) -> dict[str, str]:
    """Tool results the upstream view shows, by tool call id."""
    return {
        str(m["tool_call_id"]): str(m.get("content"))
        for m in sent
        if m.get("role") == "tool" and m.get("tool_call_id")
    }


def test_injected_evidence_is_never_still_in_the_view(tmp_path: Path) -> None:
    trace = long_trace(100)
    originals = {str(m["tool_call_id"]): str(m["content"]) for m in trace if m["role"] == "tool"}
    task = str(trace[1]["content"])
    injected_any = 0
    with running(tmp_path, limit=12_000, context_window=8_000) as (fake, gw):
        client = _client(gw.url)
        messages, _ = replay(fake, client, trace, stream=False, script="trace", turns=40)
        fake.scripts["plain"] = lambda call: Reply(text="Here it is.")
        # the task's own words: the task is pinned in the view, and indexed with the range of
        # messages a compaction removed around it
        words = " ".join(task.split()[:12])
        for question in (*QUESTIONS, f"Show me again the earlier message that said: {words}"):
            asked = [*messages, {"role": "user", "content": question}]
            _ask(client, asked, stream=False, script="plain")
            sent = fake.received[-1].body["messages"]
            assert sent[-1] == {"role": "user", "content": question}
            blocks = [
                str(m["content"])
                for m in sent[:-1]
                if m.get("role") == "user" and "<system-reminder>" in str(m.get("content"))
            ]
            shown = _shown_results(sent)
            for block in blocks:
                calls = re.findall(r"tool call (\S+?)(?: ·|\n)", block)
                injected_any += len(calls)
                for call in calls:
                    assert shown.get(call) != originals.get(call), (
                        f"{call} is injected while the view still shows it in full"
                    )
                assert task[:200] not in block, "the task message (still in view) was injected"
    assert injected_any, "no question injected anything: the test proves nothing"


def _mini_conversation() -> list[dict[str, Any]]:
    """mini-swe-agent's shape (observations as user text): two failing runs of reproduce.py,
    module reads, a fix, a passing run (the session of tests/evidence/test_evidence_ordinals.py)."""
    from tests.evidence.test_evidence_ordinals import FIRST_TB, LISTING, SECOND_TB, SYSTEM, TASK

    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": TASK},
    ]

    def step(thought: str, command: str, rc: int, output: str) -> None:
        msgs.append(
            {
                "role": "assistant",
                "content": f"THOUGHT: {thought}\n\n```mswea_bash_command\n{command}\n```",
            }
        )
        msgs.append(
            {
                "role": "user",
                "content": f"<returncode>{rc}</returncode>\n<output>\n{output}</output>",
            }
        )

    step("Reproduce the issue first.", "python reproduce.py", 1, FIRST_TB)
    for i in range(6):
        step(f"Read module {i}.", f"cat src/mod_{i}.py", 0, LISTING)
    step("Run it again after the lookup change.", "python reproduce.py", 1, SECOND_TB)
    for i in range(6, 12):
        step(f"Read module {i}.", f"cat src/mod_{i}.py", 0, LISTING)
    step("Fix it.", "sed -i 's/MONTHS\\[m\\]/month_of(m)/' src/dates.py", 0, "")
    step("Check the fix.", "python reproduce.py", 0, "ok\n")
    return msgs


def test_gateway_never_injects_the_task_still_in_view(tmp_path: Path) -> None:
    """The pinned task message is evidence too (it was in a range a compaction indexed) but
    the view still shows it: the reminder block has the first failing run, never the task."""
    from tests.evidence.test_evidence_ordinals import TASK

    with running(tmp_path, limit=12_000, context_window=8_000) as (fake, gw):
        fake.scripts["plain"] = lambda call: Reply(text="Here it is.")
        client = _client(gw.url)
        question = "What was the error of the first failing run?"
        _ask(
            client,
            [*_mini_conversation(), {"role": "user", "content": question}],
            stream=False,
            script="plain",
        )
    sent = fake.received[-1].body["messages"]
    assert sent[-1] == {"role": "user", "content": question}
    blocks = [
        str(m.get("content")) for m in sent[:-1] if "<system-reminder>" in str(m.get("content"))
    ]
    assert blocks, "nothing was injected"
    assert "KeyError: 13" in blocks[0]
    assert any(TASK in str(m.get("content")) for m in sent if m not in blocks), "task in view"
    assert all("Please solve this issue" not in b for b in blocks)
