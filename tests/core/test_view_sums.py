"""The view's prefix sums stay exact however forms change between reads (they are brought
up to date lazily, in one pass, when next read)."""

from __future__ import annotations

import random

from contextfold.core.messages import Message
from contextfold.core.view import HistoryView


def count(m: Message) -> int:
    return 4 + len(m.text) // 4


def brute(v: HistoryView, start: int, end: int) -> int:
    return sum(v.tokens_of(i) for i in range(start, end))


def test_prefix_sums_match_the_forms_after_any_mix_of_changes_and_reads() -> None:
    rng = random.Random(7)
    v = HistoryView(count)
    v.append(Message(role="system", content="s"))
    v.append(Message(role="user", content="task"))
    for step in range(400):
        action = rng.random()
        n = len(v.history)
        if action < 0.35:
            v.append(Message(role="user", content="x" * rng.randrange(0, 400)))
        elif action < 0.75 and n > 2:
            i = rng.randrange(2, n)
            form = v.history[i].with_content("y" * rng.randrange(0, 400))
            v.set_form(i, form)
        else:
            a = rng.randrange(0, n + 1)
            b = rng.randrange(a, n + 1)
            assert v.range_tokens(a, b) == brute(v, a, b), step
    n = len(v.history)
    assert v.range_tokens(0, n) == brute(v, 0, n)
    assert all(v.range_tokens(0, i) == brute(v, 0, i) for i in range(n + 1))


def test_appends_after_a_change_are_summed_with_it() -> None:
    v = HistoryView(count)
    for text in ("a" * 40, "b" * 80, "c" * 120):
        v.append(Message(role="user", content=text))
    v.set_form(0, v.history[0].with_content(""))  # stale from position 1 on
    v.append(Message(role="user", content="d" * 400))  # appended while stale
    assert v.range_tokens(0, 4) == 4 + 24 + 34 + 104
    assert v.view_tokens() == v.range_tokens(0, 4)
