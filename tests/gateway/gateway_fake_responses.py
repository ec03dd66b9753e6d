"""OpenAI Responses for the fake upstream (tests/gateway/gateway_fakes.py): the real 400s (overflow
with code ``context_length_exceeded``, a call without its output, an output without its call,
reasoning items whose ``encrypted_content`` was tampered with, an unknown
``previous_response_id``), ``store`` and ``previous_response_id``, the whole response object and
the streamed events (``response.created`` ... ``response.completed``) with sequence numbers.
A reply's tool call whose arguments are a string is a free-form (custom) tool's call:
``custom_tool_call`` with that ``input``, streamed as ``response.custom_tool_call_input.*``."""

from __future__ import annotations

import hashlib
import itertools
import json
import time
from typing import Any

from tests.gateway.gateway_fake_wire import Reply

_ids = itertools.count(1)

OVERFLOW_MESSAGE = (
    "Your input exceeds the context window of this model. Please adjust your input and try again."
)


def encrypted_for(text: str) -> str:
    """The opaque ``encrypted_content`` the fake issues for a reasoning text."""
    return "enc-" + hashlib.sha256(("fake-reasoning|" + text).encode()).hexdigest()


def error(message: str, param: str | None, code: str | None) -> dict[str, Any]:
    return {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": param,
            "code": code,
        }
    }


def items_of(body: dict[str, Any]) -> list[Any]:
    value = body.get("input")
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    return list(value) if isinstance(value, list) else []


def count_tokens(body: dict[str, Any], items: list[Any]) -> int:
    """What the fake model reads: input, instructions and tools, characters / 4."""
    return len(json.dumps([items, body.get("instructions"), body.get("tools")])) // 4


def _kind(item: Any) -> str:
    if not isinstance(item, dict):
        return ""
    return str(item.get("type") or ("message" if "role" in item else ""))


_CALLS = {"function_call", "custom_tool_call", "local_shell_call"}
_OUTPUTS = {"function_call_output", "custom_tool_call_output", "local_shell_call_output"}


def problem(items: list[Any]) -> dict[str, Any] | None:
    """The Responses API's own 400 body for a broken input, None when it is fine."""
    calls: dict[str, int] = {}
    answered: set[str] = set()
    for item in items:
        kind = _kind(item)
        if kind == "message" and item.get("role") not in (
            "user",
            "assistant",
            "system",
            "developer",
        ):
            return error(
                f"Invalid value: '{item.get('role')}'. Supported values are: 'assistant', "
                "'system', 'developer', and 'user'.",
                "input",
                "invalid_value",
            )
        if kind in _CALLS:
            calls[str(item.get("call_id"))] = 1
        elif kind in _OUTPUTS:
            cid = str(item.get("call_id"))
            if cid not in calls:
                return error(
                    f"No tool call found for function call output with call_id {cid}.",
                    "input",
                    None,
                )
            answered.add(cid)
        elif kind == "reasoning":
            summary = "".join(str(s.get("text", "")) for s in item.get("summary") or [])
            enc = item.get("encrypted_content")
            if enc is not None and enc != encrypted_for(summary):
                return error(
                    f"The encrypted content for item {item.get('id', 'rs_unknown')} could not be "
                    "verified.",
                    None,
                    "invalid_encrypted_content",
                )
    for cid in calls:
        if cid not in answered:
            return error(f"No tool output found for function call {cid}.", "input", None)
    return None


def output_items(reply: Reply, include: list[Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if reply.thinking is not None:
        item: dict[str, Any] = {
            "id": f"rs_{next(_ids):06d}",
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": reply.thinking}],
        }
        if "reasoning.encrypted_content" in include:
            item["encrypted_content"] = encrypted_for(reply.thinking)
        out.append(item)
    if reply.text:
        out.append(
            {
                "id": f"msg_{next(_ids):06d}",
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "annotations": [], "text": reply.text}],
            }
        )
    for cid, name, args in reply.tool_calls:
        if isinstance(args, str):  # a free-form (custom) tool's input is its raw text
            out.append(
                {
                    "id": f"ctc_{next(_ids):06d}",
                    "type": "custom_tool_call",
                    "status": "completed",
                    "call_id": cid,
                    "input": args,
                    "name": name,
                }
            )
            continue
        out.append(
            {
                "id": f"fc_{next(_ids):06d}",
                "type": "function_call",
                "status": "completed",
                "arguments": json.dumps(args),
                "call_id": cid,
                "name": name,
            }
        )
    return out


