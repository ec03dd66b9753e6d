"""Words of evidence and of questions: tokens, stopwords, excerpts (pure functions)."""

from __future__ import annotations

from collections.abc import Iterable

# one tokenizer for the index and the questions, shared by every backend
from ..storage.text import tokenize

#: Characters of a body that are indexed (head and tail of very large outputs).
INDEX_CHARS = 200_000
SNIPPET_CHARS = 400


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


STOPWORDS = _words(
    "a an and are as at be by can could did do does for from give had has have how i in is it "
    "its me my of on or our please show that the their them then there these this those to us "
    "was we were what when where which who why will with would you your full entire complete "
    "again earlier before previous last time 的 了 吗 我 你 把 给 一下 刚才 之前"
)


#: Words of a question's frame ("what did X print", "as you read it"), never what it is about.
FILLER = _words(
    "print printed return returned say said show showed shown run ran runs time times read "
    "contents content file files view viewed tool call called lines line output 完整 输出 结果 "
    "内容 读到 什么 给我"
)

#: Words that name a kind of evidence rather than a particular one.
GENERIC = _words(
    "error errors output outputs log logs trace traces stack traceback tracebacks failure "
    "failures failed fail failing result results message messages test tests run exception "
    "报错 错误 输出 日志 堆栈 失败 异常 结果 测试"
)


def index_text(text: str) -> str:
    if len(text) <= INDEX_CHARS:
        return text
    half = INDEX_CHARS // 2
    return text[:half] + "\n" + text[-half:]


def snippet(text: str, terms: Iterable[str], width: int = SNIPPET_CHARS) -> str:
    """A short excerpt of ``text``: around the last line naming a query term (errors are
    usually at the end), else the head."""
    if len(text) <= width:
        return text
    low = text.lower()
    best = -1
    for term in terms:
        if len(term) >= 3:
            best = max(best, low.rfind(term))
    if best < 0:
        return text[: width - 1] + "…"
    start = max(0, text.rfind("\n", 0, max(0, best - width // 3)) + 1)
    start = min(start, max(0, best - width // 2))
    piece = text[start : start + width]
    return ("…" if start > 0 else "") + piece + ("…" if start + width < len(text) else "")


__all__ = ["FILLER", "GENERIC", "STOPWORDS", "index_text", "snippet", "tokenize"]
