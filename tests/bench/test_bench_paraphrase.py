"""Paraphrased recall questions share no word with the output they ask for (but its subject
and ordinal), and name one output each."""

from __future__ import annotations

from contextfold.bench.metrics import content_text
from contextfold.bench.paraphrase import paraphrase_questions, shares_words
from contextfold.bench.recall import trace_calls
from tests.conftest import load_trace, trace_files


def test_paraphrases_share_no_word_with_their_output() -> None:
    asked = 0
    for path in sorted(trace_files(), key=lambda p: p.stat().st_size)[:8]:
        data = load_trace(path)
        outputs = {
            str(m["tool_call_id"]): content_text(m.get("content"))
            for m in data
            if m.get("role") == "tool" and m.get("tool_call_id")
        }
        calls = trace_calls(data)
        qs = paraphrase_questions(calls, outputs, list(outputs), ("shell",))
        by_id = {c.id: c for c in calls}
        for q in qs:
            asked += 1
            c = by_id[q.tid]
            assert q.kind.startswith("para/")
            # what it shares with the output is only the call's own subject words
            words_of_call = c.display
            assert not shares_words(q.text, words_of_call, outputs[q.tid], c.display), q.text
        assert len({(q.kind, q.text) for q in qs}) == len(qs), "two outputs asked alike"
    assert asked > 20


def test_shares_words() -> None:
    assert shares_words("the listing of the folder", "", "listing: a b", "ls")
    assert not shares_words("the listing of the folder src", "src", "a.py b.py", "ls src")
