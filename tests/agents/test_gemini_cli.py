"""Gemini CLI (the real ``gemini``, its default model routing, the Gemini API streamed with
``alt=sse``) through ``contextfold serve``: a long session of noisy build steps run with
``run_shell_command``, then ``--resume latest`` with a question about the first failing run."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.agents.gemini_script import GeminiScript
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

#: Gemini CLI sends about 12K tokens of system instruction and tools with every request
LIMIT = 30_000


def gemini_session(
    tmp_path: Path, store: str, plan: Plan, *, times: int, fire_loop: bool = False
) -> dict[str, object]:
    gemini = agent_program("gemini-cli")
    assert plan.output_chars // 4 > times * LIMIT, "the plan must outgrow the limit"
    project = make_project(tmp_path / "project")
    started = time.monotonic()
    with stack(tmp_path, store, limit=LIMIT) as st:
        script = GeminiScript(plan, project, fire_loop=fire_loop)
        st.fake.default = script
        home = tmp_path / "home"
        env = base_env(home)
        (home / ".gemini").mkdir(parents=True)
        settings = {
            "security": {"auth": {"selectedType": "gemini-api-key"}},
            # no usage statistics and no telemetry: the tests talk to 127.0.0.1 only
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
        }
        (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
        env.update({"GEMINI_API_KEY": "contextfold-test-key", "GOOGLE_GEMINI_BASE_URL": st.url})
        command = [str(gemini), "--yolo", "--skip-trust", "--output-format", "stream-json"]
        run_agent([*command, "-p", TASK], project, env, timeout=800, st=st)
        run_agent(
            [*command, "--resume", "latest", "-p", FOLLOWUP], project, env, timeout=300, st=st
        )
        figures = check_session(st, route="/v1beta/models")
    assert "sum(values)\n" in (project / "app.py").read_text()
    assert (project / "progress.txt").read_text().strip() == "started"
    assert script.followups, "the follow-up question never reached the upstream"
    assert first_error() in script.followups[-1], (
        "the follow-up's request holds neither the first failing run's error nor a recall "
        f"of it (recall called: {script.recalled})"
    )
    seconds = round(time.monotonic() - started, 1)
    return {
        **figures,
        "recalled": script.recalled,
        "side_calls": script.side_calls,
        "loop_checks": script.loop_checks,
        "loop_fired": script.loop_fired,
        "loop_feedbacks": script.loop_feedbacks,
        "seconds": seconds,
    }


@pytest.mark.parametrize("store", STORES)
def test_gemini_cli_short_session(tmp_path: Path, store: str) -> None:
    print(gemini_session(tmp_path, store, Plan(runs=12), times=1))


def test_gemini_cli_loop_detection(tmp_path: Path) -> None:
    """Gemini CLI's loop detection fires (its loop check, asked after 30 turns of one prompt,
    is told "stuck"): Gemini CLI drops the tool results it was about to send and sends its
    loop feedback after the unanswered call. Gemini refuses such a request; through the
    gateway the session goes on, with the abandoned call left out of the view."""
    figures = gemini_session(tmp_path, "embedded", Plan(runs=32), times=2, fire_loop=True)
    print(figures)
    assert figures["loop_fired"], f"the loop check never ran: {figures}"
    assert figures["loop_feedbacks"], f"Gemini CLI never sent its loop feedback: {figures}"


@pytest.mark.long
@pytest.mark.parametrize("store", STORES)
def test_gemini_cli_long_session(tmp_path: Path, store: str) -> None:
    print(gemini_session(tmp_path, store, Plan(runs=60), times=5))
