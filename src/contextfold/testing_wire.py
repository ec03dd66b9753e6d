"""What the fake provider servers of :mod:`contextfold.testing` send and check: the providers'
own 400 errors for an overflowing request and broken tool pairing, and the JSON bodies and
stream events of OpenAI Chat Completions, OpenAI Responses and Anthropic Messages.

Plain functions on dicts, no web framework: :mod:`contextfold.testing_servers` serves them.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .jsontypes import JSON, JSONLike, JSONObject

_ids = itertools.count(1)


@dataclass
class FakeReply:
    """One answer of a fake model: text, tool calls ``(id, name, arguments)`` and, for
    Anthropic, a thinking block (sent back signed; a changed one is refused as Anthropic does)."""

    text: str = ""
    tool_calls: list[tuple[str, str, JSONObject]] = field(default_factory=list)
    thinking: str | None = None


def signature_for(thinking: str) -> str:
    """The signature the fake gives a thinking block (checked when it comes back)."""
    return "sig-" + hashlib.sha256(("contextfold-fake|" + thinking).encode()).hexdigest()


def count_tokens(body: Mapping[str, JSONLike]) -> int:
    """What the fake model reads, in tokens: characters / 4 of the messages (or the Responses
    ``input``), the system prompt, the instructions and the tools."""
    parts = [body.get(k) for k in ("messages", "input", "system", "instructions", "tools")]
    return len(json.dumps(parts, ensure_ascii=False)) // 4


# ----------------------------------------------------------------------------- errors


def openai_error(message: str, *, param: str | None, code: str | None) -> JSONObject:
    return {
        "error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    }


def chat_overflow(limit: int, tokens: int) -> JSONObject:
    return openai_error(
        f"This model's maximum context length is {limit} tokens. However, your messages "
        f"resulted in {tokens} tokens. Please reduce the length of the messages.",
        param="messages",
        code="context_length_exceeded",
    )


def responses_overflow() -> JSONObject:
    return openai_error(
        "Your input exceeds the context window of this model. Please adjust your input and try "
        "again.",
        param="input",
        code="context_length_exceeded",
    )


def anthropic_error(message: str) -> JSONObject:
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


def anthropic_overflow(limit: int, tokens: int) -> JSONObject:
    return anthropic_error(f"prompt is too long: {tokens} tokens > {limit} maximum")


def chat_problem(messages: Sequence[object]) -> str | None:
    """OpenAI Chat Completions' own messages for broken tool pairing."""
    open_ids: list[str] = []
    for item in messages:
        m: Any = item  # a wire message, read field by field below
        role = m.get("role") if isinstance(m, dict) else None
        if role == "tool":
            if m.get("tool_call_id") not in open_ids:
                return (
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'."
                )
            open_ids.remove(m["tool_call_id"])
            continue
        if open_ids:
            return (
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(open_ids)}"
            )
        if role == "assistant":
            open_ids = [c.get("id") for c in m.get("tool_calls") or []]
    return None


def responses_problem(items: object) -> str | None:
    """OpenAI Responses' own messages for a function call output without its call, and a call
    without its output."""
    if not isinstance(items, list):
        return None
    calls = [
        i.get("call_id") for i in items if isinstance(i, dict) and i.get("type") == "function_call"
    ]
    outputs = [
        i.get("call_id")
        for i in items
        if isinstance(i, dict) and i.get("type") == "function_call_output"
    ]
    for cid in outputs:
        if cid not in calls:
            return f"No tool call found for function call output with call_id {cid}."
    for cid in calls:
        if cid not in outputs:
            return f"No tool output found for function call {cid}."
    return None


