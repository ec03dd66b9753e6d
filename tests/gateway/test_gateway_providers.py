"""The provider-adapter registry and the Responses item conversion, without a model."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import httpx
import pytest

from contextfold.gateway import providers
from contextfold.gateway.convert import ViewItem, fingerprint
from contextfold.gateway.providers.base import RouteSpec, as_int
from contextfold.gateway.providers.openai_chat import ChatCompletionsAdapter
from contextfold.gateway.providers.responses_wire import (
    output_message,
    parse_responses,
    render_responses,
    to_items,
)
from contextfold.gateway.turn import RequestError
from tests.gateway.gateway_fakes import Reply
from tests.gateway.gateway_helpers import running


class _AzureStyleChat(ChatCompletionsAdapter):
    """Chat Completions under another path, as a proxy in front of the gateway might route it."""

    name = "openai-prefixed"
    routes = (RouteSpec("/openai/v1/chat/completions"),)

    def parse(self, request: providers.ClientRequest) -> providers.ParsedRequest:
        parsed = super().parse(request)
        return dataclasses.replace(parsed, upstream_path="/v1/chat/completions")


def test_a_registered_adapter_is_served(tmp_path: Path) -> None:
    providers.register(_AzureStyleChat)
    try:
        with running(tmp_path) as (fake, gw):
            fake.default = lambda call: Reply(text="served")
            resp = httpx.post(
                gw.url + "/openai/v1/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            )
    finally:
        providers.ADAPTERS.remove(_AzureStyleChat)
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["content"] == "served"
    assert fake.received[0].path == "/v1/chat/completions"


def test_adapter_for_unknown_paths() -> None:
    found = providers.adapters()
    assert providers.adapter_for(found, "/v1/messages/x", {}).name == "anthropic"
    assert providers.adapter_for(found, "/v2/x", {"anthropic-version": "1"}).name == "anthropic"
    assert providers.adapter_for(found, "/v1/responses/x/y", {}).name == "responses"
    assert providers.adapter_for(found, "/nothing", {}).name == "openai"


def test_responses_items_round_trip_through_the_neutral_form() -> None:
    items = [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "d"}]},
        {"type": "message", "role": "user", "content": "task"},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [],
            "encrypted_content": "E",
            "content": None,
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "ok"}],
        },
        {"type": "function_call", "call_id": "c1", "name": "sh", "arguments": '{"a": 1}'},
        {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** P"},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "two"},
        {"type": "compaction", "encrypted_content": "S"},
    ]
    conv = parse_responses(items, "sys")
    roles = [m.role for m in conv.neutral]
    assert roles == ["system", "developer", "user", "assistant", "tool", "tool", "assistant"]
    # unchanged: the client's own items; rendered anew: the same items back
    view = [ViewItem(m, i) for i, m in enumerate(conv.neutral)]
    assert render_responses(view, conv) == items
    fresh = [ViewItem(m, None) for m in conv.neutral[1:]]
    again = render_responses(fresh, conv)
    assert [i.get("type") for i in again] == [
        "message",
        "message",
        "reasoning",
        "message",
        "function_call",
        "custom_tool_call",
        "function_call_output",
        "custom_tool_call_output",
        "compaction",
    ]
    assert again[2] == items[2] and again[4] == items[4] and again[5] == items[5]
    assert json.loads(again[4]["arguments"]) == {"a": 1}


def test_an_output_rendered_anew_answers_its_call_in_the_calls_kind() -> None:
    conv = parse_responses(
        [
            {"role": "user", "content": "x"},
            {"type": "custom_tool_call", "call_id": "c9", "name": "apply_patch", "input": "p"},
            {"type": "custom_tool_call_output", "call_id": "c9", "output": "long output"},
        ],
        None,
    )
    tool = conv.neutral[2]
    bare = tool.__class__(role="tool", tool_call_id="c9", content="[offloaded]")
    assert to_items(bare, {"c9": "custom_tool_call"}) == [
        {"type": "custom_tool_call_output", "call_id": "c9", "output": "[offloaded]"}
    ]


def test_an_answer_and_its_resend_are_the_same_message() -> None:
    answer = [
        {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "E"},
        {
            "id": "fc_1",
            "type": "function_call",
            "status": "completed",
            "call_id": "c1",
            "name": "sh",
            "arguments": "{}",
        },
    ]
    resent = [
        {"type": "reasoning", "summary": [], "content": None, "encrypted_content": "E"},
        {"type": "function_call", "call_id": "c1", "name": "sh", "arguments": "{}"},
    ]
    conv = parse_responses([{"role": "user", "content": "x"}, *resent], None)
    assert fingerprint(output_message(answer)) == conv.fingerprints[-1]


def test_wire_indexes_read_as_int_reads_them() -> None:
    assert [as_int(3), as_int(2.0), as_int("4"), as_int(True)] == [3, 2, 4, 1]
    with pytest.raises(TypeError):
        as_int(None)
    with pytest.raises(ValueError):
        as_int("x")


def test_odd_upstream_answers_are_refused_as_502_not_a_type_error() -> None:
    for adapter in providers.adapters():
        for data in (None, "text", [1], {"choices": "x", "output": 1, "content": {}}):
            if adapter.name == "gemini" and isinstance(data, dict):
                continue  # a Gemini answer without candidates reads as an empty model turn
            with pytest.raises(RequestError) as raised:
                adapter.read_answer(data)
            assert raised.value.status == 502


def test_a_non_list_tools_field_is_a_400() -> None:
    adapter = ChatCompletionsAdapter()
    for tools in ("x", {"name": "t"}, [1], [{"type": "function"}, "t"]):
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": tools}
        request = providers.ClientRequest(
            path="/v1/chat/completions", query="", headers={}, body=body
        )
        with pytest.raises(RequestError) as raised:
            adapter.parse(request)
        assert raised.value.status == 400
