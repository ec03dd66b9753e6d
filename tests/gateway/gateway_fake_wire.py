"""The providers' wire shapes for the fake upstream (tests/gateway/gateway_fakes.py): replies, the
real 400 messages for broken tool pairing and tampered thinking blocks, the JSON bodies and SSE
events of OpenAI Chat Completions and Anthropic Messages."""

from __future__ import annotations

import hashlib
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request


@dataclass
class Reply:
    text: str = ""
    #: (id, name, arguments dict); arguments as a string: a free-form tool's raw input (the
    #: Responses API's custom tools)
    tool_calls: list[tuple[str, str, Any]] = field(default_factory=list)
    thinking: str | None = None
    #: seconds to sleep between streamed events
    event_delay: float = 0.0


@dataclass
class Received:
    path: str  # with the query string, if any
    headers: dict[str, str]
    body: Any
    tokens: int
    error: str | None


Script = Callable[["Call"], Reply]


@dataclass
class Call:
    """What a script sees: the provider, the parsed body and helpers."""

    provider: str
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def messages(self) -> list[Any]:
        """The request's messages (Gemini: its ``contents``; Responses: its ``input``)."""
        if self.provider == "gemini":
            return list(self.body.get("contents") or [])
        if self.provider == "responses":
            value = self.body.get("input")
            return (
                [{"role": "user", "content": value}]
                if isinstance(value, str)
                else list(value or [])
            )
        return list(self.body.get("messages") or [])

    def last_tool_results(self) -> list[tuple[str, str]]:
        """(tool call id, text) of the tool results at the end of the request."""
        out: list[tuple[str, str]] = []
        msgs = self.messages
        if self.provider == "gemini":
            from tests.gateway.gateway_fake_gemini import last_function_responses

            return last_function_responses(msgs)
        if self.provider == "responses":
            for m in reversed(msgs):
                if not str(m.get("type", "")).endswith("_call_output"):
                    break
                output = m.get("output")
                out.append(
                    (m.get("call_id", ""), output if isinstance(output, str) else _text(output))
                )
            return list(reversed(out))
        if self.provider == "openai":
            for m in reversed(msgs):
                if m.get("role") != "tool":
                    break
                out.append((m.get("tool_call_id", ""), _text(m.get("content"))))
            return list(reversed(out))
        if msgs and msgs[-1].get("role") == "user" and isinstance(msgs[-1].get("content"), list):
            for b in msgs[-1]["content"]:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    out.append((b.get("tool_use_id", ""), _text(b.get("content"))))
        return out

    def tool_names(self) -> list[str]:
        names = []
        for t in self.body.get("tools") or []:
            if self.provider == "gemini":
                names += [d.get("name") for d in t.get("functionDeclarations") or []]
                continue
            fn = t.get("function")
            names.append(fn.get("name") if isinstance(fn, dict) else t.get("name"))
        return names


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(b.get("text", "")) for b in content if isinstance(b, dict) and "text" in b
        )
    return ""


def _path(request: Request) -> str:
    query = request.url.query
    return request.url.path + (f"?{query}" if query else "")


def signature_for(thinking: str) -> str:
    return "sig-" + hashlib.sha256(("fake-upstream|" + thinking).encode()).hexdigest()


def count_tokens(body: dict[str, Any]) -> int:
    """What the fake model reads: messages, system and tools, characters / 4."""
    parts = [body.get("messages"), body.get("system"), body.get("tools")]
    return len(json.dumps(parts, ensure_ascii=False)) // 4


# ----------------------------------------------------------------------------- validation


def openai_problem(messages: list[Any]) -> str | None:
    """OpenAI's own 400 messages for broken tool pairing."""
    open_ids: list[str] = []
    for i, m in enumerate(messages):
        role = m.get("role")
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
            open_ids = [c["id"] for c in m.get("tool_calls") or []]
        del i
    return None


def _combined(messages: list[Any]) -> list[dict[str, Any]]:
    """Consecutive turns of one role combined, as the Messages API does."""
    out: list[dict[str, Any]] = []
    for m in messages:
        content = m.get("content")
        blocks = (
            list(content)
            if isinstance(content, list)
            else [{"type": "text", "text": content or ""}]
        )
        if out and out[-1]["role"] == m.get("role"):
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": m.get("role"), "content": blocks})
    return out


def _system_problem(messages: list[Any], mid_system: bool) -> str | None:
    """``{"role": "system"}`` inside ``messages``: refused as the Messages API refuses an
    unknown role, unless the client sent the mid-conversation-system beta; with it, refused
    as the first message (the system prompt belongs in the top-level ``system``)."""
    for i, m in enumerate(messages):
        if m.get("role") != "system":
            continue
        if not mid_system:
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        if i == 0:
            return "messages.0: use the top-level 'system' parameter for the initial system prompt"
    return None