def _combined(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """Consecutive turns of one role combined, as the Messages API does."""
    out: list[dict[str, Any]] = []
    for m in messages:
        content = m.get("content")
        blocks = list(content) if isinstance(content, list) else [{"type": "text", "text": content}]
        if out and out[-1]["role"] == m.get("role"):
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": m.get("role"), "content": blocks})
    return out


def _pairing(i: int, prev: dict[str, Any] | None, m: dict[str, Any]) -> str | None:
    uses = [
        b.get("id")
        for b in (prev["content"] if prev and prev["role"] == "assistant" else [])
        if isinstance(b, dict) and b.get("type") == "tool_use"
    ]
    results = [
        b.get("tool_use_id")
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "tool_result"
    ]
    for j, rid in enumerate(results):
        if rid not in uses:
            return (
                f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` "
                f"blocks: {rid}. Each `tool_result` block must have a corresponding `tool_use` "
                "block in the previous message."
            )
    missing = [u for u in uses if u not in results]
    if missing:
        return _unanswered(i - 1, [str(u) for u in missing])
    return None


def _unanswered(i: int, ids: Sequence[str]) -> str:
    return (
        f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately "
        f"after: {', '.join(ids)}. Each `tool_use` block must have a corresponding "
        "`tool_result` block in the next message."
    )


def anthropic_problem(messages: Sequence[object]) -> str | None:
    """Anthropic's own messages for broken tool pairing and a changed thinking block."""
    combined = _combined([m for m in messages if isinstance(m, dict)])
    if combined and combined[0]["role"] != "user":
        return 'messages: first message must use the "user" role'
    for i, m in enumerate(combined):
        if m["role"] == "user":
            problem = _pairing(i, combined[i - 1] if i else None, m)
            if problem:
                return problem
            continue
        for j, b in enumerate(m["content"]):
            if (
                isinstance(b, dict)
                and b.get("type") == "thinking"
                and b.get("signature") != signature_for(str(b.get("thinking", "")))
            ):
                return f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
    if combined and combined[-1]["role"] == "assistant":
        uses = [
            b.get("id")
            for b in combined[-1]["content"]
            if isinstance(b, dict) and b.get("type") == "tool_use"
        ]
        if uses:
            return _unanswered(len(combined) - 1, [str(u) for u in uses])
    return None


# ----------------------------------------------------------------------------- answers


def chat_completion(reply: FakeReply, model: str, tokens: int) -> JSONObject:
    msg: dict[str, Any] = {"role": "assistant", "content": reply.text or None, "refusal": None}
    if reply.tool_calls:
        msg["tool_calls"] = [
            {"id": cid, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for cid, n, a in reply.tool_calls
        ]
    finish = "tool_calls" if reply.tool_calls else "stop"
    return {
        "id": f"chatcmpl-{next(_ids)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": msg, "logprobs": None, "finish_reason": finish}],
        "usage": _chat_usage(tokens, reply),
    }


def _out_tokens(reply: FakeReply) -> int:
    return max(1, (len(reply.text) + len(json.dumps(reply.tool_calls))) // 4)


def _chat_usage(tokens: int, reply: FakeReply) -> JSONObject:
    out = _out_tokens(reply)
    return {"prompt_tokens": tokens, "completion_tokens": out, "total_tokens": tokens + out}


def chat_chunks(reply: FakeReply, model: str, tokens: int, usage: bool) -> list[JSONObject]:
    base = {
        "id": f"chatcmpl-{next(_ids)}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": reply.text[i : i + 16]}) for i in range(0, len(reply.text), 16)]
    for k, (cid, name, args) in enumerate(reply.tool_calls):
        head = {
            "index": k,
            "id": cid,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        chunks.append(chunk({"tool_calls": [head]}))
        text = json.dumps(args)
        chunks += [
            chunk({"tool_calls": [{"index": k, "function": {"arguments": text[i : i + 20]}}]})
            for i in range(0, len(text), 20)
        ]
    chunks.append(chunk({}, "tool_calls" if reply.tool_calls else "stop"))
    if usage:
        chunks.append({**base, "choices": [], "usage": _chat_usage(tokens, reply)})
    return chunks


def response_object(reply: FakeReply, model: str, tokens: int) -> JSONObject:
    """A Responses API ``response`` object."""
    output: list[JSON] = []
    if reply.text:
        output.append(
            {
                "type": "message",
                "id": f"msg_{next(_ids)}",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
            }
        )
    for cid, name, args in reply.tool_calls:
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{next(_ids)}",
                "call_id": cid,
                "name": name,
                "arguments": json.dumps(args),
                "status": "completed",
            }
        )
    out = _out_tokens(reply)
    return {
        "id": f"resp_{next(_ids)}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": out,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": tokens + out,
        },
    }


def response_events(reply: FakeReply, model: str, tokens: int) -> list[JSONObject]:
    """The stream of a Responses API answer: created, each output item added and done (text
    in deltas), completed."""
    done: dict[str, Any] = response_object(reply, model, tokens)
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {**done, "status": "in_progress", "output": []}}
    ]
    for n, item in enumerate(done["output"]):
        events.append({"type": "response.output_item.added", "output_index": n, "item": item})
        if item["type"] == "message":
            text = item["content"][0]["text"]
            for i in range(0, len(text), 16):
                events.append(
                    {
                        "type": "response.output_text.delta",
                        "item_id": item["id"],
                        "output_index": n,
                        "content_index": 0,
                        "delta": text[i : i + 16],
                    }
                )
        events.append({"type": "response.output_item.done", "output_index": n, "item": item})
    events.append({"type": "response.completed", "response": done})
    return [{**e, "sequence_number": k} for k, e in enumerate(events)]


def anthropic_message(reply: FakeReply, model: str, tokens: int) -> JSONObject:
    blocks: list[JSON] = []
    if reply.thinking is not None:
        blocks.append(
            {
                "type": "thinking",
                "thinking": reply.thinking,
                "signature": signature_for(reply.thinking),
            }
        )
    if reply.text:
        blocks.append({"type": "text", "text": reply.text})
    blocks += [{"type": "tool_use", "id": c, "name": n, "input": a} for c, n, a in reply.tool_calls]
    return {
        "id": f"msg_{next(_ids)}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": "tool_use" if reply.tool_calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": tokens, "output_tokens": _out_tokens(reply)},
    }


def _block_events(i: int, block: dict[str, Any]) -> list[dict[str, Any]]:
    kind = block["type"]
    if kind == "thinking":
        start: dict[str, Any] = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [
            {"type": "thinking_delta", "thinking": block["thinking"]},
            {"type": "signature_delta", "signature": block["signature"]},
        ]
    elif kind == "text":
        start = {"type": "text", "text": ""}
        text = block["text"]
        deltas = [{"type": "text_delta", "text": text[j : j + 16]} for j in range(0, len(text), 16)]
    else:
        start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        args = json.dumps(block["input"])
        deltas = [
            {"type": "input_json_delta", "partial_json": args[j : j + 20]}
            for j in range(0, len(args), 20)
        ]
    return [
        {"type": "content_block_start", "index": i, "content_block": start},
        *({"type": "content_block_delta", "index": i, "delta": d} for d in deltas),
        {"type": "content_block_stop", "index": i},
    ]


def anthropic_events(reply: FakeReply, model: str, tokens: int) -> list[JSONObject]:
    msg: dict[str, Any] = anthropic_message(reply, model, tokens)
    start = {
        **msg,
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": tokens, "output_tokens": 1},
    }
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}, {"type": "ping"}]
    for i, block in enumerate(msg["content"]):
        events += _block_events(i, block)
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": msg["usage"]["output_tokens"]},
        }
    )
    events.append({"type": "message_stop"})
    return events


__all__ = [
    "FakeReply",
    "anthropic_events",
    "anthropic_message",
    "anthropic_problem",
    "chat_chunks",
    "chat_completion",
    "chat_problem",
    "count_tokens",
    "response_events",
    "response_object",
    "responses_problem",
    "signature_for",
]
