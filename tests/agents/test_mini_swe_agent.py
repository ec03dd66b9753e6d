"""mini-swe-agent (the real ``mini`` CLI, its default config: one ``bash`` tool call per step,
through LiteLLM) through ``contextfold serve``: a long run of noisy build steps, then, when it
asks for a new task, a question about the first failing run."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.agents.harness import (
    STORES,
    agent_program,
    base_env,
    check_session,
    make_project,
    run_agent,
    stack,
)
from tests.agents.mini_script import MiniScript
from tests.agents.plan import FOLLOWUP, Plan, first_error

pytestmark = pytest.mark.timeout(900)

LIMIT = 16_000
#: a model LiteLLM knows the prices of, served by the fake upstream under that name
MODEL = "openai/gpt-4.1-mini"


def mini_session(tmp_path: Path, store: str, plan: Plan, *, times: int) -> dict[str, object]:
    mini = agent_program("mini-swe-agent")
    assert plan.output_chars // 4 > times * LIMIT, "the plan must outgrow the limit"
    project = make_project(tmp_path / "project")
    started = time.monotonic()
    with stack(tmp_path, store, limit=LIMIT) as st:
        script = MiniScript(plan)
        st.fake.default = script
        env = base_env(tmp_path / "home")
        env.update(
            {
                "OPENAI_API_BASE": st.url + "/v1",
                "OPENAI_API_KEY": "sk-contextfold-test",
                "MSWEA_CONFIGURED": "true",  # no first-run set-up questions
                "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # its bundled prices, no download
            }
        )
        command = [str(mini), "--yolo", "-m", MODEL, "-t", "Fix app.py and run the build steps."]
        command += ["-o", str(tmp_path / "trajectory.json")]
        # when the agent wants to finish it asks for a new task: the follow-up, then Enter
        run_agent(command, project, env, timeout=800, st=st, stdin=f"{FOLLOWUP}\n\n")
        figures = check_session(st, route="/v1/chat/completions")
    assert "sum(values)\n" in (project / "app.py").read_text()
    assert (project / "progress.txt").read_text().strip() == "started"
    assert script.followups, "the follow-up question never reached the upstream"
    assert first_error() in script.followups[-1], (
        "the follow-up's request holds neither the first failing run's error nor a recall "
        f"of it (recall called: {script.recalled})"
    )
    return {**figures, "recalled": script.recalled, "seconds": round(time.monotonic() - started, 1)}


@pytest.mark.parametrize("store", STORES)
def test_mini_swe_agent_short_session(tmp_path: Path, store: str) -> None:
    print(mini_session(tmp_path, store, Plan(runs=12), times=1))


@pytest.mark.long
@pytest.mark.parametrize("store", STORES)
def test_mini_swe_agent_long_session(tmp_path: Path, store: str) -> None:
    print(mini_session(tmp_path, store, Plan(runs=40), times=5))
