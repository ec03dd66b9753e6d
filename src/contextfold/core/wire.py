"""Provider wire formats at the edge: OpenAI Chat Completions and Anthropic Messages.

Both directions are lossless for their own format: ``to_openai(from_openai(d)) == d`` and
``to_anthropic(from_anthropic(msgs, system)) == (system, msgs)``. Fields the model does not
interpret travel in ``Message.extra`` and come back out unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Container, Iterable, Mapping, Sequence
from typing import cast

from ..errors import InvalidMessageError
from ..jsontypes import JSON, JSONObject, as_object
from .messages import ROLES, Content, Message, Role, ToolCall, check_message, new_uuid

_OPENAI_KNOWN = {"role", "content", "tool_calls", "tool_call_id", "name"}


def _shown(value: object) -> str:
    """A client's value in an error message: short, and its type when it is no string."""
    if isinstance(value, str):
        return repr(value[:80])
    return f"of type {type(value).__name__}"


#: block fields that must be strings when present (by block type; None: every block)
_STRING_FIELDS: dict[str | None, tuple[str, ...]] = {
    None: ("type",),
    "text": ("text",),
    "tool_use": ("id", "name"),
    "tool_result": ("tool_use_id",),
    "thinking": ("thinking", "signature"),
}


def _block(block: object, j: int, index: int | None) -> Mapping[str, JSON]:
    """One content block, checked: an object whose ``type`` (and the fields its type names)
    are strings."""
    if not isinstance(block, Mapping):
        raise InvalidMessageError(f"content block {j} is not an object", index=index)
    kind = block.get("type")
    for name in _STRING_FIELDS[None] + _STRING_FIELDS.get(
        kind if isinstance(kind, str) else "", ()
    ):
        value = block.get(name)
        if value is not None and not isinstance(value, str):
            raise InvalidMessageError(
                f"content block {j}: {name} must be a string, not {type(value).__name__}",
                index=index,
            )
    return block


def _content_in(value: object, index: int | None) -> Content:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list | tuple):
        return tuple(dict(_block(b, j, index)) for j, b in enumerate(value))
    raise InvalidMessageError(
        f"content must be a string, a list of blocks or null, not {type(value).__name__}",
        index=index,
    )


def _extra(data: Mapping[str, object], known: Container[str]) -> JSONObject:
    """The fields of a wire message the model does not interpret, passed through as they are
    (a client's decoded JSON; ``check_encodable`` refuses a value that is not JSON)."""
    return cast(JSONObject, {k: v for k, v in data.items() if k not in known})


def _content_out(content: Content) -> JSON:
    if isinstance(content, tuple):
        return [dict(b) for b in content]
    return content


def from_openai(
    data: Mapping[str, object] | Message,
    index: int | None = None,
    *,
    uuid: str | None = None,
    metadata: Mapping[str, JSON] | None = None,
) -> Message:
    """Parse one OpenAI Chat Completions message dict (a Message passes through, checked)."""
    if isinstance(data, Message):
        return check_message(data, index)
    if not isinstance(data, Mapping):
        raise InvalidMessageError(
            f"expected a message object, got {type(data).__name__}", index=index
        )
    role = data.get("role")
    if not isinstance(role, str) or role not in ROLES:
        raise InvalidMessageError(f"unknown role {_shown(role)}", index=index)
    calls: list[ToolCall] = []
    raw_calls = data.get("tool_calls")
    if raw_calls is not None:
        if not isinstance(raw_calls, list):
            raise InvalidMessageError("tool_calls must be a list", index=index)
        for j, raw in enumerate(raw_calls):
            if not isinstance(raw, Mapping):
                raise InvalidMessageError(f"tool call {j} is not an object", index=index)
            fn = raw.get("function")
            if not isinstance(fn, Mapping):
                raise InvalidMessageError(f"tool call {j} has no function object", index=index)
            args = fn.get("arguments", "{}")
            if not isinstance(args, str):
                raise InvalidMessageError(
                    f"tool call {j}: arguments must be a JSON string", index=index
                )
            extra = {k: v for k, v in raw.items() if k not in ("id", "function")}
            fn_extra = {k: v for k, v in fn.items() if k not in ("name", "arguments")}
            if fn_extra:
                extra["function_extra"] = fn_extra
            if "arguments" not in fn:
                extra["no_arguments"] = True
            calls.append(
                ToolCall(
                    id=str(raw.get("id") or ""),
                    name=str(fn.get("name") or ""),
                    arguments=args,
                    extra=extra,
                )
            )
    extra = _extra(data, _OPENAI_KNOWN)
    if "content" not in data:
        extra["_no_content"] = True
    if raw_calls is not None and not raw_calls:
        extra["_empty_tool_calls"] = True
    name = data.get("name")
    tool_call_id = data.get("tool_call_id")
    if tool_call_id is not None and not isinstance(tool_call_id, str):
        raise InvalidMessageError("tool_call_id must be a string", index=index)
    msg = Message(
        role=cast(Role, role),
        content=_content_in(data.get("content"), index),
        tool_calls=tuple(calls),
        tool_call_id=tool_call_id,
        name=name if isinstance(name, str) else None,
        uuid=uuid or new_uuid(),
        metadata=dict(metadata or {}),
        extra=extra,
    )
    return check_message(msg, index)


