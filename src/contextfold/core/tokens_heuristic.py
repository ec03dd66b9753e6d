"""The heuristic token counter (part of :mod:`contextfold.core.tokens`).

:class:`HeuristicCounter` classifies every character with one ``bytes.translate`` over the
UTF-8 text, derives run counts with ``bytes.count`` on a few projections of that class string,
and weighs them with rates fitted against the ``o200k_base`` tokenizer.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping

from .textmemo import by_text

# --------------------------------------------------------------------------------------------
# Heuristic counter
# --------------------------------------------------------------------------------------------


def _class_table() -> bytes:
    """Map each UTF-8 byte to a class letter; continuation bytes are deleted separately.

    ASCII: ``a`` lower, ``A`` upper, ``0`` digit, space (also tab), newline (also CR), ``.``
    punctuation and control. Lead bytes of multi-byte characters: ``c`` other letters (Latin-1
    letters, Greek, Cyrillic, Hebrew, Arabic, Indic ...), ``S`` symbols (U+0080-00BF, U+2000-2FFF,
    private use, fullwidth forms), ``K`` U+3000-3FFF (kana, CJK punctuation), ``H`` CJK
    ideographs, ``G`` hangul, ``E`` four-byte characters (emoji, rare ideographs).
    """
    table = bytearray(b"." * 256)
    for lo, hi, cls in (
        (0x61, 0x7A, "a"),
        (0x41, 0x5A, "A"),
        (0x30, 0x39, "0"),
        (0xC0, 0xC2, "S"),
        (0xC3, 0xE1, "c"),
        (0xE2, 0xE2, "S"),
        (0xE3, 0xE3, "K"),
        (0xE4, 0xE9, "H"),
        (0xEA, 0xED, "G"),
        (0xEE, 0xEF, "S"),
        (0xF0, 0xFF, "E"),
    ):
        table[lo : hi + 1] = cls.encode() * (hi - lo + 1)
    table[0x20] = table[0x09] = ord(" ")
    table[0x0A] = table[0x0D] = ord("\n")
    return bytes(table)


def _projection(keep: Mapping[str, str]) -> bytes:
    """A table mapping each class letter in a key of ``keep`` to its value, the rest to x."""
    table = bytearray(b"x" * 256)
    for src, dst in keep.items():
        for ch in src:
            table[ord(ch)] = ord(dst)
    return bytes(table)


_CLASSES = _class_table()
_CONTINUATION = bytes(range(0x80, 0xC0))
_ASCII_CLASSES = b"aA0 \n."
_LETTERS = _projection({"aAc": "a"})
_DIGITS_PUNCT = _projection({"0": "0", ".": "."})
_SPACES = _projection({" ": " ", "\n": "\n"})
_LONG_WORD = b"a" * 10

#: Feature names and their weights (tokens per occurrence), fitted against o200k_base.
FEATURES: tuple[str, ...] = (
    "words",  # runs of letters (ASCII and other alphabets)
    "case_splits",  # lower->upper transitions (camelCase)
    "long_word_parts",  # sum over letter runs of len // 10
    "digit_runs",
    "punct_runs",
    "punct_chars",
    "space_runs",  # runs of two or more spaces/tabs (indentation)
    "newline_runs",
    "other_letters",  # letters of non-Latin alphabets and accented letters, per character
    "ideographs",
    "kana",
    "hangul",
    "symbols",
    "astral",  # emoji and other four-byte characters
)
WEIGHTS: tuple[float, ...] = (
    1.042,
    0.799,
    0.697,
    2.205,
    0.420,
    0.198,
    0.878,
    0.453,
    0.101,
    0.778,
    0.802,
    0.801,
    1.091,
    2.035,
)
if len(WEIGHTS) != len(FEATURES):  # pragma: no cover - a fitting error
    raise ImportError("tokens_heuristic: one weight per feature")


def text_features(text: str) -> tuple[int, ...]:
    """The feature vector of :data:`FEATURES` for ``text`` (exposed for benchmarks/fitting)."""
    if text.isascii():
        s = text.encode("ascii").translate(_CLASSES)
        rest = b""
    else:
        s = text.encode("utf-8", "surrogatepass").translate(_CLASSES, _CONTINUATION)
        rest = s.translate(None, _ASCII_CLASSES)
    letters = s.translate(_LETTERS)
    dp = s.translate(_DIGITS_PUNCT)
    sp = s.translate(_SPACES)
    first = s[:1]
    return (
        letters.count(b"xa") + (letters[:1] == b"a"),
        s.count(b"aA"),
        letters.count(_LONG_WORD),
        dp.count(b"x0") + dp.count(b".0") + (first == b"0"),
        dp.count(b"x.") + dp.count(b"0.") + (first == b"."),
        s.count(b"."),
        sp.count(b"x  ") + sp.count(b"\n  "),
        sp.count(b"x\n") + sp.count(b" \n") + (first == b"\n"),
        rest.count(b"c"),
        rest.count(b"H"),
        rest.count(b"K"),
        rest.count(b"G"),
        rest.count(b"S"),
        rest.count(b"E"),
    )


class HeuristicCounter:
    """Script-aware estimate of o200k_base token counts; deterministic, no dependencies."""

    name = "heuristic"

    def count_text(self, text: str) -> int:
        return _heuristic_count(text)

    def __repr__(self) -> str:
        return "HeuristicCounter()"


@by_text()  # a message is counted when it arrives and again when its view copy changes
def _heuristic_count(text: str) -> int:
    if not text:
        return 0
    total: float = sum(map(operator.mul, WEIGHTS, text_features(text)))  # (as many of each)
    return max(1, round(total))


# --------------------------------------------------------------------------------------------
