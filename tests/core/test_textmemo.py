"""Results remembered by text content (contextfold.core.textmemo): the same answers as computing
them, for every caller, bounded."""

from __future__ import annotations

import pytest

from contextfold.core import textmemo
from contextfold.core.tokens import HeuristicCounter, _heuristic_count
from contextfold.evidence.classify import classify, extract_anchors


def test_a_remembered_result_is_the_computed_one_and_its_arguments_count() -> None:
    calls: list[tuple[str, str]] = []

    @textmemo.by_text(min_chars=10)
    def kinds(text: str, role: str) -> tuple[str, ...]:
        calls.append((text, role))
        return (role, str(len(text)))

    long = "x" * 50
    assert kinds(long, "tool") == ("tool", "50")
    assert kinds(long, "tool") == ("tool", "50")
    assert kinds(long, "user") == ("user", "50")  # another argument: computed apart
    assert kinds("short", "tool") == ("tool", "5")
    assert kinds("short", "tool") == ("tool", "5")  # short texts are never remembered
    assert calls == [(long, "tool"), (long, "user"), ("short", "tool"), ("short", "tool")]
    textmemo.clear()
    kinds(long, "tool")
    assert len(calls) == 5


def test_a_memo_never_holds_more_than_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(textmemo, "MAX_CHARS", 1_000)
    seen: list[str] = []

    @textmemo.by_text(min_chars=1)
    def size(text: str) -> int:
        seen.append(text)
        return len(text)

    for i in range(100):
        assert size(f"{i:03d}" * 30) == 90
    assert textmemo._held() <= 1_000
    assert size("000" * 30) == 90 and seen.count("000" * 30) == 2  # forgotten, computed again


def test_classification_anchors_and_counts_agree_with_a_fresh_computation() -> None:
    out = (
        "Traceback (most recent call last):\n"
        '  File "/repo/app/models.py", line 12, in save\n'
        "    raise ValueError('bad')\n"
        "ValueError: bad\n" + "FAILED tests/test_models.py::test_save - ValueError\n" * 20
    )
    textmemo.clear()
    first = (classify(out, "tool"), extract_anchors(out, "pytest -x"))
    again = (classify(out, "tool"), extract_anchors(out, "pytest -x"))
    assert first == again and "stack_trace" in first[0] and "exception:ValueError" in first[1]
    assert classify(out, "assistant") == classify.__wrapped__(out, "assistant")  # type: ignore[attr-defined]
    counter = HeuristicCounter()
    fresh = _heuristic_count.__wrapped__(out)  # type: ignore[attr-defined]
    assert counter.count_text(out) == counter.count_text(out) == fresh > 0
