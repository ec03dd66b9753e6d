"""Property-based tests (issue 2 and issue 3 acceptance).

Random histories of any shape and size, replayed turn by turn with ``prepare()`` (and now and
then ``call()`` with a model that overflows once) give views that are valid in the OpenAI and
Anthropic formats, keep the newest user message verbatim and are deterministic - for the
progressive preset and for every on/off combination of seed 002's four strategies. The same
holds on the real trajectories in ``benchmarks/traces/``.
"""

from __future__ import annotations

import itertools
import json
import random
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold import ContextManager
from contextfold.core.config import (
    ContextConfig,
    EvictionConfig,
    SummaryTriggerConfig,
    TruncateArgsConfig,
    harness,
    progressive,
)
from contextfold.core.messages import check_view
from contextfold.core.wire import from_anthropic, from_openai, to_anthropic
from contextfold.errors import ContextOverflowError
from contextfold.testing import overflow_error
from tests.conftest import load_trace, trace_files

PROPS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
COMBO_PROPS = settings(PROPS, max_examples=4)
STRATEGIES = ("summary", "eviction", "truncate_args", "overflow_recovery")
COMBOS = list(itertools.product((False, True), repeat=4))


class QuarterCounter:
    """1 token per 4 characters: fast, and precise token counts do not matter here."""

    name = "quarter"

    def count_text(self, text: str) -> int:
        return len(text) // 4


def combo_id(combo: tuple[bool, ...]) -> str:
    on = [name for name, flag in zip(STRATEGIES, combo, strict=True) if flag]
    return "+".join(on) or "all-off"


def harness_combo(combo: tuple[bool, ...], *, small: bool) -> ContextConfig:
    """harness() with the chosen strategies on. ``small`` lowers the thresholds so that random
    histories of a few dozen messages exercise them; otherwise the seed's defaults."""
    summary, eviction, truncate, overflow = combo
    return harness(
        summary=(
            SummaryTriggerConfig(trigger_messages=12, keep_messages=5)
            if small
            else SummaryTriggerConfig()
        )
        if summary
        else None,
        eviction=(EvictionConfig(max_chars=20_000) if small else EvictionConfig())
        if eviction
        else None,
        truncate_args=TruncateArgsConfig() if truncate else None,
        overflow_recovery=overflow,
    )


# ------------------------------------------------------------------------------- random histories

_WORDS = ["parse", "date", "error", "fix", "test", "build", "value", "None", "self", "return"]
_CJK = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可也你"
_SIZES = ["tiny"] * 5 + ["small"] * 4 + ["mid"] * 2 + ["big"] + ["huge"] * 0
_RANGES = {
    "tiny": (0, 60),
    "small": (60, 2_000),
    "mid": (2_000, 12_000),
    "big": (12_000, 30_000),
    "huge": (80_000, 95_000),
}
_TOOLS = ["bash", "read_file", "write_file", "edit_file", "grep_files", "memory_search", "python"]


