"""Accuracy and speed of the heuristic token counter against o200k_base.

Run: ``.venv/bin/python -m benchmarks.tokens_accuracy``. Prints, per corpus, the error of the
naive chars/4 rule and of :class:`~contextfold.core.tokens.HeuristicCounter` relative to the exact
o200k_base count (via bpe-openai), the worst single trajectory, and the heuristic's speed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from tests.conftest import load_trace, trace_files
from tests.core.test_tokens import (
    CHINESE,
    ENGLISH,
    JAPANESE,
    JAPANESE_2,
    KOREAN,
    KOREAN_2,
    code_sample,
    json_sample,
    seed_chinese_prose,
)

from contextfold.core.messages import Message, content_chars
from contextfold.core.tokens import BpeCounter, HeuristicCounter, TokenCounter, count_messages
from contextfold.core.wire import messages_from_openai


class CharsOver4:
    name = "chars/4"

    def count_text(self, text: str) -> int:
        return (len(text) + 3) // 4


def _message_chars(msgs: list[Message]) -> int:
    total = 0
    for m in msgs:
        total += content_chars(m.content)
        total += sum(len(c.id) + len(c.name) + len(c.arguments) for c in m.tool_calls)
    return total


def _row(name: str, chars: int, naive: int, heuristic: int, exact: int) -> str:
    def err(x: int) -> str:
        return f"{(x / exact - 1) * 100:+7.1f}%"

    return f"{name:<34} {chars:>10,} {exact:>9,} {err(naive):>9} {err(heuristic):>10}"


def _best_time(fn: Callable[[str], int], text: str, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(text)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    exact: TokenCounter = BpeCounter("o200k_base")
    heur = HeuristicCounter()
    naive = CharsOver4()
    header = f"{'corpus':<34} {'chars':>10} {'o200k':>9} {'chars/4':>9} {'heuristic':>10}"
    print(header)
    print("-" * len(header))

    texts = {
        "English prose": ENGLISH,
        "Python code (contextfold src)": code_sample(),
        "JSON (trace messages, indented)": json_sample(),
        "Chinese prose (design notes)": seed_chinese_prose(),
        "Chinese prose (handwritten)": CHINESE,
        "Japanese": JAPANESE + JAPANESE_2,
        "Korean": KOREAN + KOREAN_2,
    }
    for name, text in texts.items():
        print(
            _row(
                name,
                len(text),
                naive.count_text(text),
                heur.count_text(text),
                exact.count_text(text),
            )
        )

    groups: dict[str, list[tuple[int, int, int, int]]] = {}
    worst: tuple[float, str] = (0.0, "")
    for path in trace_files():
        msgs = messages_from_openai(load_trace(path))
        e = count_messages(exact, msgs)
        h = count_messages(heur, msgs)
        n = count_messages(naive, msgs)
        groups.setdefault(path.name.split("__")[0], []).append((_message_chars(msgs), n, h, e))
        err = abs(h / e - 1)
        if err > worst[0]:
            worst = (err, Path(path).name)
    print("-" * len(header))
    for group, rows in sorted(groups.items()):
        label = f"traces: {group} ({len(rows)})"
        sums = [sum(r[i] for r in rows) for i in range(4)]
        print(_row(label, *sums))
        errs = [abs(r[2] / r[3] - 1) * 100 for r in rows]
        spread = f"max {max(errs):.1f}% mean {sum(errs) / len(errs):.1f}%"
        print(f"{'  heuristic |error| per trajectory':<46} {spread:>30}")
    print(f"worst trajectory: {worst[0] * 100:.1f}%  {worst[1]}")

    # speed on 1M characters of real trajectory text and of mixed CJK/ASCII text
    blob = "".join(
        m.text + "".join(c.arguments for c in m.tool_calls)
        for path in trace_files()[:10]
        for m in messages_from_openai(load_trace(path))
    )
    ascii_mb = (blob * (1 + 1_000_000 // max(1, len(blob))))[:1_000_000]
    mixed = ((seed_chinese_prose() + ENGLISH + code_sample()) * 100)[:1_000_000]
    print()
    for label, text in (("trajectory text", ascii_mb), ("mixed CJK/English/code", mixed)):
        h_time = _best_time(heur.count_text, text)
        e_time = _best_time(exact.count_text, text, repeat=1)
        print(
            f"1M chars of {label}: heuristic {h_time * 1000:.1f} ms "
            f"({len(text) / h_time / 1e6:.0f}M chars/s); "
            f"o200k (bpe-openai) {e_time * 1000:.0f} ms"
        )


if __name__ == "__main__":
    main()
