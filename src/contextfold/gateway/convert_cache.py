"""Fingerprints and the parse caches of :mod:`contextfold.gateway.convert`: a resent client
message is not parsed again, and a resent history reuses the previous request's parse."""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.messages import Content, Message
from ..jsontypes import JSON
from .fastjson import dumps_sorted

_SKIP_BLOCKS = frozenset({"thinking", "redacted_thinking"})


#: block fields that do not identify a message: cache markers clients move, and what an
#: adapter marks as changing between the upstream's answer and the client's resend of it
_VOLATILE = frozenset({"cache_control", "_volatile"})


def _strip_cache(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _strip_cache(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list | tuple):
        return [_strip_cache(v) for v in value]
    return value


def _content_key(content: Content) -> list[Any]:
    if content is None:
        return ["", []]
    if isinstance(content, str):
        return [content.strip(), []]
    text: list[str] = []
    other: list[Any] = []
    for block in content:
        kind = block.get("type")
        if isinstance(kind, str) and kind in _SKIP_BLOCKS:
            continue
        if kind == "text" or (kind is None and isinstance(block.get("text"), str)):
            text.append(str(block.get("text", "")))
        else:
            other.append(_strip_cache(block))
    return ["\n".join(text).strip(), other]


def _args_key(arguments: str) -> Any:
    try:
        return json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return arguments


def fingerprint(msg: Message) -> str:
    """What identifies a message across a client's resends: role, text and non-text content
    (``cache_control`` and thinking blocks ignored: clients move or drop them), tool calls and
    the answered call. SDK-added nulls and empty fields do not matter."""
    key = [
        msg.role,
        msg.tool_call_id or "",
        _content_key(msg.content),
        [[c.id, c.name, _args_key(c.arguments)] for c in msg.tool_calls],
    ]
    text = json.dumps(key, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


#: Parsed client messages by provider and exact JSON (clients resend the same objects every
#: turn): a resent message costs one dict lookup instead of parsing and hashing it again.
#: Bounded by the characters of the keys it holds, oldest dropped first.
_PARSED: OrderedDict[str, tuple[tuple[Message, ...], tuple[str, ...]]] = OrderedDict()
_PARSED_MAX_CHARS = 64_000_000
_PARSED_LOCK = threading.Lock()
_parsed_chars = 0


def _cached(
    provider: str, raw: JSON, build: Callable[[], list[Message]]
) -> tuple[tuple[Message, ...], tuple[str, ...]]:
    global _parsed_chars
    try:
        key = provider + dumps_sorted(raw).decode("utf-8", "surrogatepass")
    except (TypeError, ValueError):
        key = None
    if key is not None:
        with _PARSED_LOCK:
            hit = _PARSED.get(key)
            if hit is not None:
                _PARSED.move_to_end(key)
                return hit
    msgs = tuple(build())
    entry = (msgs, tuple(fingerprint(m) for m in msgs))
    if key is not None and len(key) <= _PARSED_MAX_CHARS // 16:
        with _PARSED_LOCK:
            if key not in _PARSED:
                _PARSED[key] = entry
                _parsed_chars += len(key)
            while _parsed_chars > _PARSED_MAX_CHARS and _PARSED:
                old, _ = _PARSED.popitem(last=False)
                _parsed_chars -= len(old)
    return entry


#: ``parse_cached(provider, raw, build)``: the messages ``build()`` makes of the client object
#: ``raw`` and their fingerprints, from the cache when the same object was parsed before
parse_cached = _cached


#: The last request of each conversation start (provider + its first messages): the client's
#: message objects and what they parsed to. A client resends its history unchanged, so a new
#: request compares its messages with the previous ones (list equality, in C: the same objects
#: compare by identity) and parses and fingerprints only the new tail; the parsed part is
#: taken over as slices of the previous lists (copies of pointers, nothing per message in
#: Python). Bounded by messages held.
@dataclass(frozen=True, slots=True)
class _Prior:
    raw: Sequence[JSON]
    neutral: list[Message]
    fps: list[str]
    #: neutral index -> client message index (-1: Anthropic ``system``)
    owner: Sequence[int]
    #: client message k's neutral messages start at ``starts[k]``
    starts: Sequence[int]


_PREFIX: OrderedDict[bytes, _Prior] = OrderedDict()
_PREFIX_MAX_MESSAGES = 200_000
_prefix_messages = 0


def _prefix_key(provider: str, head: Any) -> bytes | None:
    try:
        text = provider.encode() + dumps_sorted(head)
    except (TypeError, ValueError):
        return None
    return hashlib.blake2b(text, digest_size=16).digest()


def _reuse(key: bytes | None, raw: Sequence[JSON]) -> tuple[_Prior | None, int]:
    """What the previous request of this conversation start parsed, and how many leading
    client messages it shares with ``raw``."""
    if key is None:
        return None, 0
    with _PARSED_LOCK:
        hit = _PREFIX.get(key)
    if hit is None:
        return None, 0
    old = hit.raw
    n = min(len(old), len(raw))
    if (old if n == len(old) else old[:n]) == raw[:n]:  # in C (the same objects: by identity)
        return hit, n
    i = 0
    while i < n and (old[i] is raw[i] or old[i] == raw[i]):
        i += 1
    return hit, i


def _remember(key: bytes | None, prior: _Prior) -> None:
    global _prefix_messages
    if key is None:
        return
    with _PARSED_LOCK:
        old = _PREFIX.pop(key, None)
        if old is not None:
            _prefix_messages -= len(old.raw)
        _PREFIX[key] = prior
        _prefix_messages += len(prior.raw)
        while _prefix_messages > _PREFIX_MAX_MESSAGES and len(_PREFIX) > 1:
            _, gone = _PREFIX.popitem(last=False)
            _prefix_messages -= len(gone.raw)


__all__ = ["fingerprint", "parse_cached"]
