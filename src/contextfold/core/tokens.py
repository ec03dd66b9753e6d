"""Token counting: a fast script-aware estimate by default, exact tokenizers on request.

:class:`HeuristicCounter` needs no dependency and no download. It classifies every character
(ASCII letter, digit, space, newline, punctuation; CJK ideograph, kana, hangul, other letters,
symbols, emoji) with one ``bytes.translate`` over the UTF-8 text, derives run counts with
``bytes.count`` on a few projections of that class string, and weighs them with rates fitted
against the ``o200k_base`` tokenizer (45 real agent trajectories plus English, code, JSON,
Chinese, Japanese, Korean, Russian and French samples). No Python loop touches single
characters. Scripts that write without spaces other than CJK (Thai, Lao, Khmer ...) are
underestimated; exact counts are available through :class:`BpeCounter`.

:class:`BpeCounter` (``bpe-openai``) and :class:`TiktokenCounter` (``tiktoken``) give exact
counts; install them with the ``tokenizers`` extra (``pip install '.[tokenizers]'`` in the checkout).

Message-level counting (:func:`count_message`) adds per-message and per-tool-call framing, and
charges images a fixed amount instead of their base64 payload. :class:`Calibration` corrects the
estimate with the usage the provider reports.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from ..errors import ConfigError
from ..extras import install_hint
from .calibration import Calibration as Calibration
from .messages import Content, Message
from .tokens_heuristic import FEATURES as FEATURES
from .tokens_heuristic import WEIGHTS as WEIGHTS
from .tokens_heuristic import HeuristicCounter, text_features
from .tokens_heuristic import _heuristic_count as _heuristic_count

#: Framing tokens of one chat message (OpenAI counts 3 per message plus the role).
MESSAGE_OVERHEAD = 4
#: Framing tokens of one tool call on top of its id, name and arguments.
TOOL_CALL_OVERHEAD = 6
#: Framing tokens of one tool schema, and of the whole tool list when it is not empty.
TOOL_SCHEMA_OVERHEAD = 8
TOOLS_OVERHEAD = 12
#: Fixed charge for an image block: OpenAI "low" detail, and a 1024x1024 "high" detail image.
IMAGE_TOKENS_LOW = 85
IMAGE_TOKENS = 765

_IMAGE_TYPES = frozenset({"image", "image_url", "input_image"})
_EXTRA_HINT = "install it with: " + install_hint("tokenizers")


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the tokens of a text. ``name`` identifies the tokenizer (``"heuristic"``...)."""

    name: str

    def count_text(self, text: str) -> int: ...


# Exact counters
# --------------------------------------------------------------------------------------------

#: bpe-openai refuses inputs of 1M characters or 200K tokens; longer texts are counted in
#: chunks of at most this many characters (4 bytes per character at most keeps every chunk
#: below the token limit), cut after a newline so the pre-tokenizer sees the same pieces.
_BPE_CHUNK = 40_000


_SAFE_CUT = re.compile(r"[ \t]*\S")


