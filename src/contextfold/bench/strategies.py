"""The strategies the replay compares: three baselines, emulated peers (:mod:`.peers`) and
contextfold's presets.

Every strategy takes the trajectory incrementally (``add``) and produces the view for the next
model call (``prepare``). Baselines:

* ``raw``: everything, never compacted.
* ``truncate``: system messages pinned; the oldest other messages dropped, a whole turn at a
  time (an assistant message with its tool results is one unit, so every call keeps its
  result), until the view fits the window. The newest unit is always kept, even if it alone
  overflows.
* ``mask``: observation masking ("The Complexity Trap", arXiv 2508.21433): the last 10 tool
  outputs verbatim, older ones replaced by a one-line placeholder; nothing else changes and the
  window is not enforced.

``progressive`` and ``harness`` drive :class:`contextfold.ContextManager` through its public
API; they are *unavailable* (not an error of the run) when the manager or the preset is missing.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import ContextFoldError
from .metrics import MsgDict, TokenCounter, content_text, tool_calls

if TYPE_CHECKING:
    from ..core.config import ContextConfig

BASELINES = ("raw", "truncate", "mask")
CONTEXTFOLD = ("progressive", "harness")
#: Emulated peers (see :mod:`.peers`); ``mask`` is the Complexity Trap's observation masking.
PEERS = ("anthropic-clear", "codex-compact", "langchain-summary", "openhands-condenser")
ALL_STRATEGIES = BASELINES + PEERS + CONTEXTFOLD
MASK_KEEP = 10
MASK_PLACEHOLDER = "[Old tool output omitted: {lines} lines]"


class StrategyUnavailable(ContextFoldError):
    """The strategy cannot run in this installation (e.g. a preset that does not exist yet)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SummarizerSpec:
    """How contextfold strategies are built: the summarizer (``extractive``, the default with
    no LLM, or ``openai``, an OpenAI-compatible endpoint) and the manager's token counter
    (``None``: the library default)."""

    kind: str = "extractive"
    base_url: str | None = None
    model: str | None = None
    token_counter: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Step:
    """What one ``prepare`` produced."""

    view: list[MsgDict]
    #: "" when nothing was compacted by this call, else the tier ("soft", "full", ...) or the
    #: baseline's action ("truncate", "mask").
    tier: str = ""
    summarizer_input_tokens: int = 0
    summarizer_output_tokens: int = 0
    offloaded: tuple[str, ...] = field(default_factory=tuple)


class Strategy(Protocol):
    name: str

    def add(self, messages: Sequence[MsgDict]) -> None: ...

    def prepare(self) -> Step: ...

    def recover(self, tool_call_id: str) -> str | None: ...

    def close(self) -> None: ...


class RawStrategy:
    name = "raw"

    def __init__(self) -> None:
        self._msgs: list[MsgDict] = []

    def add(self, messages: Sequence[MsgDict]) -> None:
        self._msgs.extend(messages)

    def prepare(self) -> Step:
        return Step(view=list(self._msgs))

    def recover(self, tool_call_id: str) -> str | None:
        return None

    def close(self) -> None:
        pass


class TruncateStrategy:
    name = "truncate"

    def __init__(self, window: int, counter: TokenCounter) -> None:
        self.window = window
        self._counter = counter
        self._pinned: list[MsgDict] = []
        self._units: list[list[MsgDict]] = []
        self._unit_tokens: list[int] = []
        self._open: set[str] = set()
        self._start = 0  # first unit in the last view (views only ever move forward)

    def add(self, messages: Sequence[MsgDict]) -> None:
        for msg in messages:
            role = msg.get("role")
            tokens = self._counter.message(msg)
            if role in ("system", "developer") and not self._units:
                self._pinned.append(msg)
                continue
            if role == "tool" and self._units and msg.get("tool_call_id") in self._open:
                self._open.discard(str(msg.get("tool_call_id")))
                self._units[-1].append(msg)
                self._unit_tokens[-1] += tokens
                continue
            self._units.append([msg])
            self._unit_tokens.append(tokens)
            if role == "assistant":
                self._open = {str(c.get("id")) for c in tool_calls(msg)}

    def prepare(self) -> Step:
        budget = self.window - sum(self._counter.message(m) for m in self._pinned)
        total = sum(self._unit_tokens[self._start :])
        start = self._start
        while total > budget and start < len(self._units) - 1:
            total -= self._unit_tokens[start]
            start += 1
        # A unit that is only a tool message would be an orphan result: never start there.
        while start < len(self._units) - 1 and self._units[start][0].get("role") == "tool":
            start += 1
        tier = "truncate" if start > self._start else ""
        self._start = start
        view = list(self._pinned)
        for unit in self._units[start:]:
            view.extend(unit)
        return Step(view=view, tier=tier)

    def recover(self, tool_call_id: str) -> str | None:
        return None

    def close(self) -> None:
        pass


