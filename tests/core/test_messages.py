from __future__ import annotations

import copy
from typing import Any

import pytest

from contextfold.core.messages import Message, ToolCall, check_view
from contextfold.core.wire import (
    from_anthropic,
    from_openai,
    messages_from_openai,
    to_anthropic,
    to_openai,
)
from contextfold.errors import ContextFoldError, InvalidMessageError
from tests.conftest import load_trace, trace_files

OPENAI_SAMPLES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "hi", "name": "alice"},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}},
        ],
    },
    {
        "role": "assistant",
        "content": None,
        "reasoning_content": "thinking...",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"command": "ls"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "a\nb"},
    {"role": "assistant", "content": "done", "refusal": None},
    {"role": "developer", "content": "be terse"},
    {
        "role": "assistant",
        "tool_calls": [
            {"id": "c2", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    },
]


@pytest.mark.parametrize("sample", OPENAI_SAMPLES)
def test_openai_round_trip_is_lossless(sample: dict[str, Any]) -> None:
    original = copy.deepcopy(sample)
    assert to_openai(from_openai(sample)) == original
    assert sample == original  # input untouched


def test_every_trace_round_trips() -> None:
    for path in trace_files():
        data = load_trace(path)
        msgs = messages_from_openai(data)
        assert [to_openai(m) for m in msgs] == data, path.name
        check_view(msgs)


def test_anthropic_round_trip_is_lossless() -> None:
    system = "sys prompt"
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "fix the bug"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                {"type": "text", "text": "Running tests"},
                {"type": "tool_use", "id": "tu1", "name": "bash", "input": {"command": "pytest"}},
                {"type": "tool_use", "id": "tu2", "name": "read", "input": {"path": "a.py"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "tu1",
                    "content": "1 failed",
                    "is_error": True,
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "tu2",
                    "content": [{"type": "text", "text": "code"}],
                },
                {"type": "text", "text": "also check b.py"},
            ],
        },
        {"role": "assistant", "content": "ok"},
        {
            "role": "user",
            "content": [
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "AAA"},
                }
            ],
        },
    ]
    msgs = from_anthropic(copy.deepcopy(messages), system)
    roles = [m.role for m in msgs]
    assert roles == ["system", "user", "assistant", "tool", "tool", "user", "assistant", "user"]
    assert msgs[2].tool_calls[0].parsed_arguments() == {"command": "pytest"}
    check_view(msgs)
    out_system, out = to_anthropic(msgs)
    assert out_system == system
    assert out == messages


def test_anthropic_tool_use_positions_preserved() -> None:
    messages = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "a", "name": "x", "input": {}},
                {"type": "text", "text": "between"},
                {"type": "tool_use", "id": "b", "name": "y", "input": {"k": 1}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "a", "content": "1"},
                {"type": "tool_result", "tool_use_id": "b", "content": "2"},
            ],
        },
    ]
    _, out = to_anthropic(from_anthropic(copy.deepcopy(messages)))
    assert out == messages


def test_openai_view_converts_to_anthropic_and_groups_tool_results() -> None:
    msgs = messages_from_openai(
        [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "u"},
            {
                "role": "assistant",
                "content": "calling",
                "tool_calls": [
                    {"id": "1", "type": "function", "function": {"name": "a", "arguments": "{}"}},
                    {
                        "id": "2",
                        "type": "function",
                        "function": {"name": "b", "arguments": '{"x": 1}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "1", "content": "r1"},
            {"role": "tool", "tool_call_id": "2", "content": "r2"},
            {"role": "user", "content": "next"},
        ]
    )
    system, out = to_anthropic(msgs)
    assert system == "s"
    assert [m["role"] for m in out] == ["user", "assistant", "user"]
    assert [b["type"] for b in out[2]["content"]] == ["tool_result", "tool_result", "text"]
    assert out[1]["content"][2]["input"] == {"x": 1}


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        ({"role": "wizard", "content": "x"}, "unknown role"),
        ({"role": "tool", "content": "x"}, "without tool_call_id"),
        (
            {
                "role": "assistant",
                "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{not json"}}],
            },
            "not valid JSON",
        ),
        (
            {
                "role": "assistant",
                "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {"a": 1}}}],
            },
            "JSON string",
        ),
        ({"role": "user", "content": 42}, "content must be"),
        (
            {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]},
            "has no id",
        ),
        ("not a dict", "expected a message object"),
        ({"role": "user", "content": "x", "tool_call_id": "c"}, "must not carry tool_call_id"),
    ],
)
def test_bad_input_names_index_and_problem(bad: Any, needle: str) -> None:
    with pytest.raises(InvalidMessageError) as info:
        messages_from_openai([{"role": "user", "content": "ok"}, bad])
    assert isinstance(info.value, ContextFoldError)
    assert info.value.index == 1
    assert needle in str(info.value)
    assert str(info.value).startswith("message 1:")


def test_result_without_call_is_rejected_by_view_check() -> None:
    msgs = messages_from_openai(
        [
            {"role": "user", "content": "x"},
            {"role": "tool", "tool_call_id": "ghost", "content": "?"},
        ]
    )
    with pytest.raises(InvalidMessageError, match="never appeared") as info:
        check_view(msgs)
    assert info.value.index == 1


def test_call_without_result_is_rejected_by_view_check() -> None:
    msgs = [
        Message(role="user", content="x"),
        Message(role="assistant", tool_calls=(ToolCall(id="c", name="f"),)),
    ]
    with pytest.raises(InvalidMessageError, match="without results"):
        check_view(msgs)


def test_unknown_anthropic_role() -> None:
    with pytest.raises(InvalidMessageError, match="unknown role") as info:
        from_anthropic([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}])
    assert info.value.index == 1


def test_stable_uuid_is_uuid5_in_the_url_namespace() -> None:
    import uuid

    from contextfold.core.messages import stable_uuid

    for name in ["", "contextfold:s:0", "contextfold:abc:123456", "ünï:çødé:7", "x" * 300]:
        assert stable_uuid(name) == str(uuid.uuid5(uuid.NAMESPACE_URL, name))
