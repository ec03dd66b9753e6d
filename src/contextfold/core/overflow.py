"""Recognize "the prompt does not fit the model's context window" errors (overflow recovery).

Overflow recovery starts when an LLM call fails because the request was too long. Providers say
so in many ways; :func:`is_context_overflow` knows them without importing any SDK (it looks at
the exception's class names, ``code``/``type``/``body``/``status_code`` attributes and message)
and walks ``__cause__``/``__context__`` chains and exception groups, so wrapped errors count.

Recognized (``overflow_kind`` names the first that matches):

* ``"litellm"``: LiteLLM ``ContextWindowExceededError`` (by class name anywhere in the MRO).
* ``"llamacpp"``: llama.cpp server ``exceed_context_size_error`` / "the request exceeds the
  available context size".
* ``"vllm"``: "This model's maximum context length is N tokens. However, you requested M
  tokens ..." / "... is longer than the maximum model length / the model's context length" /
  "The prompt (total length N) is too long to fit into the model (context length M)".
* ``"ollama"``: "input length exceeds the (maximum) context length" / "context length exceeded".
* ``"anthropic"``: "prompt is too long: N tokens > M maximum" and "input length and
  `max_tokens` exceed context limit".
* ``"gemini"``: "The input token count (N) exceeds the maximum number of tokens allowed (M)."
* ``"openai"``: code ``context_length_exceeded`` (the SDK's ``code`` attribute or the body),
  "This model's maximum context length is ...", "Your input exceeds the context window".
* ``"generic"``: "context_length_exceeded", "context window exceeded", "maximum context",
  "token limit", "too many tokens", "exceeds the maximum number of tokens", "input is too long".

Never an overflow, whatever the text says:

* HTTP 401/403/429 (status code, class name ``RateLimitError``/``AuthenticationError``/
  ``PermissionDeniedError``, or an Anthropic ``rate_limit_error``/``authentication_error``/
  ``permission_error``/``overloaded_error`` body): shrinking the prompt does not fix them, and
  OpenAI's TPM rate limits mention tokens ("Request too large ... tokens per min").
* OpenAI's "max_tokens is too large: N. This model supports at most M completion tokens": the
  *output* limit is misconfigured; compaction cannot help. (vLLM's "'max_tokens' is too large
  ... your request has N input tokens" is an overflow: a shorter prompt fixes it.)
* A response truncated by the output limit (OpenAI ``LengthFinishReasonError``) is not a
  request failure and matches nothing here.

:class:`contextfold.errors.ContextOverflowError` (overflow that survived recovery) is kind
``"contextfold"``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from ..errors import ContextOverflowError

_NOT_OVERFLOW_STATUS = frozenset({401, 403, 429})
_NOT_OVERFLOW_CLASSES = frozenset(
    {"RateLimitError", "AuthenticationError", "PermissionDeniedError", "OAuthError"}
)
_NOT_OVERFLOW_TYPES = frozenset(
    {"rate_limit_error", "authentication_error", "permission_error", "overloaded_error"}
)

_OUTPUT_LIMIT_ONLY = re.compile(r"supports at most \d+ completion tokens", re.I)

#: (kind, pattern) in priority order; the text searched is lower-cased.
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "llamacpp",
        re.compile(r"exceed_context_size_error|exceeds the available context size"),
    ),
    (
        "vllm",
        re.compile(
            r"maximum context length is \d+ tokens\.? however, you requested"
            r"|is longer than the (?:model's context length|maximum model length)"
            r"|too long to fit into the model"
            r"|maximum context length is \d+ tokens and your request has \d+ input tokens"
        ),
    ),
    (
        "ollama",
        re.compile(
            r"input length exceeds (?:the |maximum )?context length|context length exceeded"
        ),
    ),
    (
        "anthropic",
        re.compile(r"prompt is too long|exceed context limit"),
    ),
    (
        "openai",
        re.compile(
            r"context_length_exceeded.*maximum context length"
            r"|maximum context length is \d+ tokens"
            r"|your input exceeds the context window"
        ),
    ),
    (
        "gemini",
        re.compile(r"input token count \(\d+\) exceeds the maximum number of tokens allowed"),
    ),
    (
        "generic",
        re.compile(
            r"context_length_exceeded|context[ _]window[ _]exceeded|exceeds? the context window"
            r"|maximum context|token limit|too many (?:input )?tokens"
            r"|exceeds the maximum number of tokens|input is too long"
        ),
    ),
)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception, its causes/contexts and group members, each once."""
    seen: set[int] = set()
    stack = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        members = getattr(current, "exceptions", None)
        if isinstance(members, list | tuple):
            stack.extend(m for m in reversed(members) if isinstance(m, BaseException))
        if current.__context__ is not None and not current.__suppress_context__:
            stack.append(current.__context__)
        if current.__cause__ is not None:
            stack.append(current.__cause__)


