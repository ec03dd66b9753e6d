"""Codex CLI (the real ``codex exec``, its default model, the Responses API streamed) through
``contextfold serve``: a long session of noisy build steps run with ``exec_command``, then
``codex exec resume --last`` with a question about the first failing run."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.agents.codex_script import CodexScript
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

#: Codex sends about 13K tokens of instructions and tools with every request
LIMIT = 30_000


def codex_config(base_url: str) -> str:
    """``$CODEX_HOME/config.toml`` pointing Codex at the gateway (the README's set-up)."""
    return (
        'model_provider = "contextfold"\n\n'
        "[model_providers.contextfold]\n"
        'name = "contextfold"\n'
        f'base_url = "{base_url}/v1"\n'
        'wire_api = "responses"\n'
        'env_key = "OPENAI_API_KEY"\n'
    )


def codex_session(tmp_path: Path, store: str, plan: Plan, *, times: int) -> dict[str, object]:
    codex = agent_program("codex")
    assert plan.output_chars // 4 > times * LIMIT, "the plan must outgrow the limit"
    project = make_project(tmp_path / "project")
    started = time.monotonic()
    with stack(tmp_path, store, limit=LIMIT) as st:
        script = CodexScript(plan)
        st.fake.default = script
        env = base_env(tmp_path / "home")
        codex_home = tmp_path / "home" / ".codex"
        codex_home.mkdir(parents=True)
        # no update check and no analytics: the tests talk to 127.0.0.1 only
        config = "check_for_update_on_startup = false\n" + codex_config(st.url)
        (codex_home / "config.toml").write_text(config + "\n[analytics]\nenabled = false\n")
        env.update({"CODEX_HOME": str(codex_home), "OPENAI_API_KEY": "sk-contextfold-test"})
        command = [str(codex), "exec", "--skip-git-repo-check"]
        command += ["--dangerously-bypass-approvals-and-sandbox"]
        run_agent([*command, TASK], project, env, timeout=800, st=st)
        run_agent([*command, "resume", "--last", FOLLOWUP], project, env, timeout=300, st=st)
        figures = check_session(st, route="/v1/responses")
    assert "sum(values)\n" in (project / "app.py").read_text()
    assert (project / "progress.txt").read_text().strip() == "started"
    assert script.followups, "the follow-up question never reached the upstream"
    assert first_error() in script.followups[-1], (
        "the follow-up's request holds neither the first failing run's error nor a recall "
        f"of it (recall called: {script.recalled})"
    )
    return {**figures, "recalled": script.recalled, "seconds": round(time.monotonic() - started, 1)}


@pytest.mark.parametrize("store", STORES)
def test_codex_short_session(tmp_path: Path, store: str) -> None:
    print(codex_session(tmp_path, store, Plan(runs=12), times=1))


@pytest.mark.long
@pytest.mark.parametrize("store", STORES)
def test_codex_long_session(tmp_path: Path, store: str) -> None:
    print(codex_session(tmp_path, store, Plan(runs=60), times=5))
