"""Run every integration example as a subprocess, so the README's snippets cannot rot. Each talks
only to its own fake OpenAI endpoint on 127.0.0.1."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT
from tests.integrations.integration_support import require

EXAMPLES = {
    "langchain_agent.py": "langchain.agents",
    "openai_agents_session.py": "agents",
    "pydantic_ai_agent.py": "pydantic_ai.models.openai",
}


@pytest.mark.parametrize("script", sorted(EXAMPLES))
def test_example_runs(script: str) -> None:
    require(EXAMPLES[script])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT / "src"), *filter(None, [env.get("PYTHONPATH")])]
    )
    for key in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        env.pop(key, None)  # the examples must not need (or reach) a real endpoint
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "examples" / script)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=REPO_ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "Recalled the old failure: True" in out, out
    assert "model requests: 33 (one refused for context overflow" in out, out
    match = re.search(r"compactions: (\d+)", out)
    assert match and int(match.group(1)) > 0, out


def test_importing_contextfold_loads_no_framework() -> None:
    code = (
        "import sys, contextfold, contextfold.integrations\n"
        "loaded = [m for m in ('langchain', 'langgraph', 'agents', 'pydantic_ai') "
        "if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "src"))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