def anthropic_problem(messages: list[Any], mid_system: bool = False) -> str | None:
    """Anthropic's own 400 messages for broken tool pairing, tampered thinking blocks and
    system messages inside ``messages`` (see ``_system_problem``)."""
    system = _system_problem(messages, mid_system)
    if system is not None:
        return system
    messages = [m for m in messages if m.get("role") != "system"]
    combined = _combined(messages)
    if combined and combined[0]["role"] != "user":
        return 'messages: first message must use the "user" role'
    for i, m in enumerate(combined):
        prev = combined[i - 1] if i else None
        uses = [
            b["id"]
            for b in (prev["content"] if prev and prev["role"] == "assistant" else [])
            if b.get("type") == "tool_use"
        ]
        results = [b.get("tool_use_id") for b in m["content"] if b.get("type") == "tool_result"]
        if m["role"] == "user":
            for j, rid in enumerate(results):
                if rid not in uses:
                    return (
                        f"messages.{i}.content.{j}: unexpected `tool_use_id` found in "
                        f"`tool_result` blocks: {rid}. Each `tool_result` block must have a "
                        "corresponding `tool_use` block in the previous message."
                    )
            missing = [u for u in uses if u not in results]
            if missing:
                return (
                    f"messages.{i - 1}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(missing)}. Each `tool_use` block must have "
                    "a corresponding `tool_result` block in the next message."
                )
        else:
            for j, b in enumerate(m["content"]):
                if b.get("type") == "thinking" and b.get("signature") != signature_for(
                    str(b.get("thinking", ""))
                ):
                    return f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
    last = combined[-1] if combined else None
    if last is not None and last["role"] == "assistant":
        uses = [b for b in last["content"] if b.get("type") == "tool_use"]
        if uses:
            return (
                f"messages.{len(combined) - 1}: `tool_use` ids were found without `tool_result` "
                f"blocks immediately after: {uses[0]['id']}. Each `tool_use` block must have a "
                "corresponding `tool_result` block in the next message."
            )
    return None


# ----------------------------------------------------------------------------- rendering


def _openai_completion(reply: Reply, model: str, tokens: int) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": reply.text or None, "refusal": None}
    if reply.tool_calls:
        msg["tool_calls"] = [
            {"id": cid, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for cid, n, a in reply.tool_calls
        ]
    return {
        "id": f"chatcmpl-{next(_ids)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": msg,
                "logprobs": None,
                "finish_reason": "tool_calls" if reply.tool_calls else "stop",
            }
        ],
        "usage": {"prompt_tokens": tokens, "completion_tokens": 9, "total_tokens": tokens + 9},
    }


def _openai_chunks(reply: Reply, model: str, tokens: int, usage: bool) -> list[dict[str, Any]]:
    cid = f"chatcmpl-{next(_ids)}"
    base = {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }
    chunks = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}]
    text = reply.text
    for i in range(0, len(text), 16):
        chunks.append({**base, "choices": [{"index": 0, "delta": {"content": text[i : i + 16]}}]})
    for k, (call_id, name, args) in enumerate(reply.tool_calls):
        arg_text = json.dumps(args)
        first = {
            "index": k,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        chunks.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [first]}}]})
        for i in range(0, len(arg_text), 20):
            piece = {"index": k, "function": {"arguments": arg_text[i : i + 20]}}
            chunks.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [piece]}}]})
    finish = "tool_calls" if reply.tool_calls else "stop"
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    if usage:
        chunks.append(
            {
                **base,
                "choices": [],
                "usage": {
                    "prompt_tokens": tokens,
                    "completion_tokens": 9,
                    "total_tokens": tokens + 9,
                },
            }
        )
    return chunks


def _anthropic_blocks(reply: Reply) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
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
    for cid, name, args in reply.tool_calls:
        blocks.append({"type": "tool_use", "id": cid, "name": name, "input": args})
    return blocks


def _anthropic_message(reply: Reply, model: str, tokens: int) -> dict[str, Any]:
    return {
        "id": f"msg_{next(_ids)}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _anthropic_blocks(reply),
        "stop_reason": "tool_use" if reply.tool_calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": tokens, "output_tokens": 9},
    }


def _anthropic_events(reply: Reply, model: str, tokens: int) -> list[tuple[str, dict[str, Any]]]:
    msg = _anthropic_message(reply, model, tokens)
    start = {
        **msg,
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": tokens, "output_tokens": 1},
    }
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": start})
    ]
    events.append(("ping", {"type": "ping"}))
    for i, block in enumerate(msg["content"]):
        kind = block["type"]
        if kind == "thinking":
            events.append(
                (
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": i,
                        "content_block": {"type": "thinking", "thinking": "", "signature": ""},
                    },
                )
            )
            events.append(
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": i,
                        "delta": {"type": "thinking_delta", "thinking": block["thinking"]},
                    },
                )
            )
            events.append(
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": i,
                        "delta": {"type": "signature_delta", "signature": block["signature"]},
                    },
                )
            )
        elif kind == "text":
            events.append(
                (
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": i,
                        "content_block": {"type": "text", "text": ""},
                    },
                )
            )
            text = block["text"]
            for j in range(0, len(text), 16):
                events.append(
                    (
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": i,
                            "delta": {"type": "text_delta", "text": text[j : j + 16]},
                        },
                    )
                )
        else:
            events.append(
                (
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": i,
                        "content_block": {
                            "type": "tool_use",
                            "id": block["id"],
                            "name": block["name"],
                            "input": {},
                        },
                    },
                )
            )
            arg_text = json.dumps(block["input"])
            for j in range(0, len(arg_text), 20):
                events.append(
                    (
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": i,
                            "delta": {
                                "type": "input_json_delta",
                                "partial_json": arg_text[j : j + 20],
                            },
                        },
                    )
                )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": 9},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


_ids = itertools.count(1)