def to_openai(msg: Message) -> JSONObject:
    """One neutral message as an OpenAI Chat Completions dict."""
    extra = dict(msg.extra)
    out: JSONObject = {"role": msg.role}
    no_content = extra.pop("_no_content", False)
    empty_calls = extra.pop("_empty_tool_calls", False)
    if not (no_content and msg.content is None):
        out["content"] = _content_out(msg.content)
    if msg.tool_calls:
        calls: list[JSON] = []
        for call in msg.tool_calls:
            cextra = dict(call.extra)
            fn_extra = cextra.pop("function_extra", {})
            no_args = cextra.pop("no_arguments", False)
            fn: JSONObject = {"name": call.name}
            if not (no_args and call.arguments == "{}"):
                fn["arguments"] = call.arguments
            fn.update(as_object(fn_extra))
            item: JSONObject = {"id": call.id}
            item.update(cextra)
            item.setdefault("type", "function")
            item["function"] = fn
            calls.append(item)
        out["tool_calls"] = calls
    elif empty_calls:
        out["tool_calls"] = []
    if msg.tool_call_id is not None:
        out["tool_call_id"] = msg.tool_call_id
    if msg.name is not None:
        out["name"] = msg.name
    out.update(extra)
    return out


def messages_from_openai(items: Iterable[Mapping[str, object] | Message]) -> list[Message]:
    return [from_openai(item, i) for i, item in enumerate(items)]


# --------------------------------------------------------------------------- Anthropic


def from_anthropic(
    messages: Sequence[Mapping[str, object]],
    system: str | Sequence[Mapping[str, object]] | None = None,
) -> list[Message]:
    """Anthropic Messages (``system`` apart) to neutral messages.

    A user message's ``tool_result`` blocks become ``tool`` messages; its other blocks stay in
    one user message. Assistant ``tool_use`` blocks become tool calls; other blocks (text,
    thinking, images) stay as content blocks.
    """
    out: list[Message] = []
    if system is not None:
        if isinstance(system, str):
            out.append(Message(role="system", content=system))
        else:
            out.append(Message(role="system", content=_content_in(list(system), None)))
    for index, data in enumerate(messages):
        if not isinstance(data, Mapping):
            raise InvalidMessageError(
                f"expected a message object, got {type(data).__name__}", index=index
            )
        role = data.get("role")
        if not isinstance(role, str) or role not in ("user", "assistant"):
            raise InvalidMessageError(
                f"unknown role {_shown(role)} for Anthropic format", index=index
            )
        extra = _extra(data, ("role", "content"))
        content = data.get("content")
        if isinstance(content, str) or content is None:
            msg = Message(role=cast(Role, role), content=content, extra=extra)
            out.append(check_message(msg, index))
            continue
        if not isinstance(content, list):
            raise InvalidMessageError("content must be a string or a list of blocks", index=index)
        group = new_uuid()
        if role == "assistant":
            out.append(_assistant_from(content, extra, index))
        else:
            out.extend(_user_from(content, extra, index, group))
    return out


