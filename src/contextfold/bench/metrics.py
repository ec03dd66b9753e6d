"""Exact token counting and the per-call metrics of the replay benchmark.

Definitions (all counts are o200k_base tokens):

* **message tokens**: :func:`contextfold.core.tokens.count_message` over exact o200k text counts
  (4 framing tokens + content + tool call id, name, arguments and framing + tool_call_id);
  without that module, 4 + content + every tool call's name and JSON arguments.
* **cached prefix** of a call = the longest common prefix of its view with the previous call's
  view. Whole messages are compared first (dict equality); inside the first differing message
  the framing counts as cached when the role is the same, then the common token prefix of the
  content (computed on the common character prefix, minus one token for the merge at the
  boundary), then, when contents are equal, the common prefix of the tool-call text.
* **cache-aware cost** of a call = 0.1 x cached prefix + 1.0 x the rest; summarizer input and
  output tokens are added at 1.0 by the replay.
* **edited files** are parsed from the agent's commands (see :func:`edited_files`); a file is
  *named* in a view when its short name (last two path components, first component of an
  absolute path dropped) occurs in the view text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..core.shell import ShellReader, files_written
from ..errors import ContextFoldError
from ..extras import needs_extra

OVERHEAD = 4
CACHED_RATE = 0.1
_CHUNK = 40_000  # characters per encode call (bpe_openai refuses > 200K tokens at once)

MsgDict = Mapping[str, object]


def content_text(content: object) -> str:
    """The text of an OpenAI ``content`` value (text blocks by text, others as JSON)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list | tuple):
        parts: list[str] = []
        for block in content:
            if isinstance(block, Mapping) and isinstance(block.get("text"), str):
                parts.append(block["text"])
            else:
                parts.append(json.dumps(block, ensure_ascii=False, sort_keys=True))
        return "\n".join(parts)
    return str(content)


def tool_calls(msg: MsgDict) -> list[MsgDict]:
    """The message's tool calls (the ``tool_calls`` entries that are objects)."""
    calls = msg.get("tool_calls") or ()
    return [c for c in calls if isinstance(c, Mapping)] if isinstance(calls, list | tuple) else []


def function_of(call: MsgDict) -> MsgDict:
    """A tool call's ``function`` object (empty when missing)."""
    fn = call.get("function")
    return fn if isinstance(fn, Mapping) else {}


def calls_text(msg: MsgDict) -> str:
    """Tool-call names and arguments as one string (the part of a message after its content)."""
    out: list[str] = []
    for call in tool_calls(msg):
        fn = function_of(call)
        out.append(str(fn.get("name") or ""))
        out.append(str(fn.get("arguments") or ""))
    return "\n".join(out)


def message_text(msg: MsgDict) -> str:
    """Everything in a message a model reads: content, then tool-call names and arguments."""
    text = content_text(msg.get("content"))
    calls = calls_text(msg)
    return f"{text}\n{calls}" if calls else text


