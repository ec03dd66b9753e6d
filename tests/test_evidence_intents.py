"""Intent detection on the phrasing set in tests/data/intents.json (English and Chinese)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contextfold.evidence.intents import Intent, detect_intent

DATA: dict[str, Any] = json.loads(
    (Path(__file__).parent / "data" / "intents.json").read_text(encoding="utf-8")
)
POSITIVES = [
    (lang, intent, text)
    for lang in ("en", "zh")
    for intent, texts in DATA[lang].items()
    for text in texts
]


def test_data_set_is_large_enough() -> None:
    for lang in ("en", "zh"):
        assert set(DATA[lang]) == {i.value for i in Intent}
        for intent, texts in DATA[lang].items():
            assert len(texts) >= 20, (lang, intent)
            assert len(set(texts)) == len(texts)
    assert len(DATA["negative"]) >= 40
    # the seed's own examples are in the set
    zh = [t for texts in DATA["zh"].values() for t in texts]
    for example in (
        "刚才测试失败的具体报错是什么？",
        "输出所有 stack trace",
        "把之前那次 worker 看到的日志恢复出来",
        "你确定是这个原因吗？",
        "这个判断有证据吗？",
        "按那个错误继续修",
        "按之前那次失败继续排查",
    ):
        assert example in zh, example


@pytest.mark.parametrize(("lang", "intent", "text"), POSITIVES)
def test_positive_phrasings(lang: str, intent: str, text: str) -> None:
    assert detect_intent(text) == Intent(intent)


@pytest.mark.parametrize("text", DATA["negative"])
def test_ordinary_requests_do_not_trigger(text: str) -> None:
    assert detect_intent(text) is None


def test_blank_and_long_inputs() -> None:
    assert detect_intent("") is None
    assert detect_intent("   \n ") is None
    assert detect_intent("add a parser. " * 5000) is None
    assert detect_intent("x" * 10_000 + " what was the exact error earlier?") is None  # capped


def test_intent_is_a_string_enum() -> None:
    assert Intent.EXPLICIT_DETAIL.value == "explicit_detail"
    assert isinstance(Intent.EXPLICIT_DETAIL, str)
    assert json.dumps(Intent.CONTINUE_PREVIOUS_FAILURE) == '"continue_previous_failure"'