def _class_names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def _status(exc: BaseException) -> int | None:
    for holder in (exc, getattr(exc, "response", None)):
        status = getattr(holder, "status_code", None)
        if isinstance(status, int) and not isinstance(status, bool):
            return status
    return None


def _body_error(exc: BaseException) -> dict[str, Any]:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error")
        return inner if isinstance(inner, dict) else body
    return {}


def _excluded(exc: BaseException) -> bool:
    if _status(exc) in _NOT_OVERFLOW_STATUS:
        return True
    if _class_names(exc) & _NOT_OVERFLOW_CLASSES:
        return True
    kind = _body_error(exc).get("type", getattr(exc, "type", None))
    return isinstance(kind, str) and kind in _NOT_OVERFLOW_TYPES


def _text(exc: BaseException) -> str:
    parts = [str(exc)]
    for attr in ("message", "code", "type", "error"):
        value = getattr(exc, attr, None)
        if isinstance(value, str):
            parts.append(value)
    body = getattr(exc, "body", None)
    if body is not None:
        try:
            parts.append(json.dumps(body, default=str))
        except (TypeError, ValueError):
            parts.append(repr(body))
    return "\n".join(parts).lower()


def _kind_of(exc: BaseException) -> str | None:
    if isinstance(exc, ContextOverflowError):
        return "contextfold"
    if "ContextWindowExceededError" in _class_names(exc):
        return "litellm"
    if _excluded(exc):
        return None
    text = _text(exc)
    if _OUTPUT_LIMIT_ONLY.search(text):
        return None
    if getattr(exc, "code", None) == "context_length_exceeded":
        # OpenAI (the SDK copies ``code`` from the error body), unless a server that imitates
        # OpenAI's code says who it is in the message.
        for kind, pattern in _PATTERNS[:3]:
            if pattern.search(text):
                return kind
        return "openai"
    for kind, pattern in _PATTERNS:
        if pattern.search(text):
            return kind
    return None


def overflow_kind(exc: BaseException) -> str | None:
    """Which provider's context-overflow error ``exc`` is (or wraps); None if it is none.

    One of ``"litellm"``, ``"llamacpp"``, ``"vllm"``, ``"ollama"``, ``"anthropic"``,
    ``"openai"``, ``"gemini"``, ``"generic"``, ``"contextfold"``.
    """
    for link in _chain(exc):
        kind = _kind_of(link)
        if kind is not None:
            return kind
    return None


def is_context_overflow(exc: BaseException) -> bool:
    """True when ``exc`` (or an exception it wraps) says the request exceeded the context."""
    return overflow_kind(exc) is not None


OVERFLOW_KINDS: tuple[str, ...] = (
    "litellm",
    "llamacpp",
    "vllm",
    "ollama",
    "anthropic",
    "openai",
    "gemini",
    "generic",
    "contextfold",
)

__all__ = ["OVERFLOW_KINDS", "is_context_overflow", "overflow_kind"]
