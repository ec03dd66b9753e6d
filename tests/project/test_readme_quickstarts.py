"""The README's two quickstarts, run as written with the real SDKs against the local fake server.

The code blocks are read from README.md; only the client construction (``base_url``), the
workspace folder and the window (small, so compactions happen) are substituted. The README's own
``my_tools`` / ``run_my_tool`` (one bash tool) run the commands the fake model asks for: ``cat``
of real tool outputs from the bundled trajectories. Each quickstart runs twice on one workspace,
as a user re-running the script would: the session goes on with one system prompt.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT, load_trace, trace_files
from tests.support.http_fakes import FakeLLMServer, fake_llm_server_fixture  # noqa: F401

TURNS = 40
WINDOW = 6_000


def _block_after(marker: str) -> str:
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    at = text.index(marker)
    match = re.search(r"```python\n(.*?)```", text[at:], re.S)
    assert match is not None, f"no python block after {marker!r} in README.md"
    return match.group(1)


def _tool_outputs(folder: Path) -> list[Path]:
    """Real tool outputs, one file each, for the fake model's ``cat`` commands."""
    outs: list[str] = []
    for path in trace_files()[:3]:
        outs += [str(m["content"]) for m in load_trace(path) if m.get("role") == "tool"]
    assert len(outs) > TURNS
    folder.mkdir()
    files = [folder / f"out{i}.txt" for i in range(TURNS)]
    for f, text in zip(files, outs):
        f.write_text(text, encoding="utf-8")
    return files


def _run_twice(code: str, name: str) -> tuple[Any, Any]:
    """The snippet run as a script twice (the first run's manager closed as its process
    would exit); the managers of both runs."""
    first: dict[str, Any] = {}
    exec(compile(code, name, "exec"), first)
    first["cm"].close()
    second: dict[str, Any] = {}
    exec(compile(code, name, "exec"), second)
    return first["cm"], second["cm"]


def _check_second_run(first: Any, second: Any, answer: str) -> None:
    roles = [m.role for m in second.history]
    assert roles.count("system") == 1  # not a second system prompt
    assert [m.text for m in second.history[: len(first.history)]] == [m.text for m in first.history]
    assert roles[len(first.history) :] == ["user", "assistant"]
    assert second.history[-2].text.startswith("Fix the failing test")
    assert second.history[-1].text == answer


