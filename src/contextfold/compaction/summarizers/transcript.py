"""Preparing messages for a summarizer: argument truncation and a plain-text
transcript of the conversation."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from fnmatch import fnmatchcase

from ...core.messages import Message, ToolCall
from ...jsontypes import JSON, JSONObject

DEFAULT_TRUNCATE_TOOLS: tuple[str, ...] = ("write_file", "edit_file")
TRUNCATION_TEXT = "... [truncated] ..."


def shorten_middle(text: str, max_length: int, marker: str) -> str:
    """``text`` if it fits, else its head and tail (about ``max_length`` chars in total) with
    ``marker`` in the middle."""
    if max_length < 0:
        max_length = 0
    if len(text) <= max_length:
        return text
    keep = max(max_length - len(marker), 0)
    head = (keep + 1) // 2
    tail = keep // 2
    return text[:head] + marker + (text[len(text) - tail :] if tail else "")


def _matches(name: str, patterns: Collection[str]) -> bool:
    return any(fnmatchcase(name, p) for p in patterns)


def _walk(value: JSON, max_length: int, text: str) -> tuple[JSON, bool]:
    if isinstance(value, str):
        if len(value) > max_length:
            return shorten_middle(value, max_length, text), True
        return value, False
    if isinstance(value, list):
        changed = False
        out_list: list[JSON] = []
        for item in value:
            new, ch = _walk(item, max_length, text)
            out_list.append(new)
            changed = changed or ch
        return out_list, changed
    if isinstance(value, dict):
        changed = False
        out_dict: JSONObject = {}
        for key, item in value.items():
            new, ch = _walk(item, max_length, text)
            out_dict[key] = new
            changed = changed or ch
        return out_dict, changed
    return value, False


def _truncate_call(call: ToolCall, max_length: int, text: str) -> ToolCall:
    try:
        parsed = json.loads(call.arguments) if call.arguments.strip() else {}
    except ValueError:
        if len(call.arguments) > max_length:
            return replace(call, arguments=shorten_middle(call.arguments, max_length, text))
        return call
    new, changed = _walk(parsed, max_length, text)
    if not changed:
        return call
    return replace(call, arguments=json.dumps(new, ensure_ascii=False))


def truncate_tool_arguments(
    messages: Sequence[Message],
    *,
    tools: Collection[str] = DEFAULT_TRUNCATE_TOOLS,
    max_length: int = 2000,
    text: str = TRUNCATION_TEXT,
) -> list[Message]:
    """Shorten long string arguments of file-writing tool calls before summarizing.

    For assistant tool calls whose function name matches one of ``tools`` (fnmatch patterns),
    every JSON string value longer than ``max_length`` keeps its head and tail (about
    ``max_length`` characters in total) with ``text`` in the middle. The arguments stay valid
    JSON; arguments that are not JSON are shortened as a raw string. Changed messages are new
    copies; unchanged messages are returned as the same objects; the input is never modified.
    """
    out: list[Message] = []
    for msg in messages:
        if msg.role != "assistant" or not msg.tool_calls:
            out.append(msg)
            continue
        calls = tuple(
            _truncate_call(c, max_length, text) if _matches(c.name, tools) else c
            for c in msg.tool_calls
        )
        if all(a is b for a, b in zip(calls, msg.tool_calls, strict=True)):
            out.append(msg)
        else:
            out.append(replace(msg, tool_calls=calls))
    return out


def _block_text(block: Mapping[str, object]) -> str:
    text = block.get("text")
    if isinstance(text, str):
        return text
    kind = str(block.get("type") or "block")
    if kind == "tool_result":
        inner = block.get("content")
        if isinstance(inner, str):
            return inner
        if isinstance(inner, list):
            return "\n".join(_block_text(b) for b in inner if isinstance(b, Mapping))
    if kind in ("image_url", "input_image"):
        kind = "image"
    elif kind in ("input_audio",):
        kind = "audio"
    elif kind in ("redacted_thinking",):
        kind = "thinking"
    return f"[{kind}]"


def render_content(content: str | Iterable[object] | None) -> str:
    """Text of a message content; non-text blocks become "[image]", "[audio]" and so on."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(_block_text(b) for b in content if isinstance(b, Mapping))


def render_transcript(messages: Sequence[Message], *, max_tool_chars: int = 4000) -> str:
    """A plain-text conversation for a summarizer prompt.

    One entry per message or tool call: "[user]: ...", "[assistant]: ...",
    "[assistant -> tool_call bash(id=...)]: {args}", "[tool bash result id=...]: ...". Tool
    results longer than ``max_tool_chars`` keep head and tail with an omission marker.
    """
    names: dict[str, str] = {}
    parts: list[str] = []
    for msg in messages:
        text = render_content(msg.content).strip()
        if msg.role == "tool":
            call_id = msg.tool_call_id or "?"
            name = names.get(call_id) or msg.name or "tool"
            if len(text) > max_tool_chars:
                half = max(max_tool_chars, 0) // 2
                omitted = len(text) - 2 * half
                tail = text[len(text) - half :] if half else ""
                text = f"{text[:half]}\n... [{omitted} characters omitted] ...\n{tail}"
            parts.append(f"[tool {name} result id={call_id}]: {text}")
            continue
        if text or not msg.tool_calls:
            label = (
                msg.role if not msg.name or msg.role == "assistant" else f"{msg.role} {msg.name}"
            )
            parts.append(f"[{label}]: {text}")
        for call in msg.tool_calls:
            names[call.id] = call.name
            parts.append(f"[assistant -> tool_call {call.name}(id={call.id})]: {call.arguments}")
    return "\n\n".join(parts)


__all__ = [
    "DEFAULT_TRUNCATE_TOOLS",
    "TRUNCATION_TEXT",
    "render_content",
    "render_transcript",
    "shorten_middle",
    "truncate_tool_arguments",
]
