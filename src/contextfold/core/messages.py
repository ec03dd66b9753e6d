"""The neutral message model and its validation.

Provider wire formats live in :mod:`contextfold.core.wire`; everything inside the library works on
:class:`Message`. A message is frozen; "changing" one means building a copy with
:func:`dataclasses.replace`, so the full history can never be edited by accident.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal, TypedDict, cast

from ..errors import InvalidMessageError
from ..jsontypes import JSON

if TYPE_CHECKING:
    from typing_extensions import Unpack

Role = Literal["system", "developer", "user", "assistant", "tool"]
ROLES: frozenset[str] = frozenset({"system", "developer", "user", "assistant", "tool"})

#: Content is either plain text, a tuple of provider content blocks (kept as JSON dicts and
#: passed through untouched: images, audio, thinking blocks ...), or absent.
Content = str | tuple[Mapping[str, JSON], ...] | None

#: Deepest nesting of lists and objects accepted in a message field (content blocks, tool
#: call arguments, provider extras, metadata). Real messages nest a few levels; a deeper one
#: is refused with :class:`InvalidMessageError` instead of exhausting the interpreter's stack.
MAX_NESTING = 128


#: 128 random bits per id from a generator of our own, seeded from the system's random
#: source (again in every forked child; a program's ``random.seed`` does not touch it), not a
#: system call per id: ``uuid4()`` reads the system's source each time, which on a busy
#: gateway also hands the interpreter lock over.
_rng = random.Random(os.urandom(32))
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: _rng.seed(os.urandom(32)))
_random_bits = _rng.getrandbits
_VERSION_4 = ~(0xC000 << 48) & ~(0xF000 << 64)
_VERSION_BITS = (0x8000 << 48) | (4 << 76)


def new_uuid() -> str:
    """A random (version 4) UUID, as text. Unique, not secret: message ids name messages, they
    grant nothing."""
    h = f"{(_random_bits(128) & _VERSION_4) | _VERSION_BITS:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


#: the bytes of RFC 4122's URL namespace (``uuid.NAMESPACE_URL``)
_URL_NAMESPACE = bytes.fromhex("6ba7b8119dad11d180b400c04fd430c8")


def stable_uuid(name: str) -> str:
    """The name-based (version 5) UUID of ``name`` in the URL namespace, as text: what
    ``str(uuid.uuid5(uuid.NAMESPACE_URL, name))`` gives, without its objects (one per
    message of a long history)."""
    digest = bytearray(hashlib.sha1(_URL_NAMESPACE + name.encode("utf-8")).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50
    digest[8] = (digest[8] & 0x3F) | 0x80
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCall:
    """One tool call of an assistant message. ``arguments`` is JSON text (an object)."""

    id: str
    name: str
    arguments: str = "{}"
    #: Wire fields we do not interpret (``type`` other than function, provider extras).
    extra: Mapping[str, JSON] = field(default_factory=dict)

    def parsed_arguments(self) -> JSON:
        return json.loads(self.arguments) if self.arguments.strip() else {}


@dataclass(frozen=True, kw_only=True, slots=True)
class Message:
    """A chat message in neutral form."""

    role: Role
    content: Content = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    uuid: str = field(default_factory=new_uuid)
    #: contextfold's own annotations (offload pointers, origin, ...). Never sent to a provider.
    metadata: Mapping[str, JSON] = field(default_factory=dict)
    #: Wire fields of the original dict that the model does not interpret (``reasoning_content``,
    #: ``refusal``, ``audio`` ...). Passed through untouched.
    extra: Mapping[str, JSON] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """The textual part of the content (text blocks joined by newlines)."""
        return content_text(self.content)

    @property
    def is_tool_result(self) -> bool:
        return self.role == "tool"

    def with_content(self, content: Content, **metadata: JSON) -> Message:
        meta = dict(self.metadata)
        meta.update(metadata)
        return replace(self, content=content, metadata=meta)


def content_text(content: Content) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        text = block.get("text")
        if isinstance(text, str):
            parts.append(text)
        elif block.get("type") == "tool_result":
            inner = block.get("content")
            if isinstance(inner, str):
                parts.append(inner)
            elif isinstance(inner, list):
                for b in inner:
                    if isinstance(b, Mapping):
                        inner_text = b.get("text", "")
                        parts.append(inner_text if isinstance(inner_text, str) else "")
    return "\n".join(parts)


def content_chars(content: Content) -> int:
    """Characters of the content as it would be serialized (text blocks by their text)."""
    if content is None:
        return 0
    if isinstance(content, str):
        return len(content)
    total = 0
    for block in content:
        text = block.get("text")
        if isinstance(text, str):
            total += len(text)
        else:
            total += len(json.dumps(block, ensure_ascii=False))
    return total


class MessageFields(TypedDict, total=False):
    """The fields of a :class:`Message` the helpers below take as keywords."""

    name: str | None
    uuid: str
    metadata: Mapping[str, JSON]
    extra: Mapping[str, JSON]


def system(text: str, **kw: Unpack[MessageFields]) -> Message:
    return Message(role="system", content=text, **kw)


def user(text: str, **kw: Unpack[MessageFields]) -> Message:
    return Message(role="user", content=text, **kw)


def assistant(
    text: str | None = None, tool_calls: Iterable[ToolCall] = (), **kw: Unpack[MessageFields]
) -> Message:
    return Message(role="assistant", content=text, tool_calls=tuple(tool_calls), **kw)


def tool(tool_call_id: str, text: str, **kw: Unpack[MessageFields]) -> Message:
    return Message(role="tool", content=text, tool_call_id=tool_call_id, **kw)


def check_message(msg: Message, index: int | None = None) -> Message:
    """Validate one message on its own; returns it. Raises InvalidMessageError."""
    if msg.role not in ROLES:
        raise InvalidMessageError(f"unknown role {msg.role!r}", index=index)
    _check_content(msg, index)
    if msg.role == "tool":
        if not msg.tool_call_id or not isinstance(msg.tool_call_id, str):
            raise InvalidMessageError("tool message without tool_call_id", index=index)
    elif msg.tool_call_id is not None:
        raise InvalidMessageError(f"{msg.role} message must not carry tool_call_id", index=index)
    if msg.tool_calls and msg.role != "assistant":
        raise InvalidMessageError(f"{msg.role} message must not carry tool_calls", index=index)
    seen: set[str] = set()
    for j, call in enumerate(msg.tool_calls):
        _check_call(call, j, seen, index)
    return msg


def _check_content(msg: Message, index: int | None) -> None:
    if msg.content is not None and not isinstance(msg.content, str | tuple):
        raise InvalidMessageError(
            f"content must be text, a list of blocks or null, not {type(msg.content).__name__}",
            index=index,
        )
    if isinstance(msg.content, tuple):
        for j, block in enumerate(msg.content):
            if not isinstance(block, Mapping):
                raise InvalidMessageError(f"content block {j} is not an object", index=index)


def _check_call(call: ToolCall, j: int, seen: set[str], index: int | None) -> None:
    """One tool call of a message: an id not seen before, a name, JSON arguments."""
    if not call.id or not isinstance(call.id, str):
        raise InvalidMessageError(f"tool call {j} has no id", index=index)
    if call.id in seen:
        raise InvalidMessageError(f"tool call id {call.id!r} repeated", index=index)
    seen.add(call.id)
    if not call.name:
        raise InvalidMessageError(f"tool call {call.id!r} has no function name", index=index)
    args = call.arguments
    if type(args) is str and len(args) <= ARGS_CACHED_CHARS:
        problem = _arguments_problem(args)
    else:  # long texts are not kept alive by the cache (nor is anything unhashable)
        problem = _arguments_problem.__wrapped__(args)
    if problem is not None:
        raise InvalidMessageError(
            f"tool call {call.id!r} ({call.name}): arguments {problem}", index=index
        )


#: tool-call arguments up to this long are validated once per text (remembered)
ARGS_CACHED_CHARS = 4_096


@functools.lru_cache(maxsize=8192)  # a message is checked as it is parsed and as it is added
def _arguments_problem(arguments: str) -> str | None:
    """Why a tool call's ``arguments`` are not a JSON text that can be stored exactly."""
    try:
        parsed = json.loads(arguments or "{}")
    except (TypeError, ValueError) as exc:
        return f"are not valid JSON ({exc})"
    except RecursionError:
        return f"is nested deeper than {MAX_NESTING} levels"
    if type(parsed) is dict and all(type(v) in _FLAT for v in parsed.values()):
        return None  # the usual arguments: one level of text, whole numbers, flags
    return _json_problem(parsed)


