"""Learn the real context window from a provider's overflow error.

A context-overflow error often states the model's limit ("This model's maximum context length is
16384 tokens", "prompt is too long: 210000 tokens > 200000 maximum", llama.cpp's ``n_ctx``).
:func:`stated_limit` reads it, together with the prompt size the provider counted and the tokens
it reserved for the completion when it says so. :class:`LearnedWindow` is what a session keeps:
the lowered window and the provider's words, persisted with the compactor state so a reopened
manager still fits. :class:`WindowLearnedWarning` is the warning emitted when a window is lowered.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from ..core.config import ContextConfig
from ..core.overflow import _chain, _text, overflow_kind
from ..core.tokens import Calibration
from ..jsontypes import JSON, JSONObject  # noqa: F401  (JSON resolves JSONObject at runtime)

_NUM = r"(\d[\d,_]*)"

#: (pattern, group names) tried in order on the lower-cased error text of every exception in the
#: chain. ``limit`` is the window, ``prompt`` the prompt tokens the provider counted, ``completion``
#: the tokens it reserved for the reply.
_FORMS: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...] = (
    # OpenAI / vLLM / LiteLLM: "... maximum context length is 4096 tokens. However, you
    # requested 5000 tokens (4000 in the messages, 1000 in the completion)."
    (
        re.compile(
            rf"maximum context length is {_NUM} tokens\.? however, you requested {_NUM} tokens "
            rf"\({_NUM} in the messages, {_NUM} in the completion\)"
        ),
        ("limit", "total", "prompt", "completion"),
    ),
    # vLLM: "... maximum context length is 4096 tokens and your request has 3500 input tokens
    # (1000 > 4096 - 3500)"
    (
        re.compile(
            rf"maximum context length is {_NUM} tokens and your request has {_NUM} input tokens"
            rf"(?: \({_NUM} >)?"
        ),
        ("limit", "prompt", "completion"),
    ),
    # OpenAI: "... maximum context length is 16384 tokens. However, your messages resulted in
    # 17000 tokens"
    (
        re.compile(
            rf"maximum context length is {_NUM} tokens\.?(?: however, your messages resulted in "
            rf"{_NUM} tokens)?"
        ),
        ("limit", "prompt"),
    ),
    # Anthropic: "prompt is too long: 210000 tokens > 200000 maximum"
    (re.compile(rf"prompt is too long: {_NUM} tokens > {_NUM} maximum"), ("prompt", "limit")),
    # Anthropic: "input length and `max_tokens` exceed context limit: 197626 + 8192 > 200000"
    (
        re.compile(rf"exceed context limit: {_NUM} \+ {_NUM} > {_NUM}"),
        ("prompt", "completion", "limit"),
    ),
    # vLLM: "The prompt (total length 40000) is too long to fit into the model (context length
    # 32768)"
    (
        re.compile(
            rf"total length {_NUM}\) is too long to fit into the model \(context length {_NUM}"
        ),
        ("prompt", "limit"),
    ),
    # vLLM: "Input prompt (9000 tokens) is longer than the model's context length (8192)" /
    # "The decoder prompt (length 9000) is longer than the maximum model length of 8192."
    (
        re.compile(
            rf"\((?:length )?{_NUM}(?: tokens)?\) is longer than the (?:model's context length "
            rf"\(|maximum model length of ){_NUM}"
        ),
        ("prompt", "limit"),
    ),
    # llama.cpp server: the error body carries n_prompt_tokens and n_ctx
    (re.compile(rf'"n_prompt_tokens": {_NUM}, "n_ctx": {_NUM}'), ("prompt", "limit")),
    (re.compile(rf'"n_ctx": {_NUM}'), ("limit",)),
    # Gemini: "The input token count (1200000) exceeds the maximum number of tokens allowed
    # (1048576)."
    (
        re.compile(
            rf"input token count \({_NUM}\) exceeds the maximum number of tokens allowed \({_NUM}\)"
        ),
        ("prompt", "limit"),
    ),
    # Mistral: "Prompt contains 40000 tokens ... too large for model with 32768 maximum context
    # length"
    (
        re.compile(rf"prompt contains {_NUM} tokens.*?too large for model with {_NUM} maximum"),
        ("prompt", "limit"),
    ),
    # Ollama and others: "... context length of 8192", "context window of 8192 tokens",
    # "context size (8192)"
    (
        re.compile(rf"context (?:length|window|size|limit) (?:of |is |\(){_NUM}"),
        ("limit",),
    ),
)


@dataclass(frozen=True, kw_only=True, slots=True)
class StatedLimit:
    """What an overflow error says: the window, and when stated, the prompt and reply sizes."""

    limit: int
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    kind: str = "generic"
    #: The sentence of the error the numbers come from (for warnings and notes).
    source: str = ""

    def prompt_window(self, reserve_output_tokens: int = 0) -> int:
        """The window left for what contextfold counts (the prompt plus its own output
        reserve): the limit minus the completion tokens the provider reserved beyond it."""
        completion = self.completion_tokens or 0
        window = self.limit - max(0, completion - max(0, reserve_output_tokens))
        return max(1, min(self.limit, window))


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        value = int(text.replace(",", "").replace("_", ""))
    except ValueError:
        return None
    return value if value > 0 else None


def stated_limit(exc: BaseException) -> StatedLimit | None:
    """The context limit an overflow error states, or None (not an overflow, or no number)."""
    kind = overflow_kind(exc)
    if kind is None:
        return None
    for link in _chain(exc):
        text = _text(link)
        for pattern, names in _FORMS:
            match = pattern.search(text)
            if match is None:
                continue
            values = dict(zip(names, (_int(g) for g in match.groups())))
            limit = values.get("limit")
            if limit is None:
                continue
            return StatedLimit(
                limit=limit,
                prompt_tokens=values.get("prompt"),
                completion_tokens=values.get("completion"),
                kind=kind,
                source=match.group(0),
            )
    return None


class WindowLearnedWarning(UserWarning):
    """A provider's overflow error stated a smaller window than configured; it is used now."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LearnedWindow:
    """A window lowered because the provider said so, persisted with the compactor state."""

    window: int
    source: str
    kind: str = "generic"

    def to_dict(self) -> JSONObject:
        return {"window": self.window, "source": self.source, "kind": self.kind}

    @classmethod
    def from_dict(cls, data: object) -> LearnedWindow | None:
        """None for a missing or malformed entry (the state file is derived data)."""
        if not isinstance(data, Mapping):
            return None
        window = data.get("window")
        if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
            return None
        return cls(
            window=window, source=str(data.get("source", "")), kind=str(data.get("kind", ""))
        )


