"""Claude Code (the real ``claude`` CLI) through ``contextfold serve``: a long session whose
tool outputs outgrow the upstream's context limit several times, streamed as Claude Code always
streams, then ``--continue`` with a question about the first failing run."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.agents.claude_script import ClaudeScript
from tests.agents.harness import (
    STORES,
    agent_program,
    base_env,
    check_session,
    make_project,
    run_agent,
    stack,
)
from tests.agents.plan import FOLLOWUP, TASK, Plan, first_error

pytestmark = pytest.mark.timeout(900)

#: Claude Code sends about 22K tokens of system prompt and tools with every request
LIMIT = 45_000


def claude_session(
    tmp_path: Path,
    store: str,
    plan: Plan,
    model: str | None,
    *,
    times: int,
    compact: bool = False,
) -> dict[str, object]:
    """One task session and one follow-up; the tool outputs alone come to more than ``times``
    the upstream's limit. ``compact``: Claude Code compacts itself (``/compact``) before the
    follow-up, which then starts with its summary."""
    assert plan.output_chars // 4 > times * LIMIT, "the plan must outgrow the limit"
    claude = agent_program("claude-code")
    project = make_project(tmp_path / "project")
    with stack(tmp_path, store, limit=LIMIT) as st:
        script = ClaudeScript(plan, project)
        st.fake.default = script
        env = base_env(tmp_path / "home")
        env.update(
            {
                "ANTHROPIC_BASE_URL": st.url,
                "ANTHROPIC_API_KEY": "sk-ant-contextfold-test",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                "DISABLE_AUTOUPDATER": "1",
            }
        )
        # the prompt first: --allowedTools takes every word after it
        options = ["-p", "--output-format", "stream-json", "--verbose"]
        options += ["--allowedTools", "Bash,Read,Edit"]
        if model:
            options += ["--model", model]
        started = time.monotonic()
        run_agent([str(claude), TASK, *options], project, env, timeout=600, st=st)
        if compact:
            run_agent([str(claude), "/compact", "--continue", *options], project, env, timeout=300)
        run_agent([str(claude), FOLLOWUP, "--continue", *options], project, env, timeout=300, st=st)
        seconds = time.monotonic() - started
        figures = check_session(st, route="/v1/messages")
        continued = st.log_events("client_compaction_continued")
        if compact:
            assert script.compactions, "Claude Code never asked for its compaction summary"
            assert continued, "the follow-up after Claude Code's compaction opened a new session"
        figures.update(compactions_by_client=script.compactions, continued=len(continued))
        # the agent really worked in the project
        assert "sum(values)\n" in (project / "app.py").read_text()
        assert (project / "progress.txt").read_text().strip() == "started"
        assert script.followups, "the follow-up question never reached the upstream"
        assert first_error() in script.followups[-1], (
            "the follow-up's request holds neither the first failing run's error nor a recall "
            f"of it (recall called: {script.recalled})"
        )
        return {**figures, "recalled": script.recalled, "seconds": round(seconds, 1)}


@pytest.mark.parametrize("store", STORES)
def test_claude_code_short_session(tmp_path: Path, store: str) -> None:
    """Claude Code with its default model (it sends mid-conversation system messages)."""
    print(claude_session(tmp_path, store, Plan(runs=16), None, times=1))


def test_claude_code_own_compaction(tmp_path: Path) -> None:
    """Claude Code compacts itself (``/compact``): its next requests start with its summary,
    another conversation key; the gateway continues the same session (the summarized
    messages retracted, recoverable), so the follow-up still gets the old output."""
    print(claude_session(tmp_path, "embedded", Plan(runs=16), None, times=1, compact=True))


@pytest.mark.long
@pytest.mark.parametrize("store", STORES)
def test_claude_code_sonnet_short_session(tmp_path: Path, store: str) -> None:
    print(claude_session(tmp_path, store, Plan(runs=16), "claude-sonnet-4-6", times=1))


@pytest.mark.long
@pytest.mark.parametrize("store", STORES)
def test_claude_code_long_session(tmp_path: Path, store: str) -> None:
    print(claude_session(tmp_path, store, Plan(runs=90), None, times=6))


@pytest.mark.long
@pytest.mark.parametrize("store", STORES)
def test_claude_code_sonnet_long_session(tmp_path: Path, store: str) -> None:
    print(claude_session(tmp_path, store, Plan(runs=90), "claude-sonnet-4-6", times=6))