#: values that are always stored exactly (not float: it may be NaN or infinite)
_FLAT = frozenset({str, int, bool, type(None)})


def _scalar_problem(value: object) -> str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return f"holds {value!r}, which is not valid JSON"
    if value is None or isinstance(value, str | int | float):
        return None
    return f"holds a {type(value).__name__} object, which cannot be stored as JSON"


def _json_problem(value: object) -> str | None:
    """Why ``value`` cannot be stored as JSON exactly (an object that is not JSON, a cycle,
    nesting deeper than :data:`MAX_NESTING`, a non-text key, NaN), or None. Iterative: a
    hostile depth never reaches the interpreter's recursion limit."""
    stack: list[tuple[object, int]] = [(value, 0)]
    path: dict[int, int] = {}  # id of each open container -> its depth (cycle detection)
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Iterable[object] = item.values()
            for key in item:
                if not isinstance(key, str):
                    return f"has a key {key!r} that is not text"
        elif isinstance(item, list | tuple):
            children = item
        else:
            problem = _scalar_problem(item)
            if problem is not None:
                return problem
            continue
        if depth >= MAX_NESTING:
            return f"is nested deeper than {MAX_NESTING} levels"
        for other in [k for k, d in path.items() if d >= depth]:
            del path[other]  # containers closed since (siblings of this one, or theirs)
        if id(item) in path:
            return "refers to itself (a circular structure)"
        path[id(item)] = depth
        stack.extend((child, depth + 1) for child in children)
    return None


