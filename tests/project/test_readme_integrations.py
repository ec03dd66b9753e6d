"""The README's LangChain, OpenAI Agents SDK and pydantic-ai snippets, run as written.

Each block is read from README.md and run as a script in a fresh folder, with the real framework
and the real OpenAI SDK; only the environment differs from a user's: ``OPENAI_BASE_URL`` points
at contextfold's own fake OpenAI server (``contextfold.testing``), which asks for the snippet's
``word_count`` tool once and then answers. Each snippet runs twice in the same folder, as a user
re-running the script would: the OpenAI Agents SDK's session continues (both runs in one
session), LangChain and pydantic-ai start a new history of their own, which contextfold refuses
before writing anything, saying to use a new ``session_id`` (what the README says).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from contextfold import ContextManager
from contextfold.testing import FakeReply, FakeRequest, fake_openai_server
from tests.conftest import REPO_ROOT
from tests.integrations.integration_support import require

SNIPPETS = {  # marker: (module, session id, whether a second run continues the session)
    "**LangChain v1**": ("langchain_openai", "langchain-demo", False),
    "**OpenAI Agents SDK**": ("agents", "agents-demo", True),
    "**pydantic-ai**": ("pydantic_ai", "pydantic-demo", False),
}


def _block_after(marker: str) -> str:
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    at = text.index(marker)
    match = re.search(r"```python\n(.*?)```", text[at:], re.S)
    assert match is not None, f"no python block after {marker!r} in README.md"
    return match.group(1)


def _answered_tool(body: dict[str, Any]) -> bool:
    """Whether the request ends with the result of a tool call (Chat or Responses)."""
    items = body.get("messages") or body.get("input") or []
    if isinstance(items, str) or not items or not isinstance(items[-1], dict):
        return False
    return items[-1].get("role") == "tool" or items[-1].get("type") == "function_call_output"


_CALL_IDS = itertools.count(1)


def _script(request: FakeRequest) -> FakeReply | str:
    if _answered_tool(request.body):
        return "The text has 3 words."
    call_id = f"call_wc{next(_CALL_IDS)}"  # unique, as a provider's are
    return FakeReply(tool_calls=[(call_id, "word_count", {"text": "a b c"})])


def _run(code: Path, folder: Path, base_url: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.update(
        OPENAI_BASE_URL=base_url,
        OPENAI_API_KEY="test-key",
        OPENAI_AGENTS_DISABLE_TRACING="1",  # the SDK would upload traces to api.openai.com
        PYTHONPATH=os.pathsep.join(
            [str(REPO_ROOT / "src"), *filter(None, [env.get("PYTHONPATH")])]
        ),
    )
    env.pop("CONTEXTFOLD_STORE", None)
    return subprocess.run(
        [sys.executable, str(code)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=folder,
    )


def _stored(folder: Path, session_id: str) -> list[Any]:
    with ContextManager(folder / ".contextfold", session_id) as cm:
        return list(cm.history)


@pytest.mark.parametrize("marker", sorted(SNIPPETS))
def test_the_readme_integration_snippet_runs_as_written(marker: str, tmp_path: Path) -> None:
    module, session_id, continues = SNIPPETS[marker]
    require(module)
    code = tmp_path / "snippet.py"
    code.write_text(_block_after(marker), encoding="utf-8")
    with fake_openai_server(script=_script) as fake:
        done = _run(code, tmp_path, fake.base_url)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "3 words" in done.stdout, done.stdout
        after_first = _stored(tmp_path, session_id)
        again = _run(code, tmp_path, fake.base_url)
        requests = list(fake.requests)
    assert requests and all(r.error is None for r in requests), [r.error for r in requests]
    offered = {
        (t.get("function") or {}).get("name") or t.get("name") for t in requests[0].body["tools"]
    }
    assert "word_count" in offered, offered
    results = [m for m in after_first if m.role == "tool"]
    assert len(results) == 1 and results[0].content == "3", results
    history = _stored(tmp_path, session_id)
    if continues:
        assert again.returncode == 0, again.stderr[-3000:]
        assert "3 words" in again.stdout, again.stdout
        assert history[: len(after_first)] == after_first
        users = [m for m in history if m.role == "user"]
        assert len(users) == 2 and all("a b c" in json.dumps(m.content) for m in users)
        assert [m.role for m in history].count("tool") == 2
    else:
        assert again.returncode != 0
        assert "HistoryDivergedError" in again.stderr and "new session_id" in again.stderr
        assert history == after_first  # refused before anything was written
