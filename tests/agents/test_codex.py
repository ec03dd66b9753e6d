"""Codex CLI (the real ``codex exec``, its default model, the Responses API streamed) through
``contextfold serve``: a long session of noisy build steps run with the free-form ``exec``
tool its default model is offered (``custom_tool_call`` items), then ``codex exec resume
--last`` with a question about the first failing run."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.agents.codex_script import CodexScript, exec_source
from tests.agents.harness import (
    STORES,
    Stack,
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


def _length(output: Any) -> int:
    return len(output if isinstance(output, str) else json.dumps(output, ensure_ascii=False))


def check_custom_calls(st: Stack, plan: Plan) -> dict[str, int]:
    """Every free-form call the upstream got back is the model's own, byte for byte, and is
        answered in its own kind (``custom_tool_call_output``); returns how many calls were
        checked and how many of their outputs the gateway compacted (sent shorter than it first did,
    or left out of a later view)."""
    sources = {f"call_task_{n}": exec_source(step) for n, step in enumerate(plan.steps)}
    checked = 0
    first: dict[str, int] = {}
    shortened: set[str] = set()
    for rec in st.fake.accepted("/v1/responses"):
        items = [i for i in rec.body.get("input") or [] if isinstance(i, dict)]
        present = {str(i.get("call_id")) for i in items if i.get("type") == "custom_tool_call"}
        shortened |= {cid for cid in first if cid not in present}
        kinds = {str(i.get("call_id")): i.get("type") for i in items if "call_id" in i}
        for item in items:
            if item.get("type") != "custom_tool_call":
                continue
            cid = str(item.get("call_id"))
            assert item.get("name") == "exec" and item.get("input") == sources[cid], item
            checked += 1
        for item in items:
            if item.get("type", "").endswith("_output") and kinds.get(str(item.get("call_id"))):
                call_kind = next(
                    i["type"]
                    for i in items
                    if i.get("call_id") == item["call_id"] and not i["type"].endswith("_output")
                )
                assert item["type"] == f"{call_kind}_output", (item["type"], call_kind)
            if item.get("type") == "custom_tool_call_output":
                cid = str(item.get("call_id"))
                size = _length(item.get("output"))
                first.setdefault(cid, size)
                if size < first[cid]:
                    shortened.add(cid)
    return {"custom_calls_checked": checked, "custom_outputs_compacted": len(shortened)}


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
        assert script.custom_calls, "Codex's default model was not offered its exec tool"
        custom = check_custom_calls(st, plan)
        assert custom["custom_outputs_compacted"], f"no free-form call's output compacted: {custom}"
        figures.update(custom)
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
