"""The one tokenizer and BM25 every backend shares, so that rankings agree across backends.

Documents are tokenized here, in Python, and the backend indexes the tokens joined by spaces
(SQLite FTS5 with a tokenizer that keeps ``._/:-`` inside tokens; PostgreSQL's ``simple``
configuration). Identifiers are kept whole and also split on ``_./:-`` and camelCase; CJK runs
become character bigrams (a lone character stays a unigram); everything is lowercased.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping

_WORD = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./:\-]*")
_SPLIT = re.compile(r"[_./:\-]+")
_PATH_SPLIT = re.compile(r"[./:\-]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")

#: Field weights: "body" is the main text; every other field (titles, commands, anchors,
#: topics) names what a question asks for and counts double.
BODY_WEIGHT = 1.0
HINT_WEIGHT = 2.0
K1 = 1.2
B = 0.75
#: Characters of one field that are indexed (head and tail of very large texts).
MAX_FIELD_CHARS = 64_000


#: Tokens of one word (words repeat a lot across messages and tool outputs): the per-word
#: splitting below is the costly part of tokenizing, a lookup replaces it. Bounded; cleared
#: whole when full (dict reads and writes are atomic, the values are immutable).
_WORD_TOKENS: dict[str, tuple[str, ...]] = {}
_WORD_CACHE_MAX = 65_536


def _word_tokens(word: str) -> tuple[str, ...]:
    out = [word.lower()]
    # path pieces keep their underscores too: "tests/test_dates.py" -> "test_dates"
    coarse = [p for p in _PATH_SPLIT.split(word) if p]
    if len(coarse) > 1:
        out.extend(p.lower() for p in coarse if "_" in p)
    parts = [p for p in _SPLIT.split(word) if p]
    if len(parts) > 1 or _CAMEL.search(word):
        for part in parts:
            sub = _CAMEL.split(part)
            if len(sub) > 1:
                out.append(part.lower())
            out.extend(s.lower() for s in sub if len(s) > 1 or s.isdigit())
    return tuple(out)


def tokenize(text: str) -> list[str]:
    out: list[str] = []
    cache = _WORD_TOKENS
    for word in _WORD.findall(text):
        word = word.strip("./:-")
        if not word:
            continue
        tokens = cache.get(word)
        if tokens is None:
            tokens = _word_tokens(word)
            if len(cache) >= _WORD_CACHE_MAX:
                cache.clear()
            if len(word) <= 64:  # long words (hashes, blobs) rarely repeat
                cache[word] = tokens
        out.extend(tokens)
    if not text.isascii():
        for m in _CJK.finditer(text):
            run = m.group(0)
            if len(run) == 1:
                out.append(run)
            else:
                out.extend(run[i : i + 2] for i in range(len(run) - 1))
    return out


def clip(text: str, limit: int = MAX_FIELD_CHARS) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return text[:half] + "\n" + text[-half:]


#: Space-joined tokens of texts indexed recently, by content: the same text is indexed more
#: than once (a message when it arrives, its evidence when it leaves the view). Bounded by the
#: characters it holds; cleared whole when full.
_JOINED: dict[str, str] = {}
_JOINED_CHARS = [0]
_JOINED_MAX_CHARS = 16_000_000
_JOINED_MIN = 256  # shorter texts are tokenized again (cheaper than holding them)


def tokens_joined(text: str) -> str:
    """``" ".join(tokenize(clip(text)))``, from the cache when this text was seen recently."""
    if len(text) < _JOINED_MIN:
        return " ".join(tokenize(clip(text)))
    joined = _JOINED.get(text)
    if joined is None:
        joined = " ".join(tokenize(clip(text)))
        if _JOINED_CHARS[0] + len(text) > _JOINED_MAX_CHARS:
            _JOINED.clear()
            _JOINED_CHARS[0] = 0
        if len(text) <= _JOINED_MAX_CHARS // 16:
            _JOINED[text] = joined
            _JOINED_CHARS[0] += len(text) + len(joined)
    return joined


def split_fields(fields: Mapping[str, str]) -> tuple[str, str]:
    """(body tokens, hint tokens), each as one space-joined string."""
    body = tokens_joined(fields.get("body", ""))
    hints = " ".join(tokens_joined(v) for k, v in sorted(fields.items()) if k != "body" and v)
    return body, hints


def query_terms(query: str) -> list[str]:
    """Distinct query tokens, in order."""
    return list(dict.fromkeys(tokenize(query)))


def bm25_scores(
    terms: Iterable[str],
    docs: Mapping[int, tuple[Counter[str], Counter[str], int]],
    *,
    total_docs: int,
    avg_len: float,
    doc_freq: Mapping[str, int],
) -> dict[int, float]:
    """FTS5's bm25() (positive: higher is better) for documents given as
    ``id -> (body counts, hint counts, length)``."""
    scores: dict[int, float] = {}
    avg = avg_len or 1.0
    for term in terms:
        n = doc_freq.get(term, 0)
        if not n:
            continue
        idf = math.log((total_docs - n + 0.5) / (n + 0.5))
        if idf <= 0:
            idf = 1e-6
        for doc, (body, hints, length) in docs.items():
            tf = BODY_WEIGHT * body.get(term, 0) + HINT_WEIGHT * hints.get(term, 0)
            if tf:
                scores[doc] = scores.get(doc, 0.0) + idf * tf * (K1 + 1) / (
                    tf + K1 * (1 - B + B * length / avg)
                )
    return scores
