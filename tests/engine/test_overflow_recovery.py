"""Seed 002 2.4: overflow recovery through ``cm.call`` / ``cm.acall``."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any

import openai
import pytest

from contextfold import ContextManager
from contextfold.core.config import LATE_COMPACTION_TIERS, harness, harness_all_on, progressive
from contextfold.core.messages import check_view
from contextfold.core.records import Tier
from contextfold.core.wire import from_openai, to_anthropic
from contextfold.errors import ContextOverflowError
from contextfold.providers.limits import WindowLearnedWarning
from contextfold.testing import OVERFLOW_PROVIDERS, OverflowingModel, message_tokens, overflow_error
from tests.support.http_fakes import (
    FakeLLMServer,
    fake_llm_server_fixture,  # noqa: F401
    openai_completion,
    openai_context_length_error,
)
from tests.support.store_helpers import records

# the SDK's own HTTP library (httpx2 in current SDKs, httpx in older ones)
HTTP: Any = getattr(openai._exceptions, "httpx2", None) or openai._exceptions.httpx

SYSTEM = {"role": "system", "content": "You are a coding agent."}
TASK = {"role": "user", "content": "Please fix the bug in src/app.py."}
NEWEST = {"role": "user", "content": "Now also update the changelog, please."}


def turns(n: int, words: int = 250, first: int = 0) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(first, first + n):
        out.append(
            {
                "role": "assistant",
                "content": f"Step {i}: reading f{i}.",
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {
                            "name": "bash",
                            "arguments": json.dumps({"command": f"cat f{i}.txt"}),
                        },
                    }
                ],
            }
        )
        out.append(
            {
                "role": "tool",
                "tool_call_id": f"c{i}",
                "content": " ".join(f"w{i}x{j}" for j in range(words)),
            }
        )
    return out


def scripted(steps: list[Any], sizes: list[int]) -> Any:
    """A model that plays ``steps`` (an error is raised, anything else returned) and notes the
    length of each view it is given in ``sizes``."""

    def fn(view: list[dict[str, Any]]) -> Any:
        sizes.append(len(view))
        step = steps.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step

    return fn


def loaded(tmp_path: Path, **kw: Any) -> ContextManager:
    """A 128k-window session of ~50,000 tokens: prepare() does not compact it (seed 000's
    thresholds; the default's 64K working window would compact it before any call)."""
    if "config" not in kw and "preset" not in kw:
        kw["config"] = progressive().with_(tiers=LATE_COMPACTION_TIERS)
    cm = ContextManager(workspace=tmp_path, session_id="o", context_window=128_000, **kw)
    cm.add_many([SYSTEM, TASK, *turns(30), NEWEST])
    return cm


def snapshot(cm: ContextManager) -> list[Any]:
    return [(m.uuid, m.role, m.content, m.tool_calls, m.tool_call_id) for m in cm.history]


def valid(view: list[dict[str, Any]]) -> None:
    check_view([from_openai(d, i) for i, d in enumerate(view)])


# ------------------------------------------------------------------------------- recovery


def test_overflow_recovers_after_exactly_one_compaction(tmp_path: Path) -> None:
    cm = loaded(tmp_path)
    before = snapshot(cm)
    model = OverflowingModel(limit=8_000, reply="changelog updated")
    result = cm.call(model)
    assert result == {"role": "assistant", "content": "changelog updated"}
    assert len(model.calls) == 2 and model.overflows == 1
    assert model.token_counts[0] > 8_000 >= model.token_counts[1]
    assert model.token_counts[1] < model.token_counts[0] / 10
    retry = model.calls[1]
    valid(retry)
    assert retry[0] == SYSTEM and TASK in retry
    assert retry[-1] == NEWEST  # the newest message, verbatim
    summaries = [d for d in retry if str(d.get("content")).startswith("[Context Compaction]")]
    assert len(summaries) == 1
    assert len(retry) <= 6
    rec = cm.last_prepare
    assert rec is not None and rec.strategy == "overflow_recovery" and rec.forced
    assert rec.tier is Tier.EMERGENCY and rec.changed
    assert "overflow" in rec.reason
    assert snapshot(cm) == before  # nothing in the history is lost
    assert [r.strategy for r in records(tmp_path, "o")] == ["overflow_recovery"]


def test_a_stated_window_the_newest_turns_fit_in_keeps_them(tmp_path: Path) -> None:
    """The error states a window smaller than the one the view was built for: the view is
    compacted as the tiers would have for that window (Full: the head summarized, the newest
    messages verbatim), not cut to the newest message, so the output a question is about stays
    in view; the next turn appends to it without compacting again."""
    cfg = progressive().with_(tiers=LATE_COMPACTION_TIERS)
    cm = ContextManager(workspace=tmp_path, session_id="o", context_window=128_000, config=cfg)
    # the newest outputs are past the offload threshold (4,000 characters): kept verbatim all
    # the same, they are what the next question is about
    cm.add_many([SYSTEM, TASK, *turns(27), *turns(3, words=700, first=27), NEWEST])
    newest = [m for m in cm.history if m.role != "system"][-6:]
    assert all(len(m.text) > 4_000 for m in newest if m.role == "tool")
    model = OverflowingModel(limit=40_000, reply="changelog updated")
    with pytest.warns(WindowLearnedWarning, match="lowered from 128000 to 40000"):
        cm.call(model)
    assert model.overflows == 1 and model.token_counts[1] <= 40_000
    retry = model.calls[1]
    valid(retry)
    assert retry[0] == SYSTEM and TASK in retry and retry[-1] == NEWEST
    kept = [d.get("content") for d in retry]
    assert all(m.content in kept for m in newest if m.role == "tool"), "a newest output was cut"
    rec = cm.last_prepare
    assert rec is not None and rec.tier is Tier.FULL and "overflow" in rec.reason
    assert any("lowered from 128000 to 40000" in n for n in (rec.reason, *rec.notes))
    cm.add({"role": "assistant", "content": "changelog updated"})
    cm.add({"role": "user", "content": "Thanks. Anything left?"})
    cm.prepare()
    assert cm.last_prepare is not None and not cm.last_prepare.changed  # no second compaction


def test_a_stated_window_the_estimate_was_already_below_gets_the_hard_recovery(
    tmp_path: Path,
) -> None:
    """The error states a limit but not the prompt's size, and by the estimate the request was
    already below that limit: the estimate is proven low, so no margin of it is trusted and the
    newest group alone is kept (the retry is never the request that failed)."""
    cm = ContextManager(
        tmp_path, "s", 128_000, config=progressive().with_(tiers=LATE_COMPACTION_TIERS)
    )
    cm.add_many([SYSTEM, TASK, *turns(12), NEWEST])
    assert cm.view_tokens < 24_000
    steps: list[Any] = [
        overflow_error("openai", "This model's maximum context length is 24000 tokens."),
        {"role": "assistant", "content": "fine"},
    ]
    sizes: list[int] = []
    fn = scripted(steps, sizes)
    with pytest.warns(WindowLearnedWarning):
        assert cm.call(fn) == {"role": "assistant", "content": "fine"}
    assert sizes[1] <= 6 < sizes[0]
    assert cm.last_prepare is not None and cm.last_prepare.strategy == "overflow_recovery"


def test_the_harness_preset_keeps_its_own_recovery(tmp_path: Path) -> None:
    """A session without tiers (the harness preset) gets no tier compaction from a stated
    window: its overflow recovery is the newest group and a summary."""
    cm = loaded(tmp_path, config=harness(overflow_recovery=True))
    model = OverflowingModel(limit=24_000, reply="ok")
    with pytest.warns(WindowLearnedWarning):
        cm.call(model)
    assert cm.last_prepare is not None and cm.last_prepare.strategy == "overflow_recovery"
    assert len(model.calls[1]) <= 6


def test_an_inferred_window_gets_the_hard_recovery(tmp_path: Path) -> None:
    """An error without numbers only bounds the window from above (95% of what was sent):
    the newest group alone is kept, so the retry fits whatever the real limit is."""
    cm = loaded(tmp_path)
    model = OverflowingModel(limit=3_000, provider="ollama", reply="ok")
    with pytest.warns(WindowLearnedWarning, match="inferred"):
        cm.call(model)
    assert model.overflows == 1 and len(model.calls[1]) <= 6
    assert cm.last_prepare is not None and cm.last_prepare.strategy == "overflow_recovery"


def test_the_next_prepare_continues_from_the_recovered_view(tmp_path: Path) -> None:
    cm = loaded(tmp_path)
    model = OverflowingModel(limit=8_000)
    cm.call(model)
    cm.add({"role": "assistant", "content": "Done."})
    view = cm.prepare()
    assert message_tokens(view) < 8_000
    assert view[-2:] == [NEWEST, {"role": "assistant", "content": "Done."}]
    assert cm.call(model) == {"role": "assistant", "content": "ok"}
    assert model.overflows == 1  # no second recovery needed


def test_newest_tool_result_is_kept_verbatim(tmp_path: Path) -> None:
    # late tiers: nothing is compacted before the call, so the model overflows and recovery runs
    late = progressive().with_(tiers=LATE_COMPACTION_TIERS)
    cm = ContextManager(workspace=tmp_path, session_id="o", context_window=128_000, config=late)
    group = turns(30)
    cm.add_many([SYSTEM, TASK, *group])
    model = OverflowingModel(limit=8_000)
    cm.call(model)
    retry = model.calls[1]
    assert model.token_counts[1] < 3_000  # plenty of room for the ~1,500-token result
    assert retry[-1] == group[-1]


def test_always_overflowing_model_raises_with_the_record(tmp_path: Path) -> None:
    cm = loaded(tmp_path)
    before = snapshot(cm)
    model = OverflowingModel(always=True)
    with pytest.raises(ContextOverflowError) as info:
        cm.call(model)
    err = info.value
    assert err.record is not None and err.record.strategy == "overflow_recovery"
    assert err.record is cm.last_prepare
    assert isinstance(err.cause, openai.BadRequestError)
    assert err.__cause__ is err.cause
    assert len(model.calls) == 2  # one retry, not more
    assert snapshot(cm) == before


@pytest.mark.parametrize(
    "exc",
    [
        ValueError("bad tool schema"),
        openai.RateLimitError(
            "Request too large for gpt-4o: tokens per min (TPM): Limit 30000, Requested 40000",
            response=HTTP.Response(
                429, request=HTTP.Request("POST", "https://api.openai.com/v1/chat/completions")
            ),
            body={"message": "Request too large: tokens", "code": "rate_limit_exceeded"},
        ),
        KeyError("choices"),
    ],
    ids=["ValueError", "RateLimit429", "KeyError"],
)
def test_other_errors_propagate_unchanged_without_compaction(
    tmp_path: Path, exc: Exception
) -> None:
    cm = loaded(tmp_path)
    before = snapshot(cm)
    calls: list[Any] = []

    def fn(view: list[dict[str, Any]]) -> Any:
        calls.append(view)
        raise exc

    with pytest.raises(type(exc)) as info:
        cm.call(fn)
    assert info.value is exc
    assert len(calls) == 1
    assert cm.compactor.state.compactions == 0
    assert records(tmp_path, "o") == []
    assert snapshot(cm) == before


def test_recovery_off_lets_the_overflow_through(tmp_path: Path) -> None:
    cm = loaded(tmp_path, config=harness())
    model = OverflowingModel(limit=8_000)
    with pytest.raises(openai.BadRequestError):
        cm.call(model)
    assert len(model.calls) == 1
    assert cm.compactor.state.compactions == 0


def rate_limit_error() -> openai.RateLimitError:
    return openai.RateLimitError(
        "Rate limit reached for gpt-4o on tokens per min (TPM)",
        response=HTTP.Response(
            429, request=HTTP.Request("POST", "https://api.openai.com/v1/chat/completions")
        ),
        body={"message": "tokens per min", "code": "rate_limit_exceeded"},
    )


@pytest.mark.parametrize("second", [TimeoutError("read timeout"), rate_limit_error()])
def test_a_non_overflow_error_on_the_retry_propagates(tmp_path: Path, second: Exception) -> None:
    cm = loaded(tmp_path)
    steps: list[BaseException] = [overflow_error("openai"), second]

    def fn(view: list[dict[str, Any]]) -> Any:
        raise steps.pop(0)

    with pytest.raises(type(second)) as info:
        cm.call(fn)
    assert info.value is second


def test_acall_non_overflow_error_on_the_retry_propagates(tmp_path: Path) -> None:
    cm = loaded(tmp_path)
    steps: list[BaseException] = [overflow_error("openai"), TimeoutError("read timeout")]

    async def fn(view: list[dict[str, Any]]) -> Any:
        raise steps.pop(0)

    with pytest.raises(TimeoutError):
        asyncio.run(cm.acall(fn))


def test_a_retry_error_still_leaves_the_recovery_record(tmp_path: Path) -> None:
    cm = loaded(tmp_path)
    before = snapshot(cm)
    steps: list[BaseException] = [overflow_error("openai"), TimeoutError("read timeout")]

    def fn(view: list[dict[str, Any]]) -> Any:
        raise steps.pop(0)

    with pytest.raises(TimeoutError):
        cm.call(fn)
    assert steps == []
    assert cm.last_prepare is not None and cm.last_prepare.strategy == "overflow_recovery"
    assert snapshot(cm) == before


@pytest.mark.parametrize("provider", OVERFLOW_PROVIDERS)
def test_every_provider_error_style_triggers_recovery(tmp_path: Path, provider: str) -> None:
    cm = loaded(tmp_path, config=harness_all_on())
    model = OverflowingModel(limit=8_000, provider=provider)
    assert cm.call(model) == {"role": "assistant", "content": "ok"}
    assert model.overflows == 1 and len(model.calls) == 2
    # a stated window the newest turns fit in gets a Full compaction for it, else the hard
    # recovery (the newest group alone) runs
    assert cm.last_prepare is not None and "overflow" in cm.last_prepare.reason


@pytest.mark.parametrize("provider", OVERFLOW_PROVIDERS)
def test_scripted_provider_errors_trigger_recovery(tmp_path: Path, provider: str) -> None:
    cm = loaded(tmp_path)
    steps: list[Any] = [overflow_error(provider), {"role": "assistant", "content": "fine"}]
    sizes: list[int] = []
    fn = scripted(steps, sizes)
    assert cm.call(fn) == {"role": "assistant", "content": "fine"}
    # the newest group alone (6 messages at most), or the summary and the newest 6 messages
    # when the error stated a window they fit in (llama.cpp and vLLM state 32768)
    assert sizes[0] == 63 and sizes[1] <= (10 if provider in ("vllm", "llamacpp") else 6)


def test_acall_recovers_the_same_way(tmp_path: Path) -> None:
    cm = loaded(tmp_path)
    before = snapshot(cm)
    model = OverflowingModel(limit=8_000, reply="async ok")

    async def fn(view: list[dict[str, Any]]) -> dict[str, Any]:
        await asyncio.sleep(0)
        return model(view)

    result = asyncio.run(cm.acall(fn))
    assert result == {"role": "assistant", "content": "async ok"}
    assert len(model.calls) == 2 and model.overflows == 1
    assert model.calls[1][-1] == NEWEST
    assert snapshot(cm) == before


def test_acall_always_overflowing_and_other_errors(tmp_path: Path) -> None:
    cm = loaded(tmp_path)
    model = OverflowingModel(always=True)

    async def overflowing(view: list[dict[str, Any]]) -> dict[str, Any]:
        return model(view)

    with pytest.raises(ContextOverflowError) as info:
        asyncio.run(cm.acall(overflowing))
    assert info.value.record is not None and len(model.calls) == 2

    cm2 = loaded(tmp_path / "b")

    async def broken(view: list[dict[str, Any]]) -> dict[str, Any]:
        raise ValueError("nope")

    with pytest.raises(ValueError, match="nope"):
        asyncio.run(cm2.acall(broken))
    assert cm2.compactor.state.compactions == 0


def test_anthropic_format_retry_is_valid(tmp_path: Path) -> None:
    cm = loaded(tmp_path)
    seen: list[dict[str, Any]] = []

    def fn(request: dict[str, Any]) -> dict[str, Any]:
        seen.append(request)
        if len(seen) == 1:
            raise overflow_error("anthropic")
        return {"content": [{"type": "text", "text": "ok"}], "usage": {"input_tokens": 10}}

    cm.call(fn, format="anthropic")
    retry = seen[1]
    assert retry["system"] == SYSTEM["content"]
    roles = [m["role"] for m in retry["messages"]]
    assert roles[0] == "user" and all(a != b for a, b in itertools.pairwise(roles))
    assert len(retry["messages"]) < len(seen[0]["messages"])


# ------------------------------------------------------------------------------- calibration


def test_usage_in_the_response_updates_calibration(tmp_path: Path) -> None:
    cm = loaded(tmp_path)
    assert cm.calibration.scale == 1.0
    estimate = cm.view.view_tokens()

    def fn(view: list[dict[str, Any]]) -> dict[str, Any]:
        return {"role": "assistant", "content": "ok", "usage": {"prompt_tokens": 2 * estimate}}

    cm.call(fn)
    assert cm.calibration.scale == pytest.approx(0.7 + 0.3 * 2.0, rel=1e-3)
    assert cm.calibration.observations == 1
    # persisted with the session
    again = ContextManager(workspace=tmp_path, session_id="o", context_window=128_000)
    assert again.calibration.scale == pytest.approx(cm.calibration.scale)


def test_calibration_after_recovery_uses_the_retry_estimate(tmp_path: Path) -> None:
    cm = loaded(tmp_path)
    model = OverflowingModel(limit=8_000)

    def fn(view: list[dict[str, Any]]) -> dict[str, Any]:
        reply = model(view)
        # the provider reports 1.5x our estimate of the request it actually received
        reply["usage"] = {"prompt_tokens": int(1.5 * cm.view.view_tokens())}
        return reply

    cm.call(fn)
    assert model.overflows == 1
    assert cm.calibration.observations == 1
    assert cm.calibration.scale == pytest.approx(0.7 + 0.3 * 1.5, rel=0.01)


def test_response_without_usage_leaves_calibration(tmp_path: Path) -> None:
    cm = loaded(tmp_path)
    cm.call(lambda view: {"role": "assistant", "content": "ok"})
    assert cm.calibration.scale == 1.0 and cm.calibration.observations == 0


# ------------------------------------------------------------------------------- real HTTP


def test_openai_sdk_against_a_local_server_recovers(
    tmp_path: Path, fake_llm_server: FakeLLMServer
) -> None:
    fake_llm_server.enqueue(400, openai_context_length_error(limit=8_000, used=52_000))
    fake_llm_server.enqueue(200, openai_completion("fixed it", prompt_tokens=1_500))
    client = openai.OpenAI(
        base_url=fake_llm_server.openai_base_url, api_key="sk-test", max_retries=0, timeout=10
    )
    cm = loaded(tmp_path)
    before = snapshot(cm)

    def fn(view: list[dict[str, Any]]) -> Any:
        return client.chat.completions.create(model="gpt-test", messages=view)  # type: ignore[arg-type]

    completion = cm.call(fn)
    assert completion.choices[0].message.content == "fixed it"
    reqs = fake_llm_server.requests
    assert len(reqs) == 2 and fake_llm_server.unscripted == 0
    first, second = (r.json for r in reqs)
    assert first["model"] == second["model"] == "gpt-test"
    size1 = len(json.dumps(first["messages"]))
    size2 = len(json.dumps(second["messages"]))
    assert size2 < size1 / 10
    assert len(first["messages"]) == 63 and len(second["messages"]) <= 6
    assert second["messages"][-1] == NEWEST
    assert second["messages"][0] == SYSTEM
    valid(second["messages"])
    rec = cm.last_prepare
    assert rec is not None and rec.strategy == "overflow_recovery"
    assert cm.calibration.observations == 1  # usage of the successful retry
    assert snapshot(cm) == before


def test_openai_sdk_persistent_overflow_raises(
    tmp_path: Path, fake_llm_server: FakeLLMServer
) -> None:
    fake_llm_server.enqueue(400, openai_context_length_error())
    fake_llm_server.enqueue(400, openai_context_length_error())
    client = openai.OpenAI(
        base_url=fake_llm_server.openai_base_url, api_key="sk-test", max_retries=0, timeout=10
    )
    cm = loaded(tmp_path)
    with pytest.raises(ContextOverflowError) as info:
        cm.call(lambda view: client.chat.completions.create(model="m", messages=view))
    assert isinstance(info.value.cause, openai.BadRequestError)
    assert info.value.record is not None
    assert len(fake_llm_server.requests) == 2


def test_anthropic_conversion_of_retry_alternates(tmp_path: Path) -> None:
    cm = loaded(tmp_path)
    model = OverflowingModel(limit=8_000)
    cm.call(model)
    system, msgs = to_anthropic([from_openai(d, i) for i, d in enumerate(model.calls[1])])
    assert system == SYSTEM["content"]
    roles = [m["role"] for m in msgs]
    assert all(a != b for a, b in itertools.pairwise(roles))
