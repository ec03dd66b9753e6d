"""The Gemini API's wire format (``generateContent``) <-> neutral messages.

A request's ``contents`` alternate ``user`` and ``model`` turns made of *parts*: ``text``
(``thought: true`` marks the model's thinking), ``functionCall`` in a model turn,
``functionResponse`` in the user turn after it, ``inlineData`` / ``fileData`` and others.
``systemInstruction`` is apart. Field names may be camelCase (the SDKs) or snake_case (Google's
REST examples); both are read.

Neutral form: a model turn is one assistant message (text and thought parts as blocks, calls as
:class:`~contextfold.core.messages.ToolCall`); a user turn is one tool message per
``functionResponse`` followed by one user message for its other parts. Every part's fields that
the neutral form does not interpret (``thoughtSignature`` above all) are kept and sent back
untouched when the gateway has to render a turn anew.

Tool call ids. Gemini pairs a call with its response by position and name; ids are optional,
and Gemini CLI writes its own id into the call only after the model's answer was received. So
the neutral id of a call never depends on the wire id: it is derived from the call's content
(name and arguments) and how often the same call came before in the conversation, so the
answer recorded from the model and the same call resent by the client (with the client's id
added) are the same neutral message. The wire id, when there is one, is kept and sent back.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeGuard, TypeVar

from ..core.messages import Content, Message, ToolCall
from ..errors import InvalidMessageError
from ..jsontypes import JSON, JSONLike, JSONObject, as_list, as_object
from .convert import (
    Conversation,
    Provider,
    ViewItem,
    _finish,
    _resume,
    fingerprint,
)
from .convert_cache import _prefix_key

PROVIDER: Provider = "gemini"
#: Gemini's own 400 for function calls and responses that do not pair up
PAIRING_MESSAGE = (
    "Please ensure that the number of function response parts is equal to the number of "
    "function call parts of the function call turn."
)
_SNAKE = re.compile(r"(?<!^)(?=[A-Z])")
#: a field's value: JSON read from JSON, ``object`` from any other mapping (None included:
#: a missing field reads as None)
_V = TypeVar("_V", JSON, object)


def field(obj: Mapping[str, _V], camel: str) -> _V:
    """``obj[camel]``, or its snake_case spelling (``functionCall`` / ``function_call``);
    None when neither is there."""
    if camel in obj:
        return obj[camel]
    return obj.get(_SNAKE.sub("_", camel).lower())


def _without(obj: Mapping[str, _V], *camel: str) -> dict[str, _V]:
    names = set(camel) | {_SNAKE.sub("_", c).lower() for c in camel}
    return {k: v for k, v in obj.items() if k not in names}


def _objects(items: object) -> TypeGuard[list[JSONObject]]:
    """Whether every item is a JSON object (the list itself is passed on, not copied)."""
    return isinstance(items, list) and all(isinstance(item, Mapping) for item in items)


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


# ----------------------------------------------------------------------------- call ids


def _call_base(name: str, args: JSONLike) -> str:
    digest = hashlib.blake2b(f"{name}\0{_canonical(args)}".encode(), digest_size=6).hexdigest()
    return f"gc-{digest}"


class CallIds:
    """Content-derived neutral call ids: ``gc-<hash of name and args>-<n>``, ``n`` counting
    the same call earlier in the conversation."""

    def __init__(self) -> None:
        self._seen: dict[str, int] = {}

    @classmethod
    def after(cls, messages: Iterable[Message]) -> CallIds:
        """The ids' state after ``messages`` (to name the calls of the model's next answer)."""
        ids = cls()
        for msg in messages:
            for call in msg.tool_calls:
                base, _, n = call.id.rpartition("-")
                if base.startswith("gc-") and n.isdigit():
                    ids._seen[base] = max(ids._seen.get(base, 0), int(n) + 1)
        return ids

    def next(self, name: str, args: JSONLike) -> str:
        base = _call_base(name, args)
        n = self._seen.get(base, 0)
        self._seen[base] = n + 1
        return f"{base}-{n}"


# ----------------------------------------------------------------------------- parts


def _block(part: Mapping[str, JSON]) -> JSONObject:
    """A non-call, non-response part as a neutral content block (its other fields kept)."""
    text = part.get("text")
    rest = _without(part, "text")
    if isinstance(text, str):
        if part.get("thought") is True:
            return {"type": "thinking", "thinking": text, "part": rest}
        return (
            {"type": "text", "text": text, "part": rest} if rest else {"type": "text", "text": text}
        )
    return {"type": "gemini_part", "part": dict(part)}


def _content(blocks: list[JSONObject]) -> str | tuple[JSONObject, ...] | None:
    if not blocks:
        return None
    if len(blocks) == 1 and set(blocks[0]) == {"type", "text"}:
        return str(blocks[0]["text"])
    return tuple(blocks)


def _parts(content: JSON, where: str) -> list[JSONObject]:
    if not isinstance(content, Mapping):
        raise InvalidMessageError(f"{where} must be an object with role and parts")
    parts = content.get("parts")
    if not isinstance(parts, list):
        raise InvalidMessageError(f"{where}.parts must be a list")
    if not _objects(parts):
        j = next(j for j, part in enumerate(parts) if not isinstance(part, Mapping))
        raise InvalidMessageError(f"{where}.parts[{j}] must be an object")
    return parts


def _model_message(parts: Sequence[Mapping[str, JSON]], ids: CallIds, where: str) -> Message:
    blocks: list[JSONObject] = []
    calls: list[ToolCall] = []
    for j, part in enumerate(parts):
        fc = field(part, "functionCall")
        if fc is None:
            blocks.append(_block(part))
            continue
        name = fc.get("name") if isinstance(fc, Mapping) else None
        if not isinstance(fc, Mapping) or not isinstance(name, str) or not name:
            raise InvalidMessageError(f"{where}.parts[{j}].functionCall needs a name")
        args = fc.get("args")
        args = {} if args is None else args
        if not isinstance(args, Mapping):
            raise InvalidMessageError(f"{where}.parts[{j}].functionCall.args must be an object")
        extra = {"part": _without(part, "functionCall"), "call": _without(fc, "name", "args")}
        calls.append(
            ToolCall(
                id=ids.next(name, args),
                name=name,
                arguments=json.dumps(args, ensure_ascii=False),
                extra=extra,
            )
        )
    return Message(role="assistant", content=_content(blocks), tool_calls=tuple(calls))


def response_text(response: object) -> str:
    """The text a model reads of a ``functionResponse.response``: its ``output`` when that is
    all it holds (Gemini CLI's shape), else the JSON."""
    if isinstance(response, Mapping) and set(response) == {"output"}:
        output = response["output"]
        if isinstance(output, str):
            return output
    return json.dumps(response, ensure_ascii=False)


class _Open:
    """The calls of the last model turn still waiting for their responses."""

    def __init__(self) -> None:
        self.calls: list[ToolCall] = []

    def take(self, name: str, wire_id: JSON) -> ToolCall | None:
        if wire_id is not None:
            for c in self.calls:
                if as_object(c.extra.get("call")).get("id") == wire_id:
                    self.calls.remove(c)
                    return c
        for c in self.calls:
            if c.name == name:
                self.calls.remove(c)
                return c
        return None


def _user_messages(
    parts: Sequence[Mapping[str, JSON]], open_calls: _Open, where: str
) -> list[Message]:
    tools: list[Message] = []
    blocks: list[JSONObject] = []
    for j, part in enumerate(parts):
        fr = field(part, "functionResponse")
        if fr is None:
            blocks.append(_block(part))
            continue
        name = fr.get("name") if isinstance(fr, Mapping) else None
        if not isinstance(fr, Mapping) or not isinstance(name, str) or not name:
            raise InvalidMessageError(f"{where}.parts[{j}].functionResponse needs a name")
        call = open_calls.take(name, fr.get("id"))
        if call is None:
            raise InvalidMessageError(
                f"{where}.parts[{j}]: functionResponse {name!r} answers no function call of "
                f"the turn before. {PAIRING_MESSAGE}"
            )
        response = fr.get("response")
        extra = {
            "part": _without(part, "functionResponse"),
            "response": _without(fr, "name"),
        }
        tools.append(
            Message(
                role="tool",
                content=response_text(response),
                tool_call_id=call.id,
                name=name,
                extra=extra,
            )
        )
    out = tools
    if blocks:
        out.append(Message(role="user", content=_content(blocks)))
    return out


# ----------------------------------------------------------------------------- requests


def system_text(system: JSON) -> str | tuple[JSONObject, ...] | None:
    """``systemInstruction`` (a Content, or a bare string some clients send) as content."""
    if isinstance(system, str):
        return system
    parts = _parts(system, "systemInstruction")
    return _content([_block(p) for p in parts])


def _parse_content(
    content: JSON, k: int, ids: CallIds, open_calls: _Open
) -> tuple[tuple[Message, ...], tuple[str, ...]]:
    """One content's neutral messages and their fingerprints (``ids`` and ``open_calls``
    carry the conversation's state on)."""
    where = f"contents[{k}]"
    content_parts = _parts(content, where)  # (an object: else it raised)
    role = (content.get("role") if isinstance(content, Mapping) else None) or "user"
    if role == "model":
        if open_calls.calls:
            raise InvalidMessageError(f"{where}: {PAIRING_MESSAGE}")
        msgs = [_model_message(content_parts, ids, where)]
        open_calls.calls = list(msgs[0].tool_calls)
    elif role == "user":
        msgs = _user_messages(content_parts, open_calls, where)
        if open_calls.calls:  # fewer responses than the model turn before has calls
            raise InvalidMessageError(f"{where}: {PAIRING_MESSAGE}")
    else:
        raise InvalidMessageError(f"{where}.role must be 'user' or 'model', not {role!r}")
    if not msgs:
        raise InvalidMessageError(f"{where} has no parts")
    return tuple(msgs), tuple(fingerprint(m) for m in msgs)


def parse_gemini(contents: JSON, system: JSON) -> Conversation:
    """The request's conversation (repair it with :func:`drop_repeated_responses` first).
    Raises InvalidMessageError.

    A client resends its history unchanged: the contents the previous request of this
    conversation start had in common with this one are not parsed again."""
    if not isinstance(contents, list) or not contents:
        raise InvalidMessageError("contents must be a non-empty list")
    key = _prefix_key(PROVIDER, [system, contents[:1]])
    known, neutral, fps, owner, starts = _resume(
        key,
        contents,
        lambda: [] if system is None else [Message(role="system", content=system_text(system))],
    )
    ids = CallIds.after(neutral)
    open_calls = _Open()
    if known and neutral[-1].role == "assistant":
        open_calls.calls = list(neutral[-1].tool_calls)
    for k in range(known, len(contents)):
        msgs, cfps = _parse_content(contents[k], k, ids, open_calls)
        starts.append(len(neutral))
        neutral.extend(msgs)
        fps.extend(cfps)
        owner.extend([k] * len(msgs))
    if open_calls.calls:
        raise InvalidMessageError(f"contents[{len(contents) - 1}]: {PAIRING_MESSAGE}")
    starts.append(len(neutral))
    return _finish(PROVIDER, key, contents, (neutral, fps, owner, starts))


def response_message(content: JSON, conv: Conversation) -> Message:
    """The model's answer (a candidate's ``content``) as a neutral assistant message, its
    call ids following the conversation's."""
    if not isinstance(content, Mapping):
        raise InvalidMessageError("the upstream answer has no candidate content")
    parts = content.get("parts") or []
    if not isinstance(parts, list) or not _objects(parts):
        raise InvalidMessageError("the upstream answer's parts are not a list of objects")
    return _model_message(parts, CallIds.after(conv.neutral), "candidates[0].content")


# ----------------------------------------------------------------------------- rendering


def _wire_part(block: Mapping[str, object]) -> JSONObject:
    kind = block.get("type")
    part = block.get("part")
    rest: JSONObject = dict(part) if isinstance(part, Mapping) else {}
    text = block.get("text")
    if kind == "thinking":
        return {"text": str(block.get("thinking", "")), **rest, "thought": True}
    if kind == "gemini_part":
        return rest
    if kind in (None, "text") and isinstance(text, str):
        return {"text": text, **rest}
    # a block compaction or another provider made: its text, else its JSON
    return {"text": text if isinstance(text, str) else json.dumps(block, ensure_ascii=False)}


def _wire_parts(content: Content) -> list[JSONObject]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"text": content}] if content else []
    return [_wire_part(b) for b in content]