def make_text(kind: str, size: int, seed: int) -> str:
    """Deterministic text of about ``size`` characters."""
    if size <= 0:
        return ""
    rng = random.Random(seed)
    if kind == "cjk":
        line = "".join(rng.choice(_CJK) for _ in range(min(size, 80)))
        text = (line + "。\n") * (size // (len(line) + 2) + 1)
    elif kind == "code":
        line = f"def f_{seed % 97}(x):\n    return x + {seed % 13}  # {rng.choice(_WORDS)}\n"
        text = line * (size // len(line) + 1)
    else:
        words = " ".join(rng.choice(_WORDS) for _ in range(min(size // 5 + 1, 60)))
        text = (words + "\n") * (size // (len(words) + 1) + 1)
    return text[:size]


@st.composite
def texts(draw: st.DrawFn, allow_huge: bool = True) -> str:
    bucket = draw(st.sampled_from(_SIZES + (["huge"] if allow_huge else [])))
    low, high = _RANGES[bucket]
    size = draw(st.integers(low, high))
    kind = draw(st.sampled_from(["ascii", "ascii", "cjk", "code"]))
    return make_text(kind, size, draw(st.integers(0, 10_000)))


@st.composite
def user_content(draw: st.DrawFn) -> Any:
    text = draw(texts(allow_huge=False))
    if draw(st.integers(0, 4)) == 0:
        return [{"type": "text", "text": text or "."}, {"type": "text", "text": "Thanks."}]
    return text or "Continue."


@st.composite
def histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if draw(st.booleans()):
        out.append({"role": "system", "content": "You are a careful coding agent. " * 3})
    out.append({"role": "user", "content": draw(user_content())})
    n_events = draw(st.integers(0, 22))
    call_no = 0
    for _ in range(n_events):
        kind = draw(st.sampled_from(["tools", "tools", "tools", "text", "user"]))
        if kind == "user":
            out.append({"role": "user", "content": draw(user_content())})
        elif kind == "text":
            out.append({"role": "assistant", "content": draw(texts(allow_huge=False)) or "ok"})
        else:
            n_calls = draw(st.integers(1, 3))
            calls = []
            for _ in range(n_calls):
                name = draw(st.sampled_from(_TOOLS))
                if name in ("write_file", "edit_file"):
                    args: dict[str, Any] = {"path": "src/m.py", "content": draw(texts())}
                else:
                    args = {"command": f"run {call_no}"}
                calls.append(
                    {
                        "id": f"call_{call_no}",
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(args)},
                    }
                )
                call_no += 1
            content = draw(st.sampled_from([None, "", "Let me check."]))
            out.append({"role": "assistant", "content": content, "tool_calls": calls})
            for c in calls:
                out.append({"role": "tool", "tool_call_id": c["id"], "content": draw(texts())})
    if draw(st.booleans()):
        out.append({"role": "user", "content": draw(user_content())})
    return out


# ------------------------------------------------------------------------------- checking


def check_openai(view: list[dict[str, Any]]) -> None:
    check_view([from_openai(d, i) for i, d in enumerate(view)])


def check_anthropic(view: list[dict[str, Any]]) -> None:
    system, msgs = to_anthropic([from_openai(d, i) for i, d in enumerate(view)])
    roles = [m["role"] for m in msgs]
    assert roles and roles[0] == "user", roles
    assert all(a != b for a, b in itertools.pairwise(roles)), roles
    check_view(from_anthropic(msgs, system))


def kept_or_recoverable(
    view: list[dict[str, Any]], msg: dict[str, Any], original: Any, cm: ContextManager
) -> bool:
    """``msg`` is in the view verbatim, or (a pinned message too large for the window) its
    shortened form is, with the same role and a pointer that restores the text byte-exact."""
    if msg in view:
        return True
    key = f"msg-{original.uuid}"
    for d in view:
        text = d.get("content")
        text = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False)
        if d.get("role") == msg["role"] and key in text and "[message shortened:" in text:
            return bool(cm.recover_tool_result(key) == original.text)
    return False


def check(
    view: list[dict[str, Any]], newest_user: dict[str, Any], system: Any, cm: ContextManager
) -> None:
    check_openai(view)
    check_anthropic(view)
    newest = cm.history[cm.view.newest_user or 0]
    assert kept_or_recoverable(view, newest_user, newest, cm), (
        "the newest user message must stay verbatim (or, when too large, shortened with a "
        "byte-exact pointer)"
    )
    if system is not None:
        assert view[0] == system or (
            view[0]["role"] == system["role"]
            and kept_or_recoverable(view, system, cm.history[0], cm)
        )


class OverflowOnce:
    """An agent model that rejects its first request as too long, then answers."""

    def __init__(self) -> None:
        self.views: list[list[dict[str, Any]]] = []

    def __call__(self, view: list[dict[str, Any]]) -> dict[str, Any]:
        self.views.append(view)
        if len(self.views) == 1:
            raise overflow_error("openai")
        return {"role": "assistant", "content": "ok"}


def replay(
    history: list[dict[str, Any]],
    config: ContextConfig,
    window: int,
    workspace: Path,
    *,
    call_every: int = 0,
) -> list[str]:
    """Add the history turn by turn; before each assistant message, get the view (with
    ``prepare`` or, every ``call_every`` turns when recovery is on, with ``call`` and a model
    that overflows once). Checks every view; returns them serialized."""
    cm = ContextManager(
        workspace=workspace,
        session_id="p",
        context_window=window,
        config=config,
        token_counter=QuarterCounter(),
    )
    system = history[0] if history[0]["role"] == "system" else None
    newest: dict[str, Any] | None = None
    out: list[str] = []
    turn = 0

    def take(view: list[dict[str, Any]]) -> None:
        assert newest is not None
        check(view, newest, system, cm)
        out.append(json.dumps(view, sort_keys=True, ensure_ascii=False))

    for i, msg in enumerate(history):
        if msg["role"] == "assistant" and i > 0 and newest is not None:
            turn += 1
            if call_every and config.overflow_recovery and turn % call_every == 0:
                model = OverflowOnce()
                try:
                    cm.call(model)
                except ContextOverflowError:
                    # nothing could be compacted: the identical request is not sent again
                    assert len(model.views) == 1
                else:
                    assert len(model.views) == 2
                    assert json.dumps(model.views[0]) != json.dumps(model.views[1])
                for view in model.views:
                    take(view)
            else:
                take(cm.prepare())
        cm.add(msg)
        if msg["role"] == "user":
            newest = msg
    assert newest is not None
    take(cm.prepare())
    anth = cm.prepare(format="anthropic")
    roles = [m["role"] for m in anth["messages"]]
    assert all(a != b for a, b in itertools.pairwise(roles))
    # the full history is intact
    assert len(cm.history) == len(history)
    return out


def replay_twice(
    history: list[dict[str, Any]],
    config: Callable[[], ContextConfig],
    window: int,
    *,
    call_every: int = 0,
) -> None:
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        first = replay(history, config(), window, Path(a), call_every=call_every)
        second = replay(history, config(), window, Path(b), call_every=call_every)
    assert first == second, "views must be deterministic"


# ------------------------------------------------------------------------------- properties


@PROPS
@given(history=histories(), window=st.integers(2_000, 40_000))
def test_progressive_random_histories(history: list[dict[str, Any]], window: int) -> None:
    replay_twice(history, progressive, window, call_every=3)


@pytest.mark.parametrize("combo", COMBOS, ids=combo_id)
@COMBO_PROPS
@given(history=histories(), window=st.integers(2_000, 40_000))
def test_harness_combinations_random_histories(
    combo: tuple[bool, ...], history: list[dict[str, Any]], window: int
) -> None:
    replay_twice(history, lambda: harness_combo(combo, small=True), window, call_every=3)


def test_views_are_byte_identical_across_fresh_workspaces() -> None:
    history: list[dict[str, Any]] = [{"role": "user", "content": "Fix the parser."}]
    for i in range(3):
        history += [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{i}",
                        "type": "function",
                        "function": {"name": "bash", "arguments": json.dumps({"command": "ls"})},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"call_{i}", "content": f"file_{i}.py"},
        ]
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        first = replay(history, progressive(), 2_000, Path(a), call_every=3)
        second = replay(history, progressive(), 2_000, Path(b), call_every=3)
    assert any("Recallable Evidence" in v for v in first)
    assert first == second


# ------------------------------------------------------------------------------- real traces

TRACE_WINDOW = 32_000
_ALL_TRACES = trace_files()
_SMALL_TRACES = sorted(_ALL_TRACES, key=lambda p: p.stat().st_size)[:6]


def replay_trace(path: Path, config: ContextConfig, workspace: Path) -> None:
    data = load_trace(path)
    replay(data, config, TRACE_WINDOW, workspace, call_every=7)


@pytest.mark.slow
@pytest.mark.parametrize("combo", COMBOS, ids=combo_id)
def test_every_combination_on_six_traces(combo: tuple[bool, ...], tmp_path: Path) -> None:
    assert len(_SMALL_TRACES) == 6
    for n, path in enumerate(_SMALL_TRACES):
        replay_trace(path, harness_combo(combo, small=False), tmp_path / str(n))


@pytest.mark.slow
@pytest.mark.parametrize("combo", [COMBOS[0], COMBOS[-1]], ids=combo_id)
@pytest.mark.parametrize("path", _ALL_TRACES, ids=lambda p: p.name[:50])
def test_all_off_and_all_on_on_every_trace(
    combo: tuple[bool, ...], path: Path, tmp_path: Path
) -> None:
    replay_trace(path, harness_combo(combo, small=False), tmp_path)
