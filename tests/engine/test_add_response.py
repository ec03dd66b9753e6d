"""cm.add_response for both SDKs' response objects (and their dicts); Anthropic-shaped content
given to cm.add is converted when unambiguous and refused with a clear error otherwise."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from anthropic.types import Message as AnthropicMessage
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from contextfold import ContextManager
from contextfold.core.wire import to_openai
from contextfold.errors import InvalidMessageError
from tests.support.http_fakes import FakeLLMServer, fake_llm_server_fixture  # noqa: F401

THINKING = {"type": "thinking", "thinking": "Look at the dates module.", "signature": "c2lnLTE="}
REDACTED = {"type": "redacted_thinking", "data": "ZW5jcnlwdGVk"}


def manager(tmp_path: Path) -> ContextManager:
    cm = ContextManager(tmp_path / "ws", "r", 50_000)
    cm.add({"role": "system", "content": "You are a coding agent."})
    cm.add({"role": "user", "content": "Fix the failing test."})
    return cm


def anthropic_body(content: list[dict[str, Any]], stop: str = "tool_use") -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def chat_body(message: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-test",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


TOOL_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "bash", "arguments": '{"command": "pytest -x"}'},
}


# --------------------------------------------------------------------------- OpenAI


def test_chat_completion_from_the_real_sdk(fake_llm_server: FakeLLMServer, tmp_path: Path) -> None:
    fake_llm_server.enqueue(
        200,
        chat_body(
            {"role": "assistant", "content": None, "refusal": None, "tool_calls": [TOOL_CALL]}
        ),
    )
    client = openai.OpenAI(base_url=fake_llm_server.openai_base_url, api_key="t")
    cm = manager(tmp_path)
    reply = cm.call(lambda view: client.chat.completions.create(model="m", messages=view))
    assert isinstance(reply, ChatCompletion)
    msg = cm.add_response(reply)
    assert msg.role == "assistant" and [c.id for c in msg.tool_calls] == ["call_1"]
    assert msg.metadata["id"] == "chatcmpl-1" and msg.metadata["finish_reason"] == "tool_calls"
    wire = to_openai(msg)
    assert wire["tool_calls"] == [TOOL_CALL]
    assert "refusal" not in wire and "annotations" not in wire  # nothing the API would reject
    cm.add({"role": "tool", "tool_call_id": "call_1", "content": "1 passed"})
    view = cm.prepare()
    assert view[-2]["tool_calls"] == [TOOL_CALL] and view[-1]["tool_call_id"] == "call_1"
    # the same turn from the dict gives the same message, and the log keeps it on reopen
    again = ContextManager(tmp_path / "ws", "r", 50_000)
    assert again.history[2].tool_calls == msg.tool_calls
    assert again.history[2].metadata["model"] == "gpt-test"


def test_chat_completion_dict_with_reasoning_content(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    body = chat_body({"role": "assistant", "content": "Done.", "reasoning_content": "thought"})
    msg = cm.add_response(body)
    assert msg.text == "Done." and msg.metadata["reasoning_content"] == "thought"
    assert "reasoning_content" not in cm.prepare()[-1]  # DeepSeek/vLLM reject it as input
    with pytest.raises(InvalidMessageError, match="choice 3 does not exist"):
        cm.add_response(body, choice=3)


def test_responses_api_object(tmp_path: Path) -> None:
    output = [
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "enc"},
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Running the tests.", "annotations": []}],
        },
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_9",
            "name": "bash",
            "arguments": '{"command": "pytest"}',
            "status": "completed",
        },
    ]
    resp = Response.model_validate(
        {
            "id": "resp_1",
            "object": "response",
            "created_at": 1,
            "model": "gpt-test",
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "status": "completed",
        }
    )
    cm = manager(tmp_path)
    msg = cm.add_response(resp)
    assert msg.text == "Running the tests."
    assert [(c.id, c.name, json.loads(c.arguments)) for c in msg.tool_calls] == [
        ("call_9", "bash", {"command": "pytest"})
    ]
    kept = msg.metadata["responses_output"]
    assert kept[0]["encrypted_content"] == "enc" and kept[2]["call_id"] == "call_9"
    cm.add({"role": "tool", "tool_call_id": "call_9", "content": "ok"})
    assert cm.prepare()[-1]["tool_call_id"] == "call_9"


# --------------------------------------------------------------------------- Anthropic


def test_anthropic_message_keeps_thinking_blocks_exactly(
    fake_llm_server: FakeLLMServer, tmp_path: Path
) -> None:
    use = {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}}
    content = [THINKING, REDACTED, {"type": "text", "text": "Listing."}, use]
    fake_llm_server.enqueue(200, anthropic_body(content))
    client = anthropic.Anthropic(base_url=fake_llm_server.anthropic_base_url, api_key="t")
    cm = manager(tmp_path)
    reply = cm.call(
        lambda view: client.messages.create(model="claude-test", max_tokens=100, **view),
        format="anthropic",
    )
    assert isinstance(reply, AnthropicMessage)
    msg = cm.add_response(reply)
    assert [c.id for c in msg.tool_calls] == ["toolu_1"]
    assert msg.metadata["stop_reason"] == "tool_use"
    cm.add(
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.py"}],
        }
    )
    view = cm.prepare(format="anthropic")
    assert view["messages"][-2] == {"role": "assistant", "content": content}  # byte-exact
    assert view["messages"][-1]["content"][0]["tool_use_id"] == "toolu_1"
    # reopened from the log: still exact
    again = ContextManager(tmp_path / "ws", "r", 50_000)
    assert again.prepare(format="anthropic")["messages"][-2]["content"] == content


def test_anthropic_text_only_reply_is_valid_for_both_formats(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    msg = cm.add_response(anthropic_body([{"type": "text", "text": "All green."}], "end_turn"))
    assert msg.content == "All green."
    assert cm.prepare()[-1] == {"role": "assistant", "content": "All green."}


def test_add_response_rejects_what_it_cannot_read(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    with pytest.raises(InvalidMessageError, match=r"for a single message dict use cm\.add"):
        cm.add_response({"role": "assistant", "content": "hi"})
    with pytest.raises(InvalidMessageError, match="ChatCompletion"):
        cm.add_response(42)
    with pytest.raises(InvalidMessageError, match="no choices"):
        cm.add_response({"choices": []})
    assert len(cm.history) == 2


# --------------------------------------------------------------------------- cm.add


def test_anthropic_blocks_in_add_are_converted(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    uses = [
        {"type": "text", "text": "Two commands."},
        {"type": "tool_use", "id": "toolu_a", "name": "bash", "input": {"command": "ls"}},
        {"type": "tool_use", "id": "toolu_b", "name": "bash", "input": {"command": "pwd"}},
    ]
    added = cm.add({"role": "assistant", "content": uses})
    assert [c.id for c in added.tool_calls] == ["toolu_a", "toolu_b"]
    results = [
        {"type": "tool_result", "tool_use_id": "toolu_a", "content": "a.py"},
        {"type": "tool_result", "tool_use_id": "toolu_b", "content": "/repo", "is_error": False},
    ]
    last = cm.add({"role": "user", "content": results})
    assert last.role == "tool" and last.tool_call_id == "toolu_b"
    assert [m.role for m in cm.history[-3:]] == ["assistant", "tool", "tool"]
    openai_view = cm.prepare()
    assert [c["id"] for c in openai_view[-3]["tool_calls"]] == ["toolu_a", "toolu_b"]
    anthropic_view = cm.prepare(format="anthropic")
    assert anthropic_view["messages"][-2]["content"] == uses
    assert anthropic_view["messages"][-1] == {"role": "user", "content": results}
    # uuids are stable: a second manager replaying the same adds gets the same ones
    other = ContextManager(tmp_path / "ws2", "r", 50_000)
    other.add({"role": "system", "content": "You are a coding agent."})
    other.add({"role": "user", "content": "Fix the failing test."})
    other.add({"role": "assistant", "content": uses})
    other.add({"role": "user", "content": results})
    assert [m.uuid for m in other.history] == [m.uuid for m in cm.history]


@pytest.mark.parametrize(
    ("message", "needle"),
    [
        (
            {
                "role": "user",
                "content": [{"type": "tool_use", "id": "x", "name": "b", "input": {}}],
            },
            "user message holds Anthropic tool_use",
        ),
        (
            {
                "role": "assistant",
                "content": [{"type": "tool_result", "tool_use_id": "x", "content": "r"}],
            },
            "assistant message holds Anthropic tool_result",
        ),
        (
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "x", "name": "b", "input": {}}],
                "tool_calls": [TOOL_CALL],
            },
            "both OpenAI tool_calls and Anthropic tool_use",
        ),
        (
            {
                "role": "tool",
                "tool_call_id": "x",
                "content": [{"type": "tool_result", "tool_use_id": "x", "content": "r"}],
            },
            "tool message holds Anthropic tool_result",
        ),
    ],
)
def test_ambiguous_anthropic_content_is_refused_naming_the_helper(
    tmp_path: Path, message: dict[str, Any], needle: str
) -> None:
    cm = manager(tmp_path)
    with pytest.raises(InvalidMessageError) as info:
        cm.add(message)
    text = str(info.value)
    assert needle in text and "cm.add_anthropic" in text and "from_anthropic" in text
    assert len(cm.history) == 2  # nothing written


def test_tool_result_without_its_call_is_refused_not_sent(tmp_path: Path) -> None:
    """The failure of the issue: a tool_result for an unknown tool_use is caught at add()."""
    cm = manager(tmp_path)
    with pytest.raises(InvalidMessageError, match="never appeared"):
        cm.add(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "r"}],
            }
        )


def test_add_anthropic_with_system(tmp_path: Path) -> None:
    cm = ContextManager(tmp_path / "ws", "a", 50_000)
    added = cm.add_anthropic(
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [THINKING, {"type": "text", "text": "hello"}]},
        ],
        system="Be brief.",
    )
    assert [m.role for m in added] == ["system", "user", "assistant"]
    view = cm.prepare(format="anthropic")
    assert view["system"] == "Be brief."
    assert view["messages"][1]["content"] == [THINKING, {"type": "text", "text": "hello"}]
    one = cm.add_anthropic({"role": "user", "content": "next"})
    assert one[0].text == "next"