def _call_part(call: ToolCall) -> JSONObject:
    extra = call.extra
    wire_call = dict(as_object(extra.get("call")))
    try:
        args = call.parsed_arguments()
    except ValueError:
        args = {"raw": call.arguments}
    fc = {"name": call.name, "args": args, **wire_call}
    return {"functionCall": fc, **dict(as_object(extra.get("part")))}


def _response_part(msg: Message) -> JSONObject:
    extra = msg.extra
    fr = dict(as_object(extra.get("response")))
    original = fr.get("response")
    text = msg.text
    if original is None or response_text(original) != text:
        fr["response"] = {"output": text}
    return {
        "functionResponse": {"name": msg.name or "", **fr},
        **dict(as_object(extra.get("part"))),
    }


def to_contents(messages: Sequence[Message]) -> list[JSONObject]:
    """Neutral messages as Gemini contents (system messages become user text: Gemini has no
    system turn inside ``contents``)."""
    out: list[JSONObject] = []
    for msg in messages:
        if msg.role == "assistant":
            parts: list[JSON] = [*_wire_parts(msg.content), *map(_call_part, msg.tool_calls)]
            out.append({"role": "model", "parts": parts or [{"text": ""}]})
        elif msg.role == "tool":
            out.append({"role": "user", "parts": [_response_part(msg)]})
        else:
            parts = [*_wire_parts(msg.content)]
            out.append({"role": "user", "parts": parts or [{"text": ""}]})
    return out