def _check_anthropic_request(body: dict[str, Any]) -> None:
    """Provider rules: roles alternate, every tool_use is answered in the next user message
    and every tool_result answers a tool_use of the previous assistant message."""
    msgs = body["messages"]
    assert msgs[0]["role"] == "user"
    for i, msg in enumerate(msgs):
        if i:
            assert msg["role"] != msgs[i - 1]["role"], f"roles do not alternate at {i}"
        blocks = msg["content"] if isinstance(msg["content"], list) else []
        results = {b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"}
        if results:
            prev = msgs[i - 1]["content"]
            uses = {b["id"] for b in prev if isinstance(prev, list) and b.get("type") == "tool_use"}
            assert results <= uses, f"tool_result without its tool_use at {i}"
        uses = {b["id"] for b in blocks if b.get("type") == "tool_use"}
        if uses:
            nxt = msgs[i + 1]["content"]
            answered = {b.get("tool_use_id") for b in nxt if isinstance(nxt, list)}
            assert uses <= answered, f"tool_use without its tool_result at {i}"


def test_anthropic_quickstart_runs_as_written(
    fake_llm_server: FakeLLMServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _block_after("<!-- anthropic-quickstart -->")
    assert "Anthropic()" in code and "context_window=200_000" in code
    code = code.replace(
        "Anthropic()", f"Anthropic(base_url={fake_llm_server.anthropic_base_url!r}, api_key='t')"
    )
    code = code.replace("./.contextfold", str(tmp_path / "ws"))
    code = code.replace("context_window=200_000", f"context_window={WINDOW}")
    outputs = _tool_outputs(tmp_path / "outputs")
    thinking = {"type": "thinking", "thinking": "I should look at the test.", "signature": "sig-1"}

    def handler(body: dict[str, Any]) -> tuple[int, Any]:
        _check_anthropic_request(body)
        n = len(fake_llm_server.requests) - 1  # this request is recorded already
        content: list[dict[str, Any]]
        if n < TURNS:
            command = {"command": f"cat {outputs[n]}"}
            content = [
                thinking,
                {"type": "text", "text": f"step {n}"},
                {"type": "tool_use", "id": f"toolu_{n}", "name": "bash", "input": command},
            ]
            if n == 7:  # one of contextfold's own tools, answered by handle_tool_call
                content.append(
                    {"type": "tool_use", "id": "toolu_r", "name": "recall", "input": {"query": "x"}}
                )
            stop = "tool_use"
        else:
            content, stop = [{"type": "text", "text": "All tests pass now."}], "end_turn"
        return 200, {
            "id": f"msg_{n}",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 100 + n, "output_tokens": 20},
        }

    fake_llm_server.handler = handler
    cm, again = _run_twice(code, "README.md (Anthropic quickstart)")

    assert len(fake_llm_server.requests) == TURNS + 2  # the second run: one answer
    _check_second_run(cm, again, "All tests pass now.")
    ran = [m for m in cm.history if m.role == "tool" and m.tool_call_id != "toolu_r"]
    assert [m.text for m in ran] == [f.read_text(encoding="utf-8") for f in outputs]
    assert cm.history[-1].role == "assistant" and cm.history[-1].text == "All tests pass now."
    # thinking blocks are kept exactly and sent back while they are in the view
    last_body = fake_llm_server.requests[TURNS].json
    sent_back = [
        b
        for m in last_body["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "thinking"
    ]
    assert sent_back and all(b == thinking for b in sent_back)
    # the recall call was answered by contextfold itself
    recall = next(m for m in cm.history if m.tool_call_id == "toolu_r")
    assert recall.role == "tool" and recall.text not in {m.text for m in ran}
    # compactions happened, each printed once by on_compaction, never a no-op line
    printed = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    changed = again.records()  # both runs' compactions, each printed once
    assert changed and cm.last_record is not None and cm.last_record.changed
    assert len([p for p in printed if "Context compacted" in p]) == len(changed)
    assert not any("(0% saved)" in p for p in printed)
    tools = last_body["tools"]
    assert {t["name"] for t in tools} >= {"bash", "recall", "read_offloaded"}


def test_openai_quickstart_runs_as_written(
    fake_llm_server: FakeLLMServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _block_after("## Quickstart")
    assert "OpenAI()" in code and "context_window=128_000" in code
    code = code.replace(
        "OpenAI()", f"OpenAI(base_url={fake_llm_server.openai_base_url!r}, api_key='t')"
    )
    code = code.replace("./.contextfold", str(tmp_path / "ws"))
    code = code.replace("context_window=128_000", f"context_window={WINDOW}")
    outputs = _tool_outputs(tmp_path / "outputs")

    def handler(body: dict[str, Any]) -> tuple[int, Any]:
        n = len(fake_llm_server.requests) - 1  # this request is recorded already
        msg: dict[str, Any]
        if n < TURNS:
            msg = {
                "role": "assistant",
                "content": f"step {n}",
                "tool_calls": [
                    {
                        "id": f"call_{n}",
                        "type": "function",
                        "function": {
                            "name": "bash",
                            "arguments": json.dumps({"command": f"cat {outputs[n]}"}),
                        },
                    }
                ],
            }
            finish = "tool_calls"
        else:
            msg, finish = {"role": "assistant", "content": "Done."}, "stop"
        return 200, {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": "gpt-test",
            "choices": [{"index": 0, "message": msg, "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
        }

    fake_llm_server.handler = handler
    cm, again = _run_twice(code, "README.md (OpenAI quickstart)")
    assert len(fake_llm_server.requests) == TURNS + 2  # the second run: one answer
    _check_second_run(cm, again, "Done.")
    ran = [m.text for m in cm.history if m.role == "tool"]
    assert ran == [f.read_text(encoding="utf-8") for f in outputs]
    assert cm.history[-1].text == "Done."
    printed = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert again.records() and len(printed) >= len(again.records())
    assert not any("(0% saved)" in p for p in printed)
