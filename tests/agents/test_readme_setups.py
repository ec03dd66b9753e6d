"""The README's set-up line for each agent is the one the agent tests run with: the same
variables, flags and config keys (the gateway's address aside)."""

from __future__ import annotations

import json
import re

from tests.agents.test_codex import codex_config
from tests.gateway.gateway_helpers import REPO

SECTION = "## Use it with Claude Code / Codex / Gemini CLI / aider / mini-swe-agent"


def _rows() -> dict[str, str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert SECTION in text, "the README lost its agents section"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        match = re.match(r"\| ([A-Za-z -]+?) \(([\d.]+)\) \| (.+) \|$", line)
        if match:
            rows[match.group(1)] = match.group(3)
    return rows


def test_every_agent_has_a_set_up_line_with_the_tested_version() -> None:
    from tests.agents.harness import _installer

    agents = _installer().AGENTS
    text = (REPO / "README.md").read_text(encoding="utf-8")
    rows = _rows()
    names = {
        "Claude Code": "claude-code",
        "Codex CLI": "codex",
        "Gemini CLI": "gemini-cli",
        "aider": "aider",
        "mini-swe-agent": "mini-swe-agent",
    }
    assert set(rows) == set(names), f"README rows: {sorted(rows)}"
    for title, key in names.items():
        assert f"{title} ({agents[key].version})" in text, f"{title}: not the tested version"


def test_set_up_lines_match_the_tests() -> None:
    rows = _rows()
    assert "ANTHROPIC_BASE_URL=http://127.0.0.1:8787 claude" in rows["Claude Code"]
    for line in codex_config("http://127.0.0.1:8788").splitlines():
        assert not line or f"`{line}`" in rows["Codex CLI"], line
    gemini = rows["Gemini CLI"]
    assert "GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:8789" in gemini and "GEMINI_API_KEY=" in gemini
    settings = json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}})
    assert settings[1:-1] in gemini
    assert "--openai-api-base http://127.0.0.1:8788/v1 --model openai/" in rows["aider"]
    assert "OPENAI_API_BASE=http://127.0.0.1:8788/v1 mini -m openai/" in rows["mini-swe-agent"]