def _assistant_from(content: list[JSON], extra: JSONObject, index: int) -> Message:
    """An Anthropic assistant message's blocks: ``tool_use`` blocks become tool calls (their
    positions among the other blocks kept when they are not all at the end)."""
    blocks: list[Mapping[str, JSON]] = []
    calls: list[ToolCall] = []
    positions: list[JSON] = []
    for j, raw in enumerate(content):
        block = _block(raw, j, index)
        if block.get("type") == "tool_use":
            cextra = {k: v for k, v in block.items() if k not in ("type", "id", "name", "input")}
            calls.append(
                ToolCall(
                    id=str(block.get("id") or ""),
                    name=str(block.get("name") or ""),
                    arguments=json.dumps(block.get("input", {}), ensure_ascii=False),
                    extra=cextra,
                )
            )
            positions.append(j)
        else:
            blocks.append(dict(block))
    if positions and positions != list(range(len(blocks), len(content))):
        extra["_tool_use_positions"] = positions
    msg = Message(role="assistant", content=tuple(blocks), tool_calls=tuple(calls), extra=extra)
    return check_message(msg, index)


def _user_from(content: list[JSON], extra: JSONObject, index: int, group: str) -> list[Message]:
    """An Anthropic user message's blocks: each ``tool_result`` becomes a tool message, the
    other blocks user messages between them, in order (one group id keeps them together)."""
    out: list[Message] = []
    pending: list[Mapping[str, JSON]] = []
    part = 0
    for j, raw in enumerate(content):
        block = _block(raw, j, index)
        if block.get("type") != "tool_result":
            pending.append(dict(block))
            continue
        if pending:
            out.append(_user_part(pending, group, part, extra, index))
            part += 1
            pending = []
        out.append(_tool_result_message(block, group, part, extra, index))
        part += 1
    if pending:
        out.append(_user_part(pending, group, part, extra, index))
    if not content:
        out.append(Message(role="user", content=(), extra=extra))
    return out


def _tool_result_message(
    block: Mapping[str, JSON], group: str, part: int, extra: JSONObject, index: int
) -> Message:
    rextra = {k: v for k, v in block.items() if k not in ("type", "tool_use_id", "content")}
    if "content" not in block:
        rextra["_no_content"] = True
    if part == 0 and extra:
        rextra["_msg_extra"] = extra
    meta: JSONObject = {"anthropic_group": group, "anthropic_part": part}
    tool_msg = Message(
        role="tool",
        tool_call_id=str(block.get("tool_use_id") or ""),
        content=_content_in(block.get("content"), index),
        metadata=meta,
        extra=rextra,
    )
    return check_message(tool_msg, index)


def _user_part(
    blocks: list[Mapping[str, JSON]], group: str, part: int, extra: JSONObject, index: int
) -> Message:
    meta: JSONObject = {"anthropic_group": group, "anthropic_part": part}
    msg = Message(
        role="user", content=tuple(blocks), metadata=meta, extra=extra if part == 0 else {}
    )
    return check_message(msg, index)


def _tool_result_block(msg: Message) -> JSONObject:
    extra = dict(msg.extra)
    extra.pop("_msg_extra", None)
    no_content = extra.pop("_no_content", False)
    block: JSONObject = {"type": "tool_result", "tool_use_id": msg.tool_call_id}
    if not (no_content and msg.content is None):
        block["content"] = _content_out(msg.content) if msg.content is not None else ""
    if msg.metadata.get("is_error") and "is_error" not in extra:
        block["is_error"] = True
    block.update(extra)
    return block


def _as_blocks(content: Content) -> list[JSON]:
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [dict(b) for b in content]


def _system_of(messages: Sequence[Message]) -> str | list[JSONObject] | None:
    """The Anthropic ``system`` of the system and developer messages (joined when several)."""
    parts = [m for m in messages if m.role in ("system", "developer")]
    if not parts:
        return None
    if len(parts) == 1 and (parts[0].content is None or isinstance(parts[0].content, str)):
        return parts[0].content or ""
    blocks: list[JSONObject] = []
    for m in parts:
        blocks.extend(as_object(b) for b in _as_blocks(m.content))  # (each one an object)
    return blocks


