"""Claude Code (the real ``claude`` CLI) through ``contextfold serve``: a long session whose
tool outputs outgrow the upstream's context limit several times, streamed as Claude Code always
streams, then ``--continue`` with a question about the first failing run."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import pytest

from tests.agents.claude_script import ClaudeScript
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
from tests.gateway.gateway_fake_wire import count_tokens

pytestmark = pytest.mark.timeout(900)

#: Claude Code 2.1.332 sends about 10K tokens of system prompt and tools with every request
#: (its other tools are loaded on demand through ToolSearch; older versions sent 22-26K)
LIMIT = 45_000


def _transcript_blocks(home: Path) -> set[str]:
    """Every content block of Claude Code's own session transcripts, as JSON: what the client
    sent (a block the gateway compacted is not among them)."""
    out: set[str] = set()
    for path in (home / ".claude" / "projects").glob("*/*.jsonl"):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            message = entry.get("message") if isinstance(entry, dict) else None
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict):
                    out.add(_block_key(block))
    return out


def _block_key(block: dict[str, Any]) -> str:
    keep = {k: v for k, v in block.items() if k in ("type", "text", "tool_use_id", "id", "input")}
    content = block.get("content")
    if isinstance(content, list):
        content = "".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
    keep["content"] = content
    return json.dumps(keep, sort_keys=True, ensure_ascii=False)


def _verbatim(message: dict[str, Any], client: set[str]) -> bool:
    """A message as the client sent it: each of its tool calls and results is one of the
    client's own blocks, and a message of text alone holds one of the client's texts (a
    summary or an injection by the gateway does not). Claude Code adds ``<system-reminder>``
    text blocks to its messages as it sends them, so text next to a tool block is not
    compared."""
    content = message.get("content")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if not isinstance(content, list) or not content:
        return False
    tools = [b for b in content if b.get("type") != "text"]
    if tools:
        return all(_block_key(b) in client for b in tools)
    return any(_block_key(b) in client for b in content)


def part4_figures(st: Stack, home: Path, window: int) -> dict[str, Any]:
    """How often the gateway compacts once the conversation is long, how much of the room
    after the fixed prefix its verbatim messages use, and whether the compaction header
    describes each turn only."""
    client = _transcript_blocks(home)
    main = [
        r
        for r in st.fake.accepted()
        if r.path.split("?")[0] == "/v1/messages" and r.body.get("tools")
    ]
    shares = []
    prefixes = []
    for r in main:
        fixed = count_tokens({"system": r.body.get("system"), "tools": r.body.get("tools")})
        prefixes.append(fixed)
        verbatim = [m for m in r.body["messages"] if _verbatim(m, client)]
        shares.append(count_tokens({"messages": verbatim}) / max(1, window - fixed))
    events = [e for e in st.log_events("request") if e.get("route") == "/v1/messages"]
    marked = [i for i, e in enumerate(events) if e.get("compaction")]
    compactions = len(st.log_events("compaction"))
    first = marked[0] if marked else len(events)
    after = len(events) - first
    long_shares = shares[len(shares) - after :] if after else []
    return {
        "turns": len(events),
        "fixed_prefix": max(prefixes, default=0),
        "compactions": compactions,
        "compacted_turns": marked,
        "turns_since_first_compaction": after,
        "verbatim_share_median": round(statistics.median(long_shares), 2) if long_shares else 0,
        "verbatim_share_min": round(min(long_shares), 2) if long_shares else 0,
        "verbatim_share_max": round(max(long_shares), 2) if long_shares else 0,
    }


def claude_session(
    tmp_path: Path,
    store: str,
    plan: Plan,
    model: str | None,
    *,
    times: int,
    compact: bool = False,
    limit: int = LIMIT,
    env_extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One task session and one follow-up; the tool outputs alone come to more than ``times``
    the upstream's limit. ``compact``: Claude Code compacts itself (``/compact``) before the
    follow-up, which then starts with its summary. ``env_extra``: Claude Code's own settings."""
    assert plan.output_chars // 4 > times * limit, "the plan must outgrow the limit"
    claude = agent_program("claude-code")
    project = make_project(tmp_path / "project")
    with stack(tmp_path, store, limit=limit) as st:
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
        env.update(env_extra or {})
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
        figures["part4"] = part4_figures(st, tmp_path / "home", limit)
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


def _check_part4(part4: dict[str, Any], verbatim: float) -> None:
    assert part4["compacted_turns"], f"the session never outgrew the window: {part4}"
    assert len(part4["compacted_turns"]) == part4["compactions"], part4
    assert (part4["compactions"] - 1) * 5 <= part4["turns_since_first_compaction"], part4
    assert part4["verbatim_share_max"] >= verbatim, part4


@pytest.mark.long
def test_claude_code_fixed_prefix_numbers(tmp_path: Path) -> None:
    """The issue's numbers for Claude Code's big fixed prefix in an 80K window: its system
    prompt and every tool schema up front (``ENABLE_TOOL_SEARCH=false``, its on-demand tool
    loading off: about 17.5K tokens, measured 0.57). Once the conversation is
    long the gateway compacts on at most 1 turn in 5; the messages it sends verbatim use at
    least half of the room the window leaves after the fixed prefix before it compacts;
    ``X-Contextfold-Compaction`` (the log's ``compaction`` field) is set on as many answers as
    there were compactions."""
    figures = claude_session(
        tmp_path,
        "embedded",
        Plan(runs=90),
        None,
        times=3,
        limit=80_000,
        env_extra={"ENABLE_TOOL_SEARCH": "false"},
    )
    print(figures)
    assert figures["part4"]["fixed_prefix"] > 15_000, figures["part4"]
    _check_part4(figures["part4"], 0.5)


@pytest.mark.long
def test_claude_code_default_prefix_numbers(tmp_path: Path) -> None:
    """The same with Claude Code's default settings, which load most tools on demand (about
    10K tokens of system prompt and tools): the window leaves 70K, of which the tiers use the
    64K working window, so old outputs are offloaded when the messages reach 55% of 64K, 50%
    of the 70K; the stubs of outputs offloaded before take a part of it (measured: 48% at
    most; 46% to 49% when stale batches left older previews whole, 38% before the fixed
    prefix was calibrated apart from the messages)."""
    figures = claude_session(tmp_path, "embedded", Plan(runs=90), None, times=3, limit=80_000)
    print(figures)
    _check_part4(figures["part4"], 0.45)
