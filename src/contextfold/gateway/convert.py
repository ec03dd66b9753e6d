"""Client requests to neutral messages and views back to the client's own JSON.

The gateway stores neutral :class:`~contextfold.core.messages.Message` objects, but what it forwards
is the client's original message objects wherever compaction did not change them: every
neutral message remembers which client message it came from, and a view message that is the
unchanged history message at position ``i`` is sent as the client's object for ``i``, byte for
byte (``cache_control`` markers, thinking blocks and their signatures, images, unknown fields).
Only what compaction replaced or added is rendered anew.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..core.messages import Content, Message
from ..core.wire import from_anthropic, from_openai, to_anthropic, to_openai
from ..errors import InvalidMessageError
from ..jsontypes import JSON, JSONObject
from .convert_cache import (
    _cached,
    _prefix_key,
    _Prior,
    _remember,
    _reuse,
    fingerprint,
    parse_cached,
)

Provider = Literal["openai", "anthropic", "gemini"]
_SYSTEM_ROLES = frozenset({"system", "developer"})


@dataclass(frozen=True, slots=True)
class Conversation:
    """One request's messages: the client's objects and their neutral form. Its lists are
    shared with the parse of the conversation's next request (see :func:`parse_openai`):
    read them, never change them in place."""

    #: the wire format's name (``ProviderAdapter.name``)
    provider: str
    raw: Sequence[JSON]
    neutral: list[Message]
    #: neutral index -> index of the client message it came from (-1: Anthropic ``system``)
    owner: Sequence[int]
    #: client message index -> its neutral indices
    parts: Sequence[list[int]]
    fingerprints: list[str]


class Spans(Sequence[list[int]]):
    """Client message index -> its neutral indices, held as where each one's run starts (one
    list of ints, not one list per message: a request of a long history would otherwise
    leave tens of thousands of new containers for the garbage collector to walk)."""

    __slots__ = ("_starts",)

    def __init__(self, starts: Sequence[int]) -> None:
        #: neutral index where client message k's messages start; one more: the end
        self._starts = starts

    def __len__(self) -> int:
        return len(self._starts) - 1

    def __getitem__(self, k: int) -> list[int]:  # type: ignore[override]
        if not isinstance(k, int):
            raise TypeError("Spans takes an integer index")
        if k < 0:
            k += len(self)
        if not 0 <= k < len(self):
            raise IndexError(k)
        return list(range(self._starts[k], self._starts[k + 1]))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Spans({list(self)!r})"


def _parse_one_openai(raw: JSON, index: int) -> tuple[Message, str]:
    if not isinstance(raw, dict):
        raise InvalidMessageError(
            f"expected a message object, got {type(raw).__name__}", index=index
        )
    msgs, fps = _cached("openai", raw, lambda: [from_openai(raw, index)])
    return msgs[0], fps[0]


def _resume(
    key: bytes | None, raw: Sequence[JSON], system: Callable[[], list[Message]]
) -> tuple[int, list[Message], list[str], list[int], list[int]]:
    """Where a parse of ``raw`` starts: how many leading client messages the previous request
    of this conversation start shared, and slices of its neutral messages, fingerprints,
    owners and starts for them (``system()``: the leading messages of a fresh parse, owned by
    no client message)."""
    prior, known = _reuse(key, raw)
    if prior is not None:  # the same system prompt (part of the key) and first messages
        cut = prior.starts[known]
        owner, starts = list(prior.owner[:cut]), list(prior.starts[:known])
        return known, prior.neutral[:cut], prior.fps[:cut], owner, starts
    neutral = system()
    return 0, neutral, [fingerprint(m) for m in neutral], [-1] * len(neutral), []


def _finish(
    provider: str,
    key: bytes | None,
    raw: Sequence[JSON],
    parsed: tuple[list[Message], list[str], Sequence[int], Sequence[int]],
) -> Conversation:
    """The conversation of a parse (neutral, fps, owner, starts with the end), remembered
    for the next request. The cache shares the conversation's lists (no stage changes them:
    the next request takes slices of them), so a long history costs no further copies."""
    neutral, fps, owner, starts = parsed
    client = list(raw)
    _remember(key, _Prior(client, neutral, fps, owner, starts))
    return Conversation(provider, client, neutral, owner, Spans(starts), fps)


def parse_openai(messages: JSON) -> Conversation:
    if not isinstance(messages, list) or not messages:
        raise InvalidMessageError("messages must be a non-empty list")
    key = _prefix_key("openai", messages[:2])
    prior, known = _reuse(key, messages)
    neutral = prior.neutral[:known] if prior is not None else []
    fps = prior.fps[:known] if prior is not None else []
    for i in range(known, len(messages)):
        m, fp = _parse_one_openai(messages[i], i)
        neutral.append(m)
        fps.append(fp)
    n = len(neutral)
    return _finish("openai", key, messages, (neutral, fps, range(n), range(n + 1)))


#: metadata key of a ``{"role": "system"}`` message inside Anthropic ``messages``
MID_SYSTEM = "anthropic_mid_system"


def _mid_system(raw: Mapping[str, Any]) -> list[Message]:
    """A mid-conversation system message (the ``mid-conversation-system`` beta): text or
    blocks (``tool_addition`` ...) and its other fields (``clear_at``, ``output_config``) kept."""
    content = raw.get("content")
    # worded so that a client's fallback for servers without mid-conversation system
    # messages (it looks for "not supported" and "role 'system'") still runs
    if isinstance(content, list):
        if not all(isinstance(b, Mapping) for b in content):
            raise InvalidMessageError(
                "content: role 'system' message content is not supported: every block must "
                "be an object"
            )
        value: Content = tuple(dict(b) for b in content)
    elif isinstance(content, str) or content is None:
        value = content
    else:
        raise InvalidMessageError(
            "content: role 'system' message content is not supported: it must be a string "
            "or a list of blocks"
        )
    extra = {k: v for k, v in raw.items() if k not in ("role", "content")}
    return [Message(role="system", content=value, extra=extra, metadata={MID_SYSTEM: True})]


def _anthropic_builder(raw: Any) -> Callable[[], list[Message]]:
    if isinstance(raw, Mapping) and raw.get("role") == "system":
        return lambda: _mid_system(raw)
    return lambda: from_anthropic([raw])


def _system_prompt(system: str | list[JSON] | None) -> list[Message]:
    if system is None or isinstance(system, str):
        return from_anthropic([], system) if system is not None else []
    blocks: list[JSONObject] = []
    for j, block in enumerate(system):
        if not isinstance(block, dict):
            raise InvalidMessageError(f"system: block {j} is not an object")
        blocks.append(block)
    return from_anthropic([], blocks)


def parse_anthropic(messages: JSON, system: JSON) -> Conversation:
    if not isinstance(messages, list) or not messages:
        raise InvalidMessageError("messages must be a non-empty list")
    if system is not None and not isinstance(system, str | list):
        raise InvalidMessageError("system must be a string or a list of text blocks")
    key = _prefix_key("anthropic", [system, messages[:1]])
    known, neutral, fps, owner, starts = _resume(key, messages, lambda: _system_prompt(system))
    for k in range(known, len(messages)):
        raw = messages[k]
        try:
            converted, cfps = _cached("anthropic", raw, _anthropic_builder(raw))
        except InvalidMessageError as exc:
            raise InvalidMessageError(exc.problem, index=k) from None
        starts.append(len(neutral))
        neutral.extend(converted)
        fps.extend(cfps)
        owner.extend([k] * len(converted))
    starts.append(len(neutral))
    return _finish("anthropic", key, messages, (neutral, fps, owner, starts))


@dataclass(frozen=True, slots=True)
class ViewItem:
    """One view message: ``index`` is its history position when it is the unchanged history
    message there (so the client's own object can be sent), else None."""

    message: Message
    index: int | None


def owner_of(item: ViewItem, conv: Conversation) -> int:
    """The client object a view message is the unchanged form of (-1: none, or the system
    prompt the format keeps apart)."""
    if item.index is not None and item.index < len(conv.owner):
        return conv.owner[item.index]
    return -1


def unchanged_object(items: Sequence[ViewItem], i: int, conv: Conversation) -> int | None:
    """``k`` when the view messages from ``i`` on start with all of client object ``k``'s
    messages, unchanged and in order (it can then be sent as the client's own JSON)."""
    k = owner_of(items[i], conv)
    if k < 0:
        return None
    want = conv.parts[k]
    got = [it.index for it in items[i : i + len(want)]]
    return k if got == want else None


def render_openai(items: Sequence[ViewItem], conv: Conversation) -> list[JSON]:
    out: list[JSON] = []
    for item in items:
        if item.index is not None and item.index < len(conv.raw):
            out.append(conv.raw[item.index])
        else:
            out.append(to_openai(item.message))
    return out


def render_anthropic(items: Sequence[ViewItem], conv: Conversation) -> list[JSON]:
    """Anthropic messages for the view (``system`` is the client's, passed through apart)."""
    pieces: list[tuple[JSON, bool]] = []  # (message, is the client's own object)
    pending: list[Message] = []

    def flush() -> None:
        if pending:
            _, msgs = to_anthropic(pending)
            pieces.extend((m, False) for m in msgs)
            pending.clear()

    i = 0
    while i < len(items):
        item = items[i]
        if item.message.role in _SYSTEM_ROLES and not item.message.metadata.get(MID_SYSTEM):
            i += 1  # the system prompt goes apart (the client's own ``system``)
            continue
        k = unchanged_object(items, i, conv)
        if k is not None:
            flush()
            pieces.append((conv.raw[k], True))
            i += len(conv.parts[k])
            continue
        if item.message.metadata.get(MID_SYSTEM):
            flush()
            pieces.append((_system_message(item.message), False))
        else:
            pending.append(item.message)
        i += 1
    flush()
    return _merge_roles(_system_not_first(pieces))


def _system_message(msg: Message) -> JSONObject:
    content: Any = list(msg.content) if isinstance(msg.content, tuple) else msg.content
    return {"role": "system", "content": content, **dict(msg.extra)}


def _system_not_first(pieces: list[tuple[JSON, bool]]) -> list[tuple[JSON, bool]]:
    """Mid-conversation system messages the view put first (what came before them was
    compacted) move after the first other message: the Messages API takes the initial system
    prompt only in the top-level ``system``."""
    lead = 0
    while lead < len(pieces) and _role(pieces[lead][0]) == "system":
        lead += 1
    if lead == 0 or lead == len(pieces):
        return pieces
    return [pieces[lead], *pieces[:lead], *pieces[lead + 1 :]]


def _role(msg: Any) -> Any:
    return msg.get("role") if isinstance(msg, Mapping) else None


def _blocks(content: Any) -> list[Any]:
    if isinstance(content, list):
        return list(content)
    if content is None or content == "":
        return []
    return [{"type": "text", "text": content}]


def _merge_roles(pieces: list[tuple[JSON, bool]]) -> list[JSON]:
    """Merge neighbours of one role where the gateway made them so (two client objects that
    were neighbours in the client's own request stay as they were)."""
    out: list[JSON] = []
    own: list[bool] = []
    for msg, is_own in pieces:
        if out and isinstance(msg, Mapping) and isinstance(out[-1], Mapping):
            prev = out[-1]
            if prev.get("role") == msg.get("role") and not (own[-1] and is_own):
                merged = dict(prev)
                merged["content"] = _blocks(prev.get("content")) + _blocks(msg.get("content"))
                out[-1] = merged
                own[-1] = False
                continue
        out.append(msg)
        own.append(is_own)
    return out


def response_message_openai(message: JSON) -> Message:
    """The assistant message of a Chat Completions response, neutral."""
    if not isinstance(message, Mapping):
        raise InvalidMessageError("the upstream response has no message object")
    data = {k: v for k, v in message.items() if v is not None or k == "content"}
    data["role"] = "assistant"
    if data.get("tool_calls") == []:
        del data["tool_calls"]
    return from_openai(data)


def response_message_anthropic(content: JSON) -> Message:
    if not isinstance(content, list):
        raise InvalidMessageError("the upstream response has no content list")
    return from_anthropic([{"role": "assistant", "content": content}])[0]


def session_key_material(conv: Conversation) -> str:
    """The start of a conversation: its system prompt and first user message (fingerprints)."""
    first_system = next(
        (conv.fingerprints[j] for j, m in enumerate(conv.neutral) if m.role in _SYSTEM_ROLES), ""
    )
    first_user = next(
        (conv.fingerprints[j] for j, m in enumerate(conv.neutral) if m.role == "user"), ""
    )
    return f"{conv.provider}|{first_system}|{first_user}"


__all__ = [
    "Conversation",
    "ViewItem",
    "fingerprint",
    "owner_of",
    "parse_anthropic",
    "parse_cached",
    "parse_openai",
    "render_anthropic",
    "render_openai",
    "response_message_anthropic",
    "response_message_openai",
    "session_key_material",
    "unchanged_object",
]