def render_gemini(items: Sequence[ViewItem], conv: Conversation) -> list[JSON]:
    """Gemini contents for the view: the client's own content objects wherever a whole turn
    is unchanged, the rest rendered anew; neighbours of one role that the gateway made are
    merged into one turn (``systemInstruction`` is the client's, passed on apart)."""
    pieces: list[tuple[JSONObject, bool]] = []
    pending: list[Message] = []

    def flush() -> None:
        pieces.extend((c, False) for c in to_contents(pending))
        pending.clear()

    i = 0
    while i < len(items):
        item = items[i]
        if item.index is not None and item.index < len(conv.owner) and conv.owner[item.index] < 0:
            i += 1  # the client's systemInstruction
            continue
        k = (
            conv.owner[item.index]
            if item.index is not None and item.index < len(conv.owner)
            else -1
        )
        if k >= 0:
            want = conv.parts[k]
            got = [it.index for it in items[i : i + len(want)]]
            if got == want:
                flush()
                pieces.append((as_object(conv.raw[k]), True))  # (parsed: an object)
                i += len(want)
                continue
        pending.append(item.message)
        i += 1
    flush()
    return _merge(pieces)


def _merge(pieces: list[tuple[JSONObject, bool]]) -> list[JSON]:
    out: list[JSON] = []
    prev: JSONObject | None = None  # out[-1]
    own = False  # whether out[-1] is the client's own
    for content, is_own in pieces:
        same_role = prev is not None and prev.get("role", "user") == content.get("role", "user")
        if prev is not None and same_role and not (own and is_own):  # the gateway's: one turn
            parts = [*as_list(prev.get("parts")), *as_list(content.get("parts"))]
            prev = out[-1] = {**prev, "parts": parts}
            own = False
            continue
        out.append(content)
        prev, own = content, is_own
    return out


__all__ = [
    "PAIRING_MESSAGE",
    "PROVIDER",
    "CallIds",
    "field",
    "parse_gemini",
    "render_gemini",
    "response_message",
    "response_text",
    "to_contents",
]