class TokenCounter:
    """Exact o200k_base counts with a per-string cache (``bpe_openai``, offline)."""

    def __init__(self) -> None:
        try:
            import bpe_openai
        except ImportError:
            from ..errors import ConfigError

            raise ConfigError(
                needs_extra("contextfold bench (exact o200k tokens with bpe-openai)", "tokenizers")
            ) from None

        self._enc: Any = bpe_openai.get_encoding("o200k_base")
        self._cache: dict[str, int] = {}
        self._msg_cache: dict[tuple[Any, ...], int] = {}
        self._lib: Any = None
        try:
            from ..core import tokens as lib
            from ..core.wire import from_openai

            self._lib = (lib.count_message, from_openai)
        except (ImportError, AttributeError):
            self._lib = None

    def count_text(self, text: str) -> int:
        """The :class:`contextfold.core.tokens.TokenCounter` protocol (cached exact count)."""
        return self.count(text)

    def encode(self, text: str) -> list[int]:
        if len(text) <= _CHUNK:
            return list(self._enc.encode_ordinary(text))
        out: list[int] = []
        start = 0
        while start < len(text):
            end = min(len(text), start + _CHUNK)
            if end < len(text):
                cut = text.rfind("\n", start + _CHUNK // 2, end)
                if cut > start:
                    end = cut + 1
            out.extend(self._enc.encode_ordinary(text[start:end]))
            start = end
        return out

    def count(self, text: str) -> int:
        if not text:
            return 0
        got = self._cache.get(text)
        if got is None:
            got = len(self.encode(text))
            self._cache[text] = got
        return got

    def message(self, msg: MsgDict) -> int:
        content = msg.get("content")
        text = content if isinstance(content, str) else content_text(content)
        calls = tool_calls(msg)
        key = (
            msg.get("role"),
            text,
            calls_text(msg) if calls else "",
            tuple(str(c.get("id")) for c in calls),
            msg.get("tool_call_id"),
            msg.get("name"),
        )
        got = self._msg_cache.get(key)
        if got is None:
            got = self._message(msg)
            self._msg_cache[key] = got
        return got

    def _message(self, msg: MsgDict) -> int:
        if self._lib is not None:
            count_message, from_openai = self._lib
            try:
                return int(count_message(self, from_openai(msg)))
            except ContextFoldError:
                pass  # a message the model rejects still costs its text
        n = OVERHEAD + self.count(content_text(msg.get("content")))
        for call in tool_calls(msg):
            fn = function_of(call)
            n += self.count(str(fn.get("name") or "")) + self.count(str(fn.get("arguments") or ""))
        return n

    def view(self, view: Sequence[MsgDict]) -> int:
        return sum(self.message(m) for m in view)

    def common_prefix(self, a: str, b: str) -> int:
        """Tokens of the common prefix of two texts (one token is lost at the boundary)."""
        if a == b:
            return self.count(a)
        n = _char_lcp(a, b)
        if n == 0:
            return 0
        return max(0, self.count(a[:n]) - 1)


def _char_lcp(a: str, b: str) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def cached_prefix_tokens(
    prev: Sequence[MsgDict] | None, cur: Sequence[MsgDict], counter: TokenCounter
) -> int:
    """Tokens of ``cur`` that a prefix cache filled by ``prev`` would serve (see module doc)."""
    if not prev:
        return 0
    total = 0
    for a, b in zip(prev, cur, strict=False):
        if a is b or a == b:
            total += counter.message(b)
            continue
        if a.get("role") != b.get("role"):
            return total
        part = OVERHEAD
        ca, cb = content_text(a.get("content")), content_text(b.get("content"))
        if ca == cb:
            part += counter.count(cb) + counter.common_prefix(calls_text(a), calls_text(b))
        else:
            part += counter.common_prefix(ca, cb)
        return total + min(part, counter.message(b))
    return total


def call_cost(view_tokens: int, cached_tokens: int) -> float:
    return CACHED_RATE * cached_tokens + (view_tokens - cached_tokens)


def is_extension(prev: Sequence[MsgDict] | None, cur: Sequence[MsgDict]) -> bool:
    """True when ``cur`` starts with all of ``prev`` unchanged (nothing was rewritten)."""
    if prev is None:
        return True
    if len(cur) < len(prev):
        return False
    return all(a is b or a == b for a, b in zip(prev, cur, strict=False))


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return float(ordered[k])


# --------------------------------------------------------------------------- edited files


def edited_files(command: str) -> list[str]:
    """Files a shell command writes (see :mod:`contextfold.core.shell`): ``sed -i``, ``cat >``/
    ``cat <<EOF >``, ``tee``, ``echo/printf >``, Python ``open(..., 'w')``/
    ``Path(...).write_text`` (in ``python -c`` or in a script written by a heredoc),
    ``patch``/``git apply``, ``cp``/``mv`` and SWE-agent's ``create FILE``; the files a Python
    script written by heredoc opens for writing count too (its run is not seen)."""
    return ShellReader().written(command, scripts=True)


def tool_call_edits(msg: MsgDict) -> list[str]:
    """Files the tool calls of one assistant message edit (editor calls and commands)."""
    out: list[str] = []
    for call in tool_calls(msg):
        fn = function_of(call)
        args = fn.get("arguments") or "{}"
        if not isinstance(args, str | Mapping):
            args = str(args)
        written = files_written(str(fn.get("name") or ""), args)
        out += [p for p in written if p not in out]
    return out


def short_name(path: str) -> str:
    """The part of a path a summary is expected to mention: the last two components (the
    first component of an absolute path, e.g. ``/testbed``, is not required)."""
    parts = [p for p in path.split("/") if p and p != "."]
    if path.startswith("/") and len(parts) > 1:
        parts = parts[1:]
    return "/".join(parts[-2:]) if parts else path


def named_share(files: Iterable[str], view_text: str) -> tuple[int, int]:
    """(named, total) for the files whose short name occurs in ``view_text``."""
    files = list(files)
    named = sum(1 for f in files if short_name(f) in view_text)
    return named, len(files)


def view_text(view: Sequence[MsgDict]) -> str:
    return "\n".join(message_text(m) for m in view)
