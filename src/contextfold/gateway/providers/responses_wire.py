"""OpenAI Responses ``input`` items to neutral messages and views back to items.

Items are grouped into *units*, each one neutral message (or several for a unit of tool
outputs), and a unit the view leaves unchanged is sent as the client's own items, byte for
byte:

* a ``message`` item of role ``user`` / ``system`` / ``developer`` is one unit;
* consecutive model-side items (``reasoning``, assistant ``message``, ``function_call``,
  ``custom_tool_call``, ``local_shell_call``, ``web_search_call``, ``compaction`` and any item
  type not known here) are one assistant message: text in its content, ``reasoning`` and the
  other opaque items as content blocks holding the whole item (``encrypted_content`` kept
  exactly), calls as tool calls;
* each ``*_output`` item is one ``tool`` message.

``instructions`` is the system prompt; it stays in the body and is never rendered again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ...core.messages import Message, ToolCall, check_message
from ...errors import InvalidMessageError
from ...jsontypes import JSON, JSONObject, as_list
from ..convert import (
    Conversation,
    ViewItem,
    fingerprint,
    owner_of,
    parse_cached,
    unchanged_object,
)

#: item types that answer a call, and the call type each answers
OUTPUT_TYPES = {
    "function_call_output": "function_call",
    "custom_tool_call_output": "custom_tool_call",
    "local_shell_call_output": "local_shell_call",
}
#: item types that are a call the client runs
CALL_TYPES = frozenset({"function_call", "custom_tool_call", "local_shell_call"})
_INPUT_ROLES = frozenset({"user", "system", "developer"})
#: a content block holding a whole model-side item the gateway does not read
OPAQUE = "responses_item"


def _kind(item: Mapping[str, Any]) -> str:
    kind = item.get("type")
    if kind is None and "role" in item:
        return "message"
    return str(kind)


def _is_model_side(item: Mapping[str, Any]) -> bool:
    kind = _kind(item)
    if kind == "message":
        return item.get("role") == "assistant"
    return kind not in OUTPUT_TYPES


def _text_blocks(content: Any, index: int) -> str | tuple[Mapping[str, Any], ...]:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidMessageError("content must be a string or a list of parts", index=index)
    out: list[Mapping[str, Any]] = []
    for j, part in enumerate(content):
        if not isinstance(part, Mapping):
            raise InvalidMessageError(f"content part {j} is not an object", index=index)
        if part.get("type") in ("input_text", "output_text") and isinstance(part.get("text"), str):
            out.append({"type": "text", "text": part["text"], "_part": part.get("type")})
        else:
            out.append(dict(part))
    return tuple(out)


def _call(item: Mapping[str, Any], index: int) -> ToolCall:
    kind = _kind(item)
    call_id = str(item.get("call_id") or item.get("id") or "")
    extra: dict[str, Any] = {k: v for k, v in item.items() if k not in ("call_id", "name")}
    if kind == "function_call":
        name = str(item.get("name") or "")
        args = item.get("arguments")
        text = args if isinstance(args, str) else json.dumps(args or {}, ensure_ascii=False)
        try:
            ok = isinstance(json.loads(text or "{}"), dict)
        except ValueError:
            ok = False
        extra.pop("arguments", None)
        if not ok:  # kept exactly as sent; the neutral form reads it as no arguments
            extra["arguments"] = args
        return ToolCall(id=call_id, name=name, arguments=text if ok else "{}", extra=extra)
    if kind == "custom_tool_call":
        extra.pop("input", None)
        payload = {"input": item.get("input", "")}
        return ToolCall(
            id=call_id,
            name=str(item.get("name") or "custom"),
            arguments=json.dumps(payload, ensure_ascii=False),
            extra=extra,
        )
    extra.pop("action", None)  # local_shell_call
    return ToolCall(
        id=call_id,
        name="local_shell",
        arguments=json.dumps(item.get("action") or {}, ensure_ascii=False),
        extra=extra,
    )


def _assistant(items: Sequence[Mapping[str, Any]], index: int) -> Message:
    blocks: list[Mapping[str, Any]] = []
    calls: list[ToolCall] = []
    for item in items:
        kind = _kind(item)
        if kind == "message":
            content = _text_blocks(item.get("content") or [], index)
            if isinstance(content, str):
                content = ({"type": "text", "text": content, "_part": "output_text"},)
            rest = {k: v for k, v in item.items() if k not in ("type", "role", "content")}
            blocks.extend({**b, "_message": rest} if rest else b for b in content)
        elif kind in CALL_TYPES:
            calls.append(_call(item, index))
        else:  # reasoning, web_search_call, compaction ...: passed on whole
            blocks.append(_opaque(item))
    msg = Message(role="assistant", content=tuple(blocks), tool_calls=tuple(calls))
    return check_message(msg, index)


#: item fields the upstream's answer has and a client's resend may not (Codex drops them)
_ITEM_VOLATILE = ("id", "status")


def _opaque(item: Mapping[str, Any]) -> dict[str, Any]:
    """A content block holding a whole model-side item; its id, status and null fields are
    kept apart so that the answer and the client's resend of it (Codex adds
    ``"content": null`` to reasoning items) are the same message."""
    volatile = {k: v for k, v in item.items() if k in _ITEM_VOLATILE or v is None}
    block: dict[str, Any] = {"type": OPAQUE, "item": dict(item)}
    if volatile:
        block["item"] = {k: v for k, v in item.items() if k not in volatile}
        block["_volatile"] = {"fields": volatile, "order": list(item)}
    return block


def _opaque_item(block: Mapping[str, Any]) -> dict[str, Any]:
    item = dict(block["item"])
    volatile = block.get("_volatile")
    if not isinstance(volatile, Mapping):
        return item
    item.update(volatile.get("fields") or {})
    order = [k for k in volatile.get("order") or [] if k in item]
    return {k: item[k] for k in [*order, *(k for k in item if k not in order)]}


def _input_message(item: Mapping[str, Any], index: int) -> Message:
    role = item.get("role")
    if role not in _INPUT_ROLES:
        raise InvalidMessageError(f"unknown role {role!r} for a message item", index=index)
    extra = {k: v for k, v in item.items() if k not in ("role", "content")}
    content = _text_blocks(item.get("content", ""), index)
    msg = Message(role=role, content=content, extra=extra)  # type: ignore[arg-type]
    return check_message(msg, index)


def _output(item: Mapping[str, Any], index: int) -> Message:
    output = item.get("output", "")
    content: Any = output if isinstance(output, str) else _text_blocks(output, index)
    extra = {k: v for k, v in item.items() if k not in ("call_id", "output")}
    call_id = str(item.get("call_id") or "")
    msg = Message(role="tool", tool_call_id=call_id, content=content, extra=extra)
    return check_message(msg, index)


def units(items: Sequence[JSON]) -> list[list[JSON]]:
    """The items grouped into units (see the module docstring)."""
    out: list[list[JSON]] = []
    model_side: list[JSON] = []
    for k, item in enumerate(items):
        if not isinstance(item, dict):
            raise InvalidMessageError(
                f"expected an input item object, got {type(item).__name__}", index=k
            )
        if _is_model_side(item):
            model_side.append(item)
            continue
        if model_side:
            out.append(model_side)
            model_side = []
        out.append([item])
    if model_side:
        out.append(model_side)
    return out


def _convert(unit: Sequence[Any], index: int) -> list[Message]:
    first = unit[0]
    if _is_model_side(first):
        return [_assistant(unit, index)]
    kind = _kind(first)
    if kind == "message":
        return [_input_message(first, index)]
    if kind in OUTPUT_TYPES:
        return [_output(first, index)]
    raise InvalidMessageError(f"input item of type {kind!r} is not supported", index=index)


def parse_responses(input_value: JSON, instructions: JSON) -> Conversation:
    """A Responses request's ``input`` (a string or a list of items) and ``instructions``."""
    if isinstance(input_value, str):
        input_value = [{"role": "user", "content": input_value}]
    if not isinstance(input_value, list) or not input_value:
        raise InvalidMessageError("input must be a string or a non-empty list of items")
    if instructions is not None and not isinstance(instructions, str):
        raise InvalidMessageError("instructions must be a string")
    neutral: list[Message] = []
    owner: list[int] = []
    fps: list[str] = []
    if instructions:
        system = Message(role="system", content=instructions)
        neutral.append(system)
        owner.append(-1)
        fps.append(fingerprint(system))
    grouped = units(input_value)
    parts: list[list[int]] = []
    position = 0
    for k, unit in enumerate(grouped):
        at = position

        def build(unit: list[Any] = unit, at: int = at) -> list[Message]:
            return _convert(unit, at)

        try:
            msgs, unit_fps = parse_cached("responses", unit, build)
        except InvalidMessageError as exc:
            raise InvalidMessageError(exc.problem, index=at) from None
        parts.append(list(range(len(neutral), len(neutral) + len(msgs))))
        neutral.extend(msgs)
        fps.extend(unit_fps)
        owner.extend([k] * len(msgs))
        position += len(unit)
    return Conversation(
        provider="responses",
        raw=grouped,
        neutral=neutral,
        owner=owner,
        parts=parts,
        fingerprints=fps,
    )