_UNICODE_PROBLEM = (
    "text is not valid Unicode (lone surrogates); decode tool output with "
    "errors='replace' before adding it"
)


def _utf8(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (no lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _unicode_problem(value: object) -> str | None:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return _UNICODE_PROBLEM
    return None


def _fields(msg: Message) -> Iterator[tuple[str, object]]:
    if isinstance(msg.content, tuple):
        for j, block in enumerate(msg.content):
            yield f"content block {j}", block
    else:
        yield "content", msg.content
    yield "name", msg.name
    yield "tool_call_id", msg.tool_call_id
    yield "uuid", msg.uuid
    for j, call in enumerate(msg.tool_calls):
        yield f"tool call {j}", [call.id, call.name, call.arguments]
        if call.extra:
            yield f"tool call {j} field", dict(call.extra)
    for key, value in msg.extra.items():
        yield f"field {key!r}", value
    for key, value in msg.metadata.items():
        yield f"metadata {key!r}", value


def check_encodable(msg: Message, index: int | None = None) -> None:
    """Raise InvalidMessageError (naming the field) unless every field of ``msg`` can be
    stored as JSON and read back exactly: plain JSON values only, no cycles, at most
    :data:`MAX_NESTING` levels deep, finite numbers, valid Unicode."""
    for where, value in _fields(msg):
        if value is None or type(value) is str:
            if value is None or value.isascii() or _utf8(value):
                continue
            raise InvalidMessageError(f"{where} {_UNICODE_PROBLEM}", index=index)
        if type(value) is list and all(type(v) is str for v in value):
            if all(v.isascii() or _utf8(v) for v in value):  # a tool call's id, name, args
                continue
            raise InvalidMessageError(f"{where} {_UNICODE_PROBLEM}", index=index)
        problem = _json_problem(value)
        if isinstance(value, str) and value.isascii():
            continue
        if problem is None and value is not None and not isinstance(value, int | float | bool):
            problem = _unicode_problem(value)
        if problem is not None:
            raise InvalidMessageError(f"{where} {problem}", index=index)


def check_sequence(
    messages: Sequence[Message], *, open_calls: Mapping[str, int] | None = None, start: int = 0
) -> dict[str, int]:
    """Validate tool pairing across a sequence.

    Every tool result must answer a call that appeared earlier and was not answered yet.
    ``open_calls`` carries calls still awaiting results from before ``messages`` (for incremental
    checks); the returned dict maps the ids still open to the index of their assistant message.
    """
    pending: dict[str, int] = dict(open_calls or {})
    answered: set[str] = set()
    for offset, msg in enumerate(messages):
        index = start + offset
        check_message(msg, index)
        if msg.role == "assistant":
            for call in msg.tool_calls:
                if call.id in pending or call.id in answered:
                    raise InvalidMessageError(f"tool call id {call.id!r} reused", index=index)
                pending[call.id] = index
        elif msg.role == "tool":
            call_id = cast(str, msg.tool_call_id)
            if call_id not in pending:
                what = "was already answered" if call_id in answered else "never appeared"
                raise InvalidMessageError(
                    f"tool result for call {call_id!r} whose call {what}", index=index
                )
            del pending[call_id]
            answered.add(call_id)
    return pending


def check_view(messages: Sequence[Message]) -> None:
    """A view sent to a provider: every call has exactly one result and vice versa."""
    pending = check_sequence(messages)
    if pending:
        first = min(pending.values())
        raise InvalidMessageError(f"tool calls without results: {sorted(pending)}", index=first)


__all__ = [
    "MAX_NESTING",
    "Message",
    "Role",
    "ToolCall",
    "check_encodable",
    "check_sequence",
    "check_view",
]
