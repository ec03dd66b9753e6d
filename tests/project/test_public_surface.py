"""What tripped a new user up: summarizer imports, LangChain chat models as summarizers,
last_record reporting only real compactions, a consistent typed surface, no design-note numbers
in user-facing text."""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

import contextfold.core.config as config_module
from contextfold import ContextManager, Tier
from contextfold.compaction.summarizers import (
    AnthropicSummarizer,
    ExtractiveSummarizer,
    LLMSummarizer,
    OpenAICompatibleSummarizer,
    SummaryRequest,
)
from contextfold.core.config import harness, harness_all_on, progressive
from contextfold.core.wire import from_openai
from contextfold.errors import ConfigError
from contextfold.providers.chat_adapters import LangChainChatModel
from tests.conftest import REPO_ROOT, require_module


def _fakes() -> Any:
    """LangChain's own fake chat models (an optional extra: a visible skip locally, a failure
    in CI)."""
    return require_module("langchain_core.language_models.fake_chat_models")


SYSTEM = {"role": "system", "content": "You are a coding agent."}
TASK = {"role": "user", "content": "Fix the failing test."}


def turn(i: int, words: int = 150) -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": f"Step {i}.",
            "tool_calls": [
                {
                    "id": f"c{i}",
                    "type": "function",
                    "function": {"name": "bash", "arguments": json.dumps({"command": f"cat {i}"})},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": f"c{i}",
            "content": " ".join(f"w{i}x{j}" for j in range(words)),
        },
    ]


# --------------------------------------------------------------------------- summarizers


def test_llm_summarizers_import_from_the_package_without_loading_sdks() -> None:
    assert {OpenAICompatibleSummarizer, AnthropicSummarizer, LLMSummarizer, ExtractiveSummarizer}
    code = (
        "import sys\n"
        "from contextfold.compaction.summarizers import OpenAICompatibleSummarizer, AnthropicSummarizer, "
        "LLMSummarizer\n"
        "import contextfold\n"
        "print(sorted(m for m in ('openai', 'anthropic', 'langchain_core') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(REPO_ROOT / "src")},
    )
    assert out.stdout.strip() == "[]"


def _request() -> SummaryRequest:
    msgs = [
        from_openai({"role": "user", "content": "Fix the date parser."}),
        from_openai({"role": "assistant", "content": "The root cause is the timezone."}),
    ]
    return SummaryRequest(messages=msgs)


def test_a_langchain_chat_model_is_a_summarizer_model() -> None:
    AIMessage = require_module("langchain_core.messages").AIMessage
    reply = AIMessage(
        content="### Summary\nThe timezone was wrong.",
        usage_metadata={"input_tokens": 50, "output_tokens": 9, "total_tokens": 59},
        response_metadata={"finish_reason": "stop", "model_name": "fake"},
    )
    chat = _fakes().GenericFakeChatModel(
        messages=iter([reply, AIMessage(content=[{"type": "text", "text": "b"}])])
    )
    summarizer = LLMSummarizer(chat)
    assert isinstance(summarizer.model, LangChainChatModel)
    assert summarizer.summarize(_request()) == "### Summary\nThe timezone was wrong."
    result = summarizer.model.complete([{"role": "user", "content": "again?"}])
    assert result.text == "b"  # content blocks are read as text


def test_langchain_model_async_path_and_in_a_session(tmp_path: Path) -> None:
    chat = _fakes().FakeListChatModel(responses=["### Summary\nread files, found the bug"] * 50)
    summarizer = LLMSummarizer(chat, context_window=8_000)
    assert (
        asyncio.run(summarizer.asummarize(_request())) == "### Summary\nread files, found the bug"
    )
    # a window where the head holds more than the pinned task when Soft/Full fire
    cm = ContextManager(tmp_path, "lc", 8_000, summarizer=summarizer, fact_extractor="llm")
    cm.add_many([SYSTEM, TASK])
    for i in range(12):
        cm.add_many(turn(i))
        cm.prepare()
    summarized = [r for r in cm.records() if r.summarizer == "LLMSummarizer"]
    assert summarized and all("found the bug" in r.summary_text for r in summarized)


def test_anything_else_is_a_clear_config_error() -> None:
    with pytest.raises(ConfigError, match="LangChain chat model"):
        LLMSummarizer(object())
    with pytest.raises(ConfigError, match="not a LangChain chat model"):
        LangChainChatModel(object())


# --------------------------------------------------------------------------- last_record


