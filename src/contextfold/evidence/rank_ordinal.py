"""The ordinal of a recall question: which one of several outputs it asks for ("the first
run", "the run before last", "before the fix", 第二次, 上一次, 修复之前), read by
:func:`parse_ordinal`; :func:`strip_ordinals` removes those words from the question (they
name no output, so BM25 should not look for them)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_I = re.IGNORECASE

_EN_ORD = {
    "first": 0,
    "1st": 0,
    "initial": 0,
    "earliest": 0,
    "original": 0,
    "second": 1,
    "2nd": 1,
    "third": 2,
    "3rd": 2,
    "fourth": 3,
    "fifth": 4,
    "sixth": 5,
    "seventh": 6,
    "eighth": 7,
    "ninth": 8,
    "tenth": 9,
}
_ZH_NUM = {"一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8}
_ZH_NUM.update({"九": 9, "十": 10})
_RUNWORD = r"(?:run|runs|time|times|attempt|try|execution|call|invocation|output|result|read|one)"
_ORD_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(
            r"\b(?:before|prior to|until) (?:the |my |your |our )?(?:fix|fixes|fixing|patch|"
            r"change|edit|modification)s?\b",
            _I,
        ),
        "before_fix",
    ),
    (
        re.compile(
            r"\b(?:after|since) (?:the |my |your |our )?(?:fix|fixing|patch|change|edit)\b", _I
        ),
        "after_fix",
    ),
    (re.compile(r"修复(?:之|以)?前|修改(?:之|以)?前|改(?:之|以)?前|修之前"), "before_fix"),
    (re.compile(r"修复(?:之|以)?后|修改(?:之|以)?后|改(?:之|以)?后"), "after_fix"),
    (
        re.compile(
            r"\b(?:the )?(?:run|time|one|attempt) before (?:the )?last\b|\bsecond[- ]to[- ]"
            r"last\b|\bsecond[- ]last\b|\bpenultimate\b|\bnext[- ]to[- ]last\b",
            _I,
        ),
        "-2",
    ),
    (re.compile(r"\bthird[- ]to[- ]last\b|\bthird[- ]last\b", _I), "-3"),
    (re.compile(r"倒数第([一二两三四五六七八九十\d]+)(?:次|个|回)"), "zh_from_end"),
    (re.compile(r"第([一二两三四五六七八九十\d]+)(?:次|个|回|遍)"), "zh_index"),
    (re.compile(r"最后一次|最近一次|最新一次|上一次|上次|前一次|最后那次|最近那次"), "-1"),
    (re.compile(r"第一次|首次|最早|最初|头一次"), "0"),
    (re.compile(r"\b(\d{1,3})(?:st|nd|rd|th) " + _RUNWORD + r"\b", _I), "en_num"),
    (
        re.compile(
            r"\b(first|1st|initial|earliest|original|second|2nd|third|3rd|fourth|fifth|"
            r"sixth|seventh|eighth|ninth|tenth)\b(?! (?:line|lines|argument|arg|column|"
            r"part|half|step|of all|place|thing|attempt at)\b)",
            _I,
        ),
        "en_word",
    ),
    (
        re.compile(
            r"\b(?:the |that )?(?:last|latest|newest|most recent|final|previous|prior)\b"
            r"(?! (?:line|lines|column|part|half|few|\d+ lines)\b)",
            _I,
        ),
        "-1",
    ),
]
_STRIP_ORD = [p for p, _ in _ORD_PATTERNS]


@dataclass(frozen=True, kw_only=True, slots=True)
class Ordinal:
    """``index`` counts from the start (0 the first) or, when negative, from the end (-1 the
    newest); ``fix`` is ``before`` / ``after`` for "before the fix" / "after the fix"."""

    index: int = -1
    fix: str | None = None


def _zh_number(text: str) -> int | None:
    if text.isdigit():
        return int(text)
    if text == "十":
        return 10
    if text.startswith("十"):
        return 10 + _ZH_NUM.get(text[1:], 0)
    if text.endswith("十"):
        return 10 * _ZH_NUM.get(text[0], 1)
    if "十" in text:
        a, b = text.split("十", 1)
        return 10 * _ZH_NUM.get(a, 1) + _ZH_NUM.get(b, 0)
    return _ZH_NUM.get(text)


def parse_ordinal(text: str) -> Ordinal | None:
    """The ordinal a question asks for (English or Chinese), or None."""
    for pattern, kind in _ORD_PATTERNS:
        m = pattern.search(text)
        if m is None:
            continue
        if kind == "before_fix":
            return Ordinal(fix="before")
        if kind == "after_fix":
            return Ordinal(fix="after")
        if kind in ("zh_index", "zh_from_end"):
            n = _zh_number(m.group(1))
            if not n:
                continue
            return Ordinal(index=n - 1 if kind == "zh_index" else -n)
        if kind == "en_num":
            return Ordinal(index=max(0, int(m.group(1)) - 1))
        if kind == "en_word":
            return Ordinal(index=_EN_ORD[m.group(1).lower()])
        return Ordinal(index=int(kind))
    return None


def strip_ordinals(text: str) -> str:
    for pattern in _STRIP_ORD:
        text = pattern.sub(" ", text)
    return text


__all__ = ["Ordinal", "parse_ordinal", "strip_ordinals"]