# ---------------------------------------------------------------------- rendering


def _parts_out(content: Any, part: str) -> Any:
    if content is None:
        return [] if part == "output_text" else ""
    if isinstance(content, str):
        return [{"type": part, "text": content}]
    out = []
    for block in content:
        if block.get("type") == "text":
            out.append({"type": block.get("_part") or part, "text": block.get("text", "")})
        elif block.get("type") != OPAQUE:
            out.append(dict(block))
    return out


def _call_item(call: ToolCall) -> JSONObject:
    extra = dict(call.extra)
    kind = extra.get("type", "function_call")
    if kind == "custom_tool_call":
        args = json.loads(call.arguments or "{}")
        return {**extra, "call_id": call.id, "name": call.name, "input": args.get("input", "")}
    if kind == "local_shell_call":
        return {**extra, "call_id": call.id, "action": json.loads(call.arguments or "{}")}
    item = {"type": "function_call", **extra, "call_id": call.id, "name": call.name}
    item.setdefault("arguments", call.arguments)
    return item


def _assistant_items(msg: Message) -> list[JSONObject]:
    out: list[JSONObject] = []
    text: list[Mapping[str, Any]] = []

    def flush() -> None:
        if text:
            rest = text[0].get("_message") or {}
            parts: list[JSON] = [
                {"type": b.get("_part") or "output_text", "text": b["text"]} for b in text
            ]
            out.append({"type": "message", "role": "assistant", **rest, "content": parts})
            text.clear()

    content = msg.content
    blocks: list[Mapping[str, Any]] = (
        [{"type": "text", "text": content}] if isinstance(content, str) else list(content or ())
    )
    for block in blocks:
        if block.get("type") == OPAQUE:
            flush()
            out.append(_opaque_item(block))
        elif block.get("type") == "text":
            if text and block.get("_message") != text[0].get("_message"):
                flush()  # another message item of the client's
            text.append(block)
        else:
            flush()
            out.append(
                {"type": "message", "role": "assistant", "content": [dict(block)]},
            )
    flush()
    out.extend(_call_item(c) for c in msg.tool_calls)
    return out


