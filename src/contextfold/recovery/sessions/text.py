"""Text of session search.

What is indexed of a message, and snippets cut around the query words (ranking and
tokenizing are the store's: :mod:`contextfold.storage.text`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ...core.messages import Message

_CJK_CLASS = (
    "\u2e80-\u2fdf\u3000-\u30ff\u3100-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
    "\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef"
)
_CJK = re.compile(f"([{_CJK_CLASS}])")
#: Separator put around CJK characters: not whitespace, not a token character for unicode61.
_ZWSP = "\u200b"
_CJK_MARK_GAP = re.compile(f"(?<=[{_CJK_CLASS}])\\]\\[(?=[{_CJK_CLASS}])")
_SNIP_OPEN, _SNIP_CLOSE, _SNIP_ELLIPSIS = "[", "]", "…"


def join_cjk(text: str) -> str:
    """Snippet text for display: adjacent highlighted CJK characters merged into one mark."""
    if _ZWSP not in text:
        return text
    return _CJK_MARK_GAP.sub("", text.replace(_ZWSP, ""))


def _arg_strings(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, str | dict | list):
                _arg_strings(v, out)
            elif v is not None:
                out.append(f"{k}={v}")
    elif isinstance(value, list):
        for v in value:
            _arg_strings(v, out)


def _head_tail(text: str, limit: int) -> str:
    if limit <= 0 or len(text) <= limit:
        return text
    head = limit * 3 // 4
    return text[:head] + "\n…\n" + text[len(text) - (limit - head) :]


def message_search_text(msg: Message, *, max_chars: int, max_tool_chars: int) -> str:
    """The text of a message that goes into the index."""
    parts = [msg.text]
    for call in msg.tool_calls:
        args: list[str] = []
        try:
            _arg_strings(call.parsed_arguments(), args)
        except ValueError:
            args = [call.arguments]
        parts.append(call.name + " " + " ".join(args))
    text = "\n".join(p for p in parts if p)
    return _head_tail(text, max_tool_chars if msg.role == "tool" else max_chars)


def make_snippet(body: str, terms: Sequence[str], width: int = 180) -> str:
    """A window of ``body`` around the densest cluster of ``terms``, hits in [brackets]."""
    body = join_cjk(body)
    words = [t for t in dict.fromkeys(t.lower() for t in terms) if t]
    if not words:
        return " ".join(body[:width].split())
    pattern = re.compile(
        "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)), re.IGNORECASE
    )
    found = [(m.start(), m.group(0).lower()) for m in pattern.finditer(body, 0, 400_000)]
    best, best_score = 0, -1
    for i, (pos, _) in enumerate(found[:2000]):
        distinct = {w for p, w in found[i : i + 50] if p < pos + width * 2 // 3}
        if len(distinct) > best_score:
            best, best_score = pos, len(distinct)
            if best_score == len(words):
                break
    start = max(0, best - width // 3)
    end = min(len(body), start + width)
    text = pattern.sub(lambda m: f"{_SNIP_OPEN}{m.group(0)}{_SNIP_CLOSE}", body[start:end])
    text = " ".join(text.split())
    return ("…" if start else "") + text + ("…" if end < len(body) else "")


__all__ = [
    "join_cjk",
    "make_snippet",
    "message_search_text",
]