def response_object(
    body: dict[str, Any], output: list[dict[str, Any]], tokens: int, status: str = "completed"
) -> dict[str, Any]:
    out_tokens = len(json.dumps(output)) // 4
    return {
        "id": f"resp_{next(_ids):08d}",
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "model": body.get("model"),
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "store": body.get("store", True),
        "tools": body.get("tools") or [],
        "usage": {
            "input_tokens": tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": out_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": tokens + out_tokens,
        },
    }


def _item_events(index: int, item: dict[str, Any]) -> list[dict[str, Any]]:
    kind = item["type"]
    start = dict(item)
    if kind == "message":
        start = {**item, "status": "in_progress", "content": []}
    elif kind == "function_call":
        start = {**item, "status": "in_progress", "arguments": ""}
    elif kind == "custom_tool_call":
        start = {**item, "status": "in_progress", "input": ""}
    elif kind == "reasoning":
        start = {k: v for k, v in item.items() if k != "encrypted_content"}
        start["summary"] = []
    events: list[dict[str, Any]] = [
        {"type": "response.output_item.added", "output_index": index, "item": start}
    ]
    base = {"item_id": item["id"], "output_index": index}
    if kind == "message":
        text = item["content"][0]["text"]
        part = {"type": "output_text", "annotations": [], "text": ""}
        events.append(
            {"type": "response.content_part.added", **base, "content_index": 0, "part": part}
        )
        for piece in [text[i : i + 16] for i in range(0, len(text), 16)]:
            events.append(
                {"type": "response.output_text.delta", **base, "content_index": 0, "delta": piece}
            )
        events.append(
            {"type": "response.output_text.done", **base, "content_index": 0, "text": text}
        )
        events.append(
            {
                "type": "response.content_part.done",
                **base,
                "content_index": 0,
                "part": {**part, "text": text},
            }
        )
    elif kind == "function_call":
        args = item["arguments"]
        for piece in [args[i : i + 16] for i in range(0, len(args), 16)]:
            events.append(
                {"type": "response.function_call_arguments.delta", **base, "delta": piece}
            )
        events.append({"type": "response.function_call_arguments.done", **base, "arguments": args})
    elif kind == "custom_tool_call":
        text = item["input"]
        for piece in [text[i : i + 16] for i in range(0, len(text), 16)]:
            events.append({"type": "response.custom_tool_call_input.delta", **base, "delta": piece})
        events.append({"type": "response.custom_tool_call_input.done", **base, "input": text})
    elif kind == "reasoning":
        text = item["summary"][0]["text"]
        events.append(
            {
                "type": "response.reasoning_summary_text.delta",
                **base,
                "summary_index": 0,
                "delta": text,
            }
        )
        events.append(
            {
                "type": "response.reasoning_summary_text.done",
                **base,
                "summary_index": 0,
                "text": text,
            }
        )
    events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    return events


def stream_events(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The SSE events of a streamed response, numbered."""
    started = {**response, "status": "in_progress", "output": [], "usage": None}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": started},
        {"type": "response.in_progress", "response": started},
    ]
    for index, item in enumerate(response["output"]):
        events.extend(_item_events(index, item))
    events.append({"type": "response.completed", "response": response})
    return [{**e, "sequence_number": n} for n, e in enumerate(events)]


def frames(events: list[dict[str, Any]]) -> list[bytes]:
    return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events]


def last_outputs(items: list[Any]) -> list[tuple[str, str]]:
    """(call id, output text) of the outputs at the end of the input."""
    out: list[tuple[str, str]] = []
    for item in reversed(items):
        if _kind(item) not in _OUTPUTS:
            break
        output = item.get("output")
        text = output if isinstance(output, str) else json.dumps(output)
        out.append((str(item.get("call_id")), text))
    return list(reversed(out))


__all__ = [
    "OVERFLOW_MESSAGE",
    "count_tokens",
    "encrypted_for",
    "error",
    "frames",
    "items_of",
    "last_outputs",
    "output_items",
    "problem",
    "response_object",
    "stream_events",
]
