"""Text of the session index: what is indexed and how queries and snippets are made.

CJK characters are split by zero-width spaces before indexing (and in queries) so that the
``unicode61`` tokenizer matches Chinese/Japanese substrings as phrases; :func:`join_cjk`
undoes it for display. Bodies are stored zlib-compressed (:func:`zip_text`).
"""

from __future__ import annotations

import hashlib
import re
import zlib
from collections.abc import Sequence
from typing import Any

from ..messages import Message

_CJK_CLASS = (
    "\u2e80-\u2fdf\u3000-\u30ff\u3100-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
    "\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef"
)
_CJK = re.compile(f"([{_CJK_CLASS}])")
#: Separator put around CJK characters: not whitespace, not a token character for unicode61.
_ZWSP = "\u200b"
_CJK_MARK_GAP = re.compile(f"(?<=[{_CJK_CLASS}])\\]\\[(?=[{_CJK_CLASS}])")
_SNIP_OPEN, _SNIP_CLOSE, _SNIP_ELLIPSIS = "[", "]", "…"


def split_cjk(text: str) -> str:
    """Make every CJK character its own token (zero-width spaces around each)."""
    return _CJK.sub(f"{_ZWSP}\\1{_ZWSP}", text) if _CJK.search(text) else text


def join_cjk(text: str) -> str:
    """Undo :func:`split_cjk` for display, merging adjacent highlighted CJK characters."""
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


def fts_query(query: str, *, op: str = "AND") -> str:
    """User text as a safe FTS5 MATCH expression: every word becomes a quoted phrase."""
    phrases: list[str] = []
    for chunk in split_cjk(query).split():
        if not any(ch.isalnum() for ch in chunk):
            continue
        phrases.append('"' + chunk.replace('"', '""') + '"')
    return f" {op} ".join(phrases)


def like_terms(query: str) -> list[str]:
    return [t for t in query.split() if any(ch.isalnum() for ch in t)]


def scope_key(kind: str, value: str) -> str:
    """One FTS token standing for an agent or session id (hashed: ids are arbitrary text)."""
    return kind + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:20]


def zip_text(text: str) -> bytes:
    return zlib.compress(text.encode("utf-8", "surrogatepass"), 1)


def unzip_text(blob: bytes | None) -> str:
    return zlib.decompress(blob).decode("utf-8", "surrogatepass") if blob else ""


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
    "fts_query",
    "join_cjk",
    "like_terms",
    "make_snippet",
    "message_search_text",
    "scope_key",
    "split_cjk",
    "unzip_text",
    "zip_text",
]