class MaskStrategy:
    name = "mask"

    def __init__(self, keep: int = MASK_KEEP) -> None:
        self.keep = keep
        self._msgs: list[MsgDict] = []
        self._tool_idx: list[int] = []
        self._masked: dict[int, MsgDict] = {}

    def add(self, messages: Sequence[MsgDict]) -> None:
        for msg in messages:
            if msg.get("role") == "tool":
                self._tool_idx.append(len(self._msgs))
            self._msgs.append(msg)

    def _placeholder(self, i: int) -> MsgDict:
        got = self._masked.get(i)
        if got is None:
            orig = self._msgs[i]
            lines = content_text(orig.get("content")).count("\n") + 1
            got = {k: v for k, v in orig.items() if k != "content"}
            got["content"] = MASK_PLACEHOLDER.format(lines=lines)
            self._masked[i] = got
        return got

    def prepare(self) -> Step:
        old = self._tool_idx[: -self.keep] if len(self._tool_idx) > self.keep else []
        newly = len(old) > len(self._masked)
        masked = {i: self._placeholder(i) for i in old}
        view = [masked.get(i, m) for i, m in enumerate(self._msgs)]
        return Step(view=view, tier="mask" if newly else "")

    def recover(self, tool_call_id: str) -> str | None:
        return None

    def close(self) -> None:
        pass


def _tier_name(tier: Any) -> str:
    value = getattr(tier, "value", tier)
    return str(value) if value is not None else "none"


def _build_summarizer(spec: SummarizerSpec) -> Any:
    if spec.kind == "extractive":
        return None
    if spec.kind != "openai":
        raise ContextFoldError(f"unknown summarizer {spec.kind!r}; use extractive or openai")
    try:
        from ..compaction.summarizers import llm
    except ImportError as exc:
        raise StrategyUnavailable(f"the openai summarizer is not available: {exc}") from exc
    cls: Any = getattr(llm, "OpenAICompatibleSummarizer", None)
    if cls is None:
        raise StrategyUnavailable(
            "contextfold.compaction.summarizers.llm has no OpenAICompatibleSummarizer"
        )
    kwargs: dict[str, Any] = {"model": spec.model or "gpt-4o-mini"}
    if spec.base_url:
        kwargs["base_url"] = spec.base_url
    return cls(**kwargs)