def _caller_level() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside contextfold (the
    user's call, however many library frames are in between)."""
    top = sys.modules[__name__.partition(".")[0]]
    package = os.path.dirname(os.path.abspath(str(top.__file__)))
    frame = sys._getframe(1)
    level = 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


class OverflowContext(Protocol):
    """What learning from an overflow error reads of an open session."""

    config: ContextConfig
    session_id: str
    calibration: Calibration
    window: int
    #: view tokens of the request that was sent (uncalibrated), of its leading system
    #: messages (uncalibrated) and of the rest of it (tool schemas, injection: calibrated)
    last_estimate: int
    last_prefix: int
    last_fixed: int


def learn_from_overflow(
    cm: OverflowContext, exc: BaseException
) -> tuple[str | None, LearnedWindow | None]:
    """What an overflow error says: a note for the record (or None) and the window to use
    from now on (None: keep the current one). The calibration is corrected in place.

    * The prompt size the provider counted corrects the calibration when contextfold estimated
      less (the scale is raised to at least that ratio, within the calibration's bounds).
    * A stated window smaller than ``cm.window`` is returned, to become the session's window.
    * With no number at all, the request that failed bounds the window: it is lowered to 95% of
      the tokens just sent (never raised).

    A lowered window is announced with a :class:`WindowLearnedWarning`.
    """
    stated = stated_limit(exc)
    notes: list[str] = []
    cal = cm.calibration
    messages = cm.last_estimate - cm.last_prefix
    fixed = cal.apply_fixed(cm.last_prefix) + cm.last_fixed
    sent = cal.apply(messages) + fixed
    if stated is not None and stated.prompt_tokens and messages > 0:
        ratio = (stated.prompt_tokens - fixed) / messages
        if ratio > cal.scale:
            old = cal.scale
            cal.scale = min(cal.MAX_SCALE, ratio)
            notes.append(
                f"token estimate scaled {old:.2f} -> {cal.scale:.2f}: the provider counted "
                f"{stated.prompt_tokens} tokens where {sent} were estimated"
            )
    if stated is not None:
        window = stated.prompt_window(cm.config.reserve_output_tokens)
        source = f"{stated.kind}: {stated.source}"
    elif sent > 0:
        window = int(sent * 0.95)
        source = f"inferred: a request of about {sent} tokens overflowed"
    else:
        return "; ".join(notes) or None, None
    learned = None
    if 0 < window < cm.window:
        old_window = cm.window
        learned = LearnedWindow(window=window, source=source, kind=stated.kind if stated else "")
        text = (
            f"context window lowered from {old_window} to {window} tokens for session "
            f"{cm.session_id!r} ({source})"
        )
        warnings.warn(WindowLearnedWarning(text), stacklevel=_caller_level())
        notes.append(text)
    return "; ".join(notes) or None, learned


__all__ = [
    "LearnedWindow",
    "OverflowContext",
    "StatedLimit",
    "WindowLearnedWarning",
    "learn_from_overflow",
    "stated_limit",
]