def test_last_record_only_reports_compactions_that_happened(tmp_path: Path) -> None:
    printed: list[str] = []
    cm = ContextManager(
        tmp_path, "q", 6_000, on_compaction=lambda rec: printed.append(rec.notification())
    )
    cm.add_many([SYSTEM, TASK])
    cm.prepare()
    assert cm.last_record is None  # nothing was compacted yet
    assert cm.last_prepare is not None and cm.last_prepare.tier is Tier.NONE
    assert cm.last_prepare.notification().startswith("No compaction needed")
    seen: list[Any] = []
    for i in range(30):
        cm.add_many(turn(i))
        cm.prepare()
        if cm.last_record is not None and cm.last_record not in seen:
            seen.append(cm.last_record)
    assert seen and all(r.changed and r.tier is not Tier.NONE for r in seen)
    assert len(printed) == len(cm.records())
    assert not any("(0% saved)" in p or "[None]" in p for p in printed)
    cm.prepare()  # a no-op after the last compaction keeps last_record
    assert cm.last_prepare is not None and not cm.last_prepare.changed
    assert cm.last_record is seen[-1]


# --------------------------------------------------------------------------- surface


def test_view_messages_is_a_property_and_the_old_call_still_works(tmp_path: Path) -> None:
    cm = ContextManager(tmp_path, "p", 50_000)
    cm.add_many([SYSTEM, TASK])
    assert [m.role for m in cm.view_messages] == ["system", "user"]
    with pytest.warns(DeprecationWarning, match="view_messages is a property"):
        old = cm.view_messages()
    assert old == list(cm.view_messages)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(cm.history) == 2 and cm.view_tokens > 0 and cm.window == 50_000


def test_public_methods_have_no_any_return(tmp_path: Path) -> None:
    for name, member in inspect.getmembers(ContextManager):
        if name.startswith("_"):
            continue
        fn = member.fget if isinstance(member, property) else member
        if not callable(fn):
            continue
        ret = inspect.signature(fn).return_annotation
        assert ret is not inspect.Signature.empty, f"{name} has no return annotation"
        assert "Any" not in re.split(r"[\[\],| ]+", str(ret)), (
            f"ContextManager.{name} returns {ret}"
        )
    cm = ContextManager(tmp_path, "t", 50_000)
    cm.add_many([SYSTEM, TASK])
    assert isinstance(cm.prepare(), list)
    view = cm.prepare(format="anthropic")
    assert set(view) == {"system", "messages"}


def test_prepare_overloads_type_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """mypy sees a list of JSON objects for the OpenAI view and AnthropicView for Anthropic."""
    # the checkout's sources: an editable install is an import hook, which mypy cannot follow
    monkeypatch.setenv("MYPYPATH", str(REPO_ROOT / "src"))
    snippet = tmp_path / "snippet.py"
    snippet.write_text(
        "from contextfold import ContextManager\n"
        "cm = ContextManager('ws', 's', 1000)\n"
        "reveal_type(cm.prepare())\n"
        "reveal_type(cm.prepare(format='anthropic'))\n"
        "reveal_type(cm.view_messages)\n"
        "reveal_type(cm.last_prepare)\n",
        encoding="utf-8",
    )
    from mypy import api

    out, _err, _code = api.run(
        [
            "--strict",
            "--no-incremental",
            "--follow-imports=silent",
            "--config-file=",
            str(snippet),
        ]
    )
    revealed = [
        t.replace("builtins.", "").replace("'", "")
        for t in re.findall(r'Revealed type is "([^"]+)"', out)
    ]
    obj = "dict[str, bool | int | float | str | list[...] | dict[str, ...] | None]"
    assert revealed[0] == f"list[{obj}]", out
    assert revealed[1].startswith("TypedDict(contextfold.engine.surface.AnthropicView"), out
    assert f"messages: list[{obj}]" in revealed[1], out
    assert f"system?: str | list[{obj}]" in revealed[1], out
    assert revealed[2] == "contextfold.engine.surface.ViewMessages", out
    assert revealed[3] == "contextfold.core.records.CompactionRecord | None", out


# --------------------------------------------------------------------------- wording


SEED = re.compile(r"\bseed(?:'s)? ?\d", re.I)


def test_no_design_note_numbers_in_user_facing_text() -> None:
    for page in (REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))):
        text = page.read_text(encoding="utf-8")  # the design notes themselves are in a subfolder
        assert not SEED.findall(text), page.name
        assert not re.search(r"\bseed\b", text, re.I), f"{page.name} names things by what they do"
        assert not re.search(r"§\s*\d", text), f"{page.name}: a design-note section number"
    docs = [config_module.__doc__ or ""]
    for obj in vars(config_module).values():
        own = getattr(obj, "__module__", "") == config_module.__name__
        if (inspect.isclass(obj) or inspect.isfunction(obj)) and own:
            docs.append(inspect.getdoc(obj) or "")
    source = inspect.getsource(config_module)
    docs += re.findall(r"#:(.*)", source)  # attribute docs shown by Sphinx / IDEs
    for preset in (progressive(), harness(), harness_all_on()):
        docs.append(repr(preset))
    for text in docs:
        assert not SEED.search(text), text
    for fn in (ContextManager.compact, ContextManager.call, ContextManager.delete_session):
        assert not SEED.search(inspect.getdoc(fn) or "")
