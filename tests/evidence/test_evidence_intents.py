"""Intent detection on the phrasing set in tests/data/intents.json (English and Chinese)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contextfold.evidence.intents import Intent, detect_intent

DATA: dict[str, Any] = json.loads(
    (Path(__file__).parents[1] / "data" / "intents.json").read_text(encoding="utf-8")
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


@pytest.mark.parametrize(
    "text",
    [
        "What was the full error output of the first failing command?",
        "Show me src/app.ts as you read it",
        "show me the output of the second run of python reproduce.py",
        "show me the output of python x.py the second time",
        "what did pytest print before the fix?",
        "What did python reproduce.py print the first time?",
        "Give me the run before last of make test",
        "第一次运行 reproduce.py 的完整输出是什么",
        "把 `pytest -x` 第二次的完整输出给我",
        "修复之前的报错是什么",
        "上一次运行的输出给我看看",
        "读到的 src/app.ts 内容是什么",
    ],
)
def test_ordinal_and_file_read_questions_ask_for_evidence(text: str) -> None:
    assert detect_intent(text) is Intent.EXPLICIT_DETAIL


@pytest.mark.parametrize(
    "text",
    [
        "Read the file src/app.ts and fix the bug",
        "run the tests again and show me the output",
        "print the first line of the file",
        "show me how to get the last element of a list",
        "Write a function that returns the second item",
        "Run it the first time with -v and show me the result",
        "Show me pkg/x.py. Then fix the first time bug",
        "第一次用这个库，怎么安装？",
    ],
)
def test_ordinal_words_alone_are_not_evidence_requests(text: str) -> None:
    assert detect_intent(text) is None