class ContextFoldStrategy:
    """A contextfold preset through the public facade, in its own temporary workspace."""

    def __init__(
        self,
        preset: str,
        window: int,
        summarizer: SummarizerSpec | None = None,
        *,
        config: ContextConfig | None = None,
        ahead: bool = False,
    ) -> None:
        """``config`` (a :class:`contextfold.core.config.ContextConfig`) replaces the preset's.
        ``ahead``: compact ahead after each answer as the gateway does (the next turn's growth
        foreseen by :class:`contextfold.engine.ahead.Lookahead`)."""
        self.name = preset
        self._ahead = ahead
        self._lookahead: Any = None
        self._history_tokens = 0
        try:
            from .. import ContextManager  # type: ignore[attr-defined,unused-ignore]
        except ImportError:
            try:  # the facade re-exports it; the module may exist before the re-export
                from ..engine.manager import ContextManager  # type: ignore[no-redef,unused-ignore]
            except ImportError as exc:
                raise StrategyUnavailable(
                    f"contextfold.ContextManager is not available: {exc}"
                ) from exc
        self._dir = tempfile.mkdtemp(prefix=f"cf-bench-{preset}-")
        kwargs: dict[str, Any] = {
            "workspace": self._dir,
            "session_id": "bench",
            "context_window": window,
            "preset": preset,
        }
        if config is not None:
            kwargs["config"] = config
            del kwargs["preset"]
        spec = summarizer or SummarizerSpec()
        summ = _build_summarizer(spec)
        if summ is not None:
            kwargs["summarizer"] = summ
        if spec.token_counter:
            kwargs["token_counter"] = spec.token_counter
        try:
            self._cm: Any = ContextManager(**kwargs)
        except ContextFoldError as exc:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise StrategyUnavailable(f"preset {preset!r} is not available: {exc}") from exc
        self._last_record: Any = None

    def add(self, messages: Sequence[MsgDict]) -> None:
        for msg in messages:
            self._cm.add(dict(msg))
            if self._ahead:
                self._history_tokens += self._newest_tokens()
                if msg.get("role") == "assistant" and self._lookahead is not None:
                    # the answer is in; the agent runs its tool: the gateway's step
                    self._cm.compact_ahead(self._lookahead.tokens)

    def _newest_tokens(self) -> int:
        """Tokens of the message just added (the conversation's growth, as the gateway
        measures it between requests)."""
        from ..core.tokens import count_message

        return int(count_message(self._cm.counter, self._cm.history[-1]))

    def prepare(self) -> Step:
        if self._ahead:
            if self._lookahead is None:
                from ..engine.ahead import Lookahead

                self._lookahead = Lookahead()
            self._lookahead.note(self._history_tokens)
        view = self._cm.prepare()
        rec = self._cm.last_record
        if rec is None or rec is self._last_record:
            return Step(view=view)
        self._last_record = rec
        tier = _tier_name(rec.tier)
        return Step(
            view=view,
            tier="" if tier == "none" else tier,
            summarizer_input_tokens=int(getattr(rec, "summarizer_input_tokens", 0) or 0),
            summarizer_output_tokens=int(getattr(rec, "summarizer_output_tokens", 0) or 0),
            offloaded=tuple(str(e.tool_call_id) for e in getattr(rec, "offloaded", ()) or ()),
        )

    def recover(self, tool_call_id: str) -> str | None:
        got = self._cm.recover_tool_result(tool_call_id)
        return got if isinstance(got, str) else None

    def close(self) -> None:
        close = getattr(self._cm, "close", None)
        if callable(close):
            close()
        shutil.rmtree(self._dir, ignore_errors=True)


def make_strategy(
    name: str,
    window: int,
    counter: TokenCounter,
    summarizer: SummarizerSpec | None = None,
) -> Strategy:
    if name == "raw":
        return RawStrategy()
    if name == "truncate":
        return TruncateStrategy(window, counter)
    if name == "mask":
        return MaskStrategy()
    if name in CONTEXTFOLD:
        return ContextFoldStrategy(name, window, summarizer)
    if name in PEERS:
        from .peers import make_peer

        return make_peer(name, window, counter, _build_summarizer(summarizer or SummarizerSpec()))
    raise ContextFoldError(f"unknown strategy {name!r}; choose from {', '.join(ALL_STRATEGIES)}")


def check_pairs(view: Sequence[Mapping[str, object]]) -> list[str]:
    """Problems with tool pairing in a view (empty when every call has exactly one result)."""
    problems: list[str] = []
    open_calls: set[str] = set()
    for i, msg in enumerate(view):
        role = msg.get("role")
        if role == "assistant":
            if open_calls:
                problems.append(f"message {i}: calls {sorted(open_calls)} have no result")
                open_calls = set()
            open_calls = {str(c.get("id")) for c in tool_calls(msg)}
        elif role == "tool":
            tid = str(msg.get("tool_call_id"))
            if tid not in open_calls:
                problems.append(f"message {i}: result for unknown or answered call {tid!r}")
            open_calls.discard(tid)
    if open_calls:
        problems.append(f"end: calls {sorted(open_calls)} have no result")
    return problems