def to_items(msg: Message, call_types: Mapping[str, str]) -> list[JSONObject]:
    """One neutral message as Responses input items (``call_types``: call id -> item type,
    so an output answers its call in the call's own kind)."""
    if msg.role == "assistant":
        return _assistant_items(msg)
    if msg.role == "tool":
        call_id = msg.tool_call_id or ""
        kind = msg.extra.get("type") or (call_types.get(call_id, "function_call") + "_output")
        rest = {k: v for k, v in msg.extra.items() if k != "type"}
        content = msg.content
        output: Any = content if isinstance(content, str) or content is None else None
        if output is None:
            output = _parts_out(content, "input_text")
        return [{"type": kind, **rest, "call_id": call_id, "output": output or ""}]
    extra = {k: v for k, v in msg.extra.items() if k != "type"}
    return [
        {
            "type": "message",
            **extra,
            "role": msg.role,
            "content": _parts_out(msg.content, "input_text"),
        }
    ]


def _call_types(items: Sequence[ViewItem]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        for call in item.message.tool_calls:
            out[call.id] = str(call.extra.get("type", "function_call"))
    return out


def render_responses(items: Sequence[ViewItem], conv: Conversation) -> list[JSON]:
    """The ``input`` items of a view: the client's own items wherever a whole unit is
    unchanged, the rest rendered anew (the ``instructions`` system message stays apart)."""
    out: list[JSON] = []
    call_types = _call_types(items)
    i = 0
    while i < len(items):
        item = items[i]
        k = unchanged_object(items, i, conv)
        if k is not None:
            out.extend(as_list(conv.raw[k]))
            i += len(conv.parts[k])
            continue
        if item.index is not None and owner_of(item, conv) < 0:
            i += 1  # the instructions, sent apart
            continue
        out.extend(to_items(item.message, call_types))
        i += 1
    return out


def output_message(output: JSON) -> Message:
    """The assistant message of a response's ``output`` items, neutral."""
    if not isinstance(output, list):
        raise InvalidMessageError("the upstream response has no output list")
    model_side = [o for o in output if isinstance(o, Mapping)]
    return _assistant(model_side, 0)


__all__ = [
    "CALL_TYPES",
    "OPAQUE",
    "OUTPUT_TYPES",
    "output_message",
    "parse_responses",
    "render_responses",
    "to_items",
    "units",
]