def _tool_use(call: ToolCall) -> JSONObject:
    try:
        args = json.loads(call.arguments) if call.arguments.strip() else {}
    except ValueError:
        args = {"_raw_arguments": call.arguments}
    use: JSONObject = {"type": "tool_use", "id": call.id, "name": call.name, "input": args}
    use.update(
        {k: v for k, v in call.extra.items() if k not in ("type", "function_extra", "no_arguments")}
    )
    return use


def _assistant_item(msg: Message) -> JSONObject:
    """An assistant message in Anthropic form: its blocks with the ``tool_use`` blocks back
    at their positions."""
    blocks = _as_blocks(msg.content)
    uses: list[JSON] = [_tool_use(call) for call in msg.tool_calls]
    positions = msg.extra.get("_tool_use_positions")
    if isinstance(positions, list) and positions and len(positions) == len(uses):
        it_blocks, it_uses, pos = iter(blocks), iter(uses), set(positions)
        blocks = [
            next(it_uses) if j in pos else next(it_blocks) for j in range(len(blocks) + len(uses))
        ]
    else:
        blocks = blocks + uses
    extra = {k: v for k, v in msg.extra.items() if k != "_tool_use_positions"}
    if isinstance(msg.content, str) and not msg.tool_calls:
        item: JSONObject = {"role": "assistant", "content": msg.content}
    else:
        item = {"role": "assistant", "content": blocks}
    item.update(extra)
    return item


def to_anthropic(
    messages: Sequence[Message],
) -> tuple[str | list[JSONObject] | None, list[JSONObject]]:
    """Neutral messages to ``(system, messages)`` in Anthropic Messages format.

    System and developer messages go to ``system`` (joined when there are several). Consecutive
    messages that map to the same role are merged into one message, as the API requires.
    """
    system = _system_of(messages)
    out: list[JSONObject] = []
    last_group: JSON = None
    for msg in messages:
        if msg.role in ("system", "developer"):
            continue
        group = msg.metadata.get("anthropic_group")
        if msg.role == "assistant":
            item = _assistant_item(msg)
            if out and out[-1]["role"] == "assistant":
                _merge_into(out[-1], item)
            else:
                out.append(item)
            last_group = None
            continue
        # user or tool -> user turn
        if msg.role == "tool":
            new_blocks: list[JSON] = [_tool_result_block(msg)]
            extra = dict(as_object(msg.extra.get("_msg_extra")))
            plain: str | None = None
        else:
            new_blocks = _as_blocks(msg.content)
            extra = dict(msg.extra)
            plain = msg.content if isinstance(msg.content, str) or msg.content is None else None
        same_group = group is not None and group == last_group
        if out and out[-1]["role"] == "user":
            if same_group:
                content = out[-1]["content"]
                out[-1]["content"] = (
                    content if isinstance(content, list) else _text_blocks(content)
                ) + new_blocks
            else:
                _merge_into(out[-1], {"role": "user", "content": new_blocks, **extra})
        else:
            item = {
                "role": "user",
                "content": plain
                if plain is not None and msg.role == "user" and group is None
                else new_blocks,
            }
            item.update(extra)
            out.append(item)
        last_group = group
    return system, out


def _text_blocks(content: JSON) -> list[JSON]:
    """The blocks of a merged turn's content that is no list (text, or null: none)."""
    return _as_blocks(content if isinstance(content, str) else None)


def _merge_into(target: JSONObject, item: JSONObject) -> None:
    a = target["content"]
    b = item["content"]
    a_blocks = a if isinstance(a, list) else _text_blocks(a)
    b_blocks = b if isinstance(b, list) else _text_blocks(b)
    target["content"] = a_blocks + b_blocks
    for k, v in item.items():
        if k not in ("role", "content"):
            target.setdefault(k, v)


def loads_message(data: Mapping[str, JSON], index: int | None = None) -> Message:
    raw = data.get("message")
    if not isinstance(raw, Mapping):
        raise InvalidMessageError("stored line has no message object", index=index)
    metadata = data.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise InvalidMessageError("stored line's metadata is not an object", index=index)
    return from_openai(raw, index, uuid=str(data.get("uuid") or new_uuid()), metadata=metadata)


__all__ = [
    "from_anthropic",
    "from_openai",
    "messages_from_openai",
    "to_anthropic",
    "to_openai",
]
