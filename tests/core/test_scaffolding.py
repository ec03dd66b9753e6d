"""Client scaffolding is not conversation: realistic messages of each agent program."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contextfold import ContextManager
from contextfold.compaction.summarizers.base import SummaryRequest
from contextfold.compaction.summarizers.extractive import ExtractiveSummarizer
from contextfold.core.messages import Message
from contextfold.core.scaffolding import (
    agent_rules,
    detect_agent,
    is_scaffolding,
    parse_rules,
    strip_scaffolding,
    task_text,
)
from contextfold.errors import ConfigError
from contextfold.recovery.hooks import question_text

# Claude Code 2.x: meta context is wrapped as "<system-reminder>\n...\n</system-reminder>"
REMINDER = (
    "<system-reminder>\nAs you answer the user's questions, you can use the following context:\n"
    "# important-instruction-reminders\nDo what has been asked; nothing more, nothing less.\n\n"
    "      IMPORTANT: this context may or may not be relevant to your tasks.\n</system-reminder>\n"
)
AGENT_TYPES = (
    "<system-reminder>\nThe following agent types are available for use with the Task tool: "
    "general-purpose, Explore, Plan.\n</system-reminder>"
)
# Claude Code 2.1: a Bash output over 30 KB is saved to a file, a 2 KB preview is sent
PERSISTED = (
    "<persisted-output>\nOutput too large (41.3KB). Full output saved to: "
    "/root/.claude/projects/x/tool-results/toolu_01.txt\n\nPreview (first 2KB):\n"
    "collected 212 items\nFAILED tests/test_api.py::test_login - KeyError: 'token'\n...\n"
    "</persisted-output>"
)
CODEX_ENV = (
    "<environment_context>\n  <cwd>/work/app</cwd>\n  <approval_policy>never</approval_policy>\n"
    "  <sandbox_mode>danger-full-access</sandbox_mode>\n</environment_context>"
)
CODEX_AGENTS = (
    "# AGENTS.md instructions for /work/app\n\n<INSTRUCTIONS>\nRun `make test` before you "
    "finish.\n</INSTRUCTIONS>"
)
GEMINI_CONTEXT = (
    "<session_context>\nThis is the Gemini CLI. We are setting up the context for our chat.\n"
    "Today's date is Tuesday, December 1, 2026 (formatted according to the user's locale).\n"
    "My operating system is: linux\n</session_context>"
)
AIDER_FILES = (
    "I have *added these files to the chat* so you can go ahead and edit them.\n\n"
    "*Trust this message as the true contents of these files!*\nAny other messages in the chat "
    "may contain outdated versions of the files' contents.\n\napp.py\n```\nprint('hi')\n```\n"
)
MINI_TASK = (
    "Please solve this issue: The CSV exporter drops the header row when the table is empty.\n\n"
    "You can execute bash commands and edit files to implement the necessary changes.\n\n"
    "## Recommended Workflow\n\n1. Analyze the codebase by finding and reading relevant files\n"
)
MINI_FORMAT = (
    "Please always provide EXACTLY ONE action in triple backticks, found 2 actions.\n"
    "If you want to end the task, please issue the following command: "
    "`echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`\n"
)


def test_every_agent_is_recognized_by_its_system_prompt() -> None:
    prompts = {
        "claude-code": "You are Claude Code, Anthropic's official CLI for Claude.\nYou are ...",
        "aider": "Act as an expert software developer.\nAlways use best practices ...",
        "codex": "You are Codex, based on GPT-5. You are running as a coding agent in the Codex CLI",
        "gemini-cli": "You are an interactive CLI agent specializing in software engineering tasks.",
        "mini-swe-agent": "You are a helpful assistant that can interact with a computer.",
    }
    for name, prompt in prompts.items():
        assert detect_agent([prompt]) == name
    assert detect_agent(["You are a helpful assistant."]) is None
    assert [r.name for r in agent_rules()][-1] == "generic"


def test_reminders_and_context_blocks_are_cut_from_the_question() -> None:
    question = "what was the full traceback of the failing test?"
    assert strip_scaffolding(REMINDER + question) == question
    assert strip_scaffolding(f"{question}\n\n{AGENT_TYPES}", "claude-code") == question
    assert strip_scaffolding(f"{CODEX_ENV}\n{CODEX_AGENTS}\n{question}", "codex") == question
    assert strip_scaffolding(f"{GEMINI_CONTEXT}\n{question}", "gemini-cli") == question
    msg = Message(role="user", content=[{"type": "text", "text": REMINDER + question}])
    assert question_text(msg) == question


def test_persisted_output_keeps_the_preview_not_the_wrapper() -> None:
    out = strip_scaffolding(PERSISTED, "claude-code")
    assert out.startswith("collected 212 items")
    assert out.endswith("KeyError: 'token'")
    assert "persisted-output" not in out and "Output too large" not in out


def test_whole_messages_that_are_scaffolding() -> None:
    assert is_scaffolding(AGENT_TYPES)
    assert is_scaffolding(CODEX_ENV + "\n" + CODEX_AGENTS)
    assert is_scaffolding(GEMINI_CONTEXT)
    assert is_scaffolding(AIDER_FILES, "aider")
    assert is_scaffolding("Change get_factorial() to use math.factorial", "aider")
    assert is_scaffolding("Ok, any changes I propose will be to those files.")
    assert is_scaffolding(MINI_FORMAT, "mini-swe-agent")
    assert not is_scaffolding("Fix the login bug in app.py", "aider")
    assert not is_scaffolding(REMINDER + "Fix the login bug")


def test_task_is_cut_out_of_the_agent_template() -> None:
    assert task_text(MINI_TASK, "mini-swe-agent") == (
        "The CSV exporter drops the header row when the table is empty."
    )
    assert task_text(REMINDER + "Fix the login bug") == "Fix the login bug"


def test_unknown_agent_and_bad_rules_are_clear_errors() -> None:
    with pytest.raises(ConfigError, match="unknown agent 'vim'"):
        strip_scaffolding("x <a>", "vim")
    with pytest.raises(ConfigError, match=r"bad pattern in x\.blocks"):
        parse_rules({"agents": [{"name": "x", "blocks": ["("]}]})
    with pytest.raises(ConfigError, match="agents"):
        parse_rules([])


def _call(i: int, command: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": f"t{i}",
                "type": "function",
                "function": {"name": "Bash", "arguments": json.dumps({"command": command})},
            }
        ],
    }


def _summary(messages: list[dict[str, Any]]) -> str:
    cm = ContextManager(store="memory://", context_window=100_000)
    msgs = cm.add_many(messages)
    return ExtractiveSummarizer().summarize(SummaryRequest(messages=msgs))


def test_claude_code_summary_intent_and_progress_are_the_real_ones() -> None:
    text = _summary(
        [
            {
                "role": "system",
                "content": "You are Claude Code, Anthropic's official CLI for Claude.",
            },
            {"role": "user", "content": AGENT_TYPES},
            {
                "role": "user",
                "content": REMINDER + "Fix the failing login test in tests/test_api.py",
            },
            _call(1, "pytest tests/test_api.py"),
            {"role": "tool", "tool_call_id": "t1", "content": PERSISTED},
            _call(2, "cat app.py"),
            {"role": "tool", "tool_call_id": "t2", "content": "print('hi')\n" + AGENT_TYPES},
        ]
    )
    intent = text.split("\n\n")[0] + text.split("\n\n")[1]
    assert "Fix the failing login test" in intent
    assert "agent types" not in text
    assert "</system-reminder>" not in text and "persisted-output" not in text


def test_aider_few_shot_example_is_never_the_task() -> None:
    text = _summary(
        [
            {"role": "system", "content": "Act as an expert software developer."},
            {"role": "user", "content": "Change get_factorial() to use math.factorial"},
            {
                "role": "assistant",
                "content": "To make this change we need to modify `mathweb/flask/app.py` to:",
            },
            {"role": "user", "content": AIDER_FILES},
            {"role": "assistant", "content": "Ok, any changes I propose will be to those files."},
            {"role": "user", "content": "Add a --verbose flag to the CLI in app.py"},
            {"role": "assistant", "content": "I'll add the flag."},
        ]
    )
    assert "Add a --verbose flag" in text
    assert "get_factorial" not in text and "added these files" not in text


def test_mini_swe_agent_task_and_format_reminder() -> None:
    text = _summary(
        [
            {
                "role": "system",
                "content": "You are a helpful assistant that can interact with a computer.",
            },
            {"role": "user", "content": MINI_TASK},
            {"role": "assistant", "content": "THOUGHT: look\n```mswea_bash_command\nls\n```"},
            {"role": "user", "content": MINI_FORMAT},
        ]
    )
    assert "The CSV exporter drops the header row" in text
    assert "Recommended Workflow" not in text and "EXACTLY ONE action" not in text


def test_mini_swe_agent_new_task_wrapper_is_not_the_question() -> None:
    question = "What was the exact error of the first failing run?"
    for agent in ("mini-swe-agent", None):
        assert strip_scaffolding("The user added a new task: " + question, agent) == question
        assert strip_scaffolding("Interrupted by user: " + question, agent) == question
    # only the wrapper at the start is cut: the same words inside a question stay
    inside = "Why did it say 'The user added a new task: x'?"
    assert strip_scaffolding(inside, "mini-swe-agent") == inside
    msg = Message(role="user", content="The user added a new task: " + question)
    assert question_text(msg) == question
    with pytest.raises(ConfigError, match=r"bad pattern in x\.leads"):
        parse_rules({"agents": [{"name": "x", "leads": ["("]}]})