def _split_points(text: str, size: int) -> Iterable[tuple[int, int]]:
    """Chunks of at most ``size`` characters, cut after a newline whose next line starts with
    (optional indentation and) a visible character: o200k's pre-tokenizer never joins across
    such a point, so the chunked count is exact. Texts without one are cut hard."""
    start, end = 0, len(text)
    while start < end:
        stop = min(end, start + size)
        if stop < end:
            cut = text.rfind("\n", start + size // 2, stop)
            while cut >= 0 and not _SAFE_CUT.match(text, cut + 1):
                cut = text.rfind("\n", start + size // 2, cut)
            if cut >= 0:
                stop = cut + 1
        yield start, stop
        start = stop


@functools.lru_cache(maxsize=8)
def _bpe_encoding(encoding: str) -> Any:
    try:
        import bpe_openai
    except ImportError:
        raise ConfigError(
            f"token counter 'bpe:{encoding}' needs the bpe-openai package; {_EXTRA_HINT}"
        ) from None
    try:
        return bpe_openai.get_encoding(encoding)
    except Exception as exc:
        raise ConfigError(f"bpe-openai cannot load encoding {encoding!r}: {exc}") from None


@functools.lru_cache(maxsize=8)
def _tiktoken_encoding(encoding: str) -> Any:
    try:
        import tiktoken
    except ImportError:
        raise ConfigError(
            f"token counter 'tiktoken:{encoding}' needs the tiktoken package; {_EXTRA_HINT}"
        ) from None
    try:
        return tiktoken.get_encoding(encoding)
    except Exception as exc:  # offline: tiktoken downloads its files on first use
        raise ConfigError(
            f"tiktoken cannot load encoding {encoding!r} ({type(exc).__name__}: {exc}); "
            "it downloads its files on first use - set TIKTOKEN_CACHE_DIR to a directory that "
            "holds them, or use the 'bpe:' counter, which works offline"
        ) from None


class BpeCounter:
    """Exact counts with the ``bpe-openai`` tokenizer (offline): o200k_base or cl100k_base."""

    def __init__(self, encoding: str = "o200k_base") -> None:
        self.encoding = encoding
        self.name = f"bpe:{encoding}"
        self._enc = _bpe_encoding(encoding)

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        if len(text) <= _BPE_CHUNK:
            return len(self._enc.encode_ordinary(text))
        return sum(
            len(self._enc.encode_ordinary(text[a:b])) for a, b in _split_points(text, _BPE_CHUNK)
        )

    def __repr__(self) -> str:
        return f"BpeCounter({self.encoding!r})"


class TiktokenCounter:
    """Exact counts with ``tiktoken``; its encoding files must be cached (it downloads them)."""

    def __init__(self, encoding: str = "o200k_base") -> None:
        self.encoding = encoding
        self.name = f"tiktoken:{encoding}"
        self._enc = _tiktoken_encoding(encoding)

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        return len(self._enc.encode_ordinary(text))

    def __repr__(self) -> str:
        return f"TiktokenCounter({self.encoding!r})"


class CharsPer4Counter:
    """Characters / 4, rounded up: the industry's rough estimate (the design notes'
    EstimateTokens); off by much more than the heuristic on code and non-Latin text."""

    name = "chars4"

    def count_text(self, text: str) -> int:
        return (len(text) + 3) // 4


_HEURISTIC = HeuristicCounter()
_CHARS4 = CharsPer4Counter()
_SPEC_HELP = (
    "'heuristic', 'chars4', 'o200k_base', 'cl100k_base', 'bpe:<encoding>' or 'tiktoken:<encoding>'"
)


def get_counter(spec: str | TokenCounter | None = None) -> TokenCounter:
    """Resolve a counter: None/"heuristic", an encoding name, "bpe:..." or "tiktoken:..."."""
    if spec is None:
        return _HEURISTIC
    if not isinstance(spec, str):
        if isinstance(spec, TokenCounter):
            return spec
        raise ConfigError(
            f"token counter must be {_SPEC_HELP} or an object with count_text(), "
            f"not {type(spec).__name__}"
        )
    key = spec.strip().lower()
    if key in ("", "heuristic"):
        return _HEURISTIC
    if key in ("chars4", "chars/4"):
        return _CHARS4
    kind, sep, encoding = key.partition(":")
    if not sep:
        kind, encoding = "bpe", key
    if not encoding:
        raise ConfigError(f"token counter {spec!r} names no encoding; expected {_SPEC_HELP}")
    if kind == "bpe":
        return BpeCounter(encoding)
    if kind == "tiktoken":
        return TiktokenCounter(encoding)
    raise ConfigError(f"unknown token counter {spec!r}; expected {_SPEC_HELP}")


# --------------------------------------------------------------------------------------------
# Messages and tools
# --------------------------------------------------------------------------------------------


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _count_block(counter: TokenCounter, block: Mapping[str, object]) -> int:
    kind = block.get("type")
    text = block.get("text")
    if isinstance(text, str):
        return counter.count_text(text)
    if kind in _IMAGE_TYPES:
        image = block.get("image_url")
        detail = image.get("detail") if isinstance(image, Mapping) else block.get("detail")
        return IMAGE_TOKENS_LOW if detail == "low" else IMAGE_TOKENS
    if kind == "tool_result":
        inner = block.get("content")
        if isinstance(inner, str):
            body = counter.count_text(inner)
        elif isinstance(inner, list | tuple):
            body = sum(_count_block(counter, b) for b in inner if isinstance(b, Mapping))
        else:
            body = 0
        return TOOL_CALL_OVERHEAD + counter.count_text(str(block.get("tool_use_id", ""))) + body
    if kind == "tool_use":
        return (
            TOOL_CALL_OVERHEAD
            + counter.count_text(str(block.get("id", "")))
            + counter.count_text(str(block.get("name", "")))
            + counter.count_text(_json(block.get("input", {})))
        )
    if kind == "thinking" and isinstance(thinking := block.get("thinking"), str):
        return counter.count_text(thinking)
    return counter.count_text(_json(dict(block)))


def count_content(counter: TokenCounter, content: Content) -> int:
    """Tokens of a message content: text, or blocks (images at a fixed rate, others as JSON)."""
    if content is None:
        return 0
    if isinstance(content, str):
        return counter.count_text(content)
    return sum(_count_block(counter, block) for block in content)


def count_message(counter: TokenCounter, msg: Message) -> int:
    """Tokens one message occupies in a request, framing included."""
    total = MESSAGE_OVERHEAD + count_content(counter, msg.content)
    if msg.name:
        total += 1 + counter.count_text(msg.name)
    if msg.tool_call_id:
        total += counter.count_text(msg.tool_call_id)
    for call in msg.tool_calls:
        total += (
            TOOL_CALL_OVERHEAD
            + counter.count_text(call.id)
            + counter.count_text(call.name)
            + counter.count_text(call.arguments)
        )
    return total


def count_messages(counter: TokenCounter, msgs: Iterable[Message]) -> int:
    return sum(count_message(counter, m) for m in msgs)


def count_tools(counter: TokenCounter, tools: Sequence[Mapping[str, object]]) -> int:
    """Tokens of tool schemas, OpenAI (``{"type": "function", "function": {...}}``) or
    Anthropic (``{"name", "description", "input_schema"}``) format; others count as JSON."""
    if not tools:
        return 0
    total = TOOLS_OVERHEAD
    for tool in tools:
        spec: Mapping[str, object] = tool
        fn = tool.get("function")
        if isinstance(fn, Mapping):
            spec = fn
        schema = spec.get("parameters", spec.get("input_schema"))
        if "name" not in spec or (schema is None and len(spec) > 2):
            total += TOOL_SCHEMA_OVERHEAD + counter.count_text(_json(dict(tool)))
            continue
        total += TOOL_SCHEMA_OVERHEAD + counter.count_text(str(spec["name"]))
        description = spec.get("description")
        if isinstance(description, str):
            total += counter.count_text(description)
        if schema is not None:
            total += counter.count_text(_json(schema))
    return total


# --------------------------------------------------------------------------------------------
# Cache and calibration
# --------------------------------------------------------------------------------------------


class MessageTokenCache:
    """Per-message counts, keyed by uuid and checked against the counted fields.

    A message whose content (or tool calls, name, tool_call_id) was replaced under the same
    uuid - an offload placeholder copy, say - is recounted. The cache holds the messages it
    counted, so keep one per session (one per ContextManager), not one per process.
    """

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self._entries: dict[str, tuple[Message, int]] = {}
        self.hits = 0
        self.misses = 0

    def count(self, msg: Message) -> int:
        entry = self._entries.get(msg.uuid)
        if entry is not None:
            cached, tokens = entry
            if cached is msg or _same_counted_fields(cached, msg):
                self.hits += 1
                return tokens
        tokens = count_message(self.counter, msg)
        self._entries[msg.uuid] = (msg, tokens)
        self.misses += 1
        return tokens

    get = count

    def seed(self, msg: Message, tokens: int) -> None:
        """Remember a count stored with the message (reopening does not re-tokenize)."""
        self._entries[msg.uuid] = (msg, tokens)

    def count_many(self, msgs: Iterable[Message]) -> int:
        return sum(self.count(m) for m in msgs)

    def discard(self, uuid: str) -> None:
        self._entries.pop(uuid, None)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


def _same_counted_fields(a: Message, b: Message) -> bool:
    return (
        (a.content is b.content or a.content == b.content)
        and (a.tool_calls is b.tool_calls or a.tool_calls == b.tool_calls)
        and a.name == b.name
        and a.tool_call_id == b.tool_call_id
    )


__all__ = [
    "IMAGE_TOKENS",
    "IMAGE_TOKENS_LOW",
    "MESSAGE_OVERHEAD",
    "TOOLS_OVERHEAD",
    "TOOL_CALL_OVERHEAD",
    "TOOL_SCHEMA_OVERHEAD",
    "BpeCounter",
    "Calibration",
    "HeuristicCounter",
    "MessageTokenCache",
    "TiktokenCounter",
    "TokenCounter",
    "count_content",
    "count_message",
    "count_messages",
    "count_tools",
    "get_counter",
    "text_features",
]
