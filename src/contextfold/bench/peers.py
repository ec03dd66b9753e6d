"""Emulations of other agents' published context policies, replayed next to contextfold.

Each strategy follows its project's documented parameters and defaults; where a policy needs a
model (a summary), the replay's summarizer is used for every strategy alike (extractive by
default, so no strategy pays for summaries unless ``--summarizer openai`` is given). None of
them keeps removed outputs anywhere, so nothing they drop can be restored.

* ``anthropic-clear``: Anthropic context editing, ``clear_tool_uses_20250919``.
* ``codex-compact``: OpenAI Codex CLI auto-compaction.
* ``langchain-summary``: LangChain v1 ``SummarizationMiddleware``.
* ``openhands-condenser``: OpenHands ``LLMSummarizingCondenser``.

Observation masking ("The Complexity Trap") is ``mask`` in :mod:`.strategies`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..compaction.summarizers.base import Summarizer, SummaryRequest
from ..compaction.summarizers.extractive import ExtractiveSummarizer
from ..core.messages import Message
from ..core.wire import from_openai
from .metrics import MsgDict, TokenCounter, content_text, tool_calls
from .strategies import Step


def repair_pairs(view: Sequence[MsgDict]) -> list[MsgDict]:
    """Drop tool results whose call is not in the view and calls whose result is not (what
    each of these frameworks does before sending), keeping the rest untouched."""
    answered: set[str] = set()
    open_calls: set[str] = set()
    keep: list[bool] = []
    for msg in view:
        if msg.get("role") == "tool":
            tid = str(msg.get("tool_call_id"))
            ok = tid in open_calls
            open_calls.discard(tid)
            if ok:
                answered.add(tid)
            keep.append(ok)
            continue
        open_calls = {str(c.get("id")) for c in tool_calls(msg)}
        keep.append(True)
    out: list[MsgDict] = []
    for msg, ok in zip(view, keep, strict=True):
        if not ok:
            continue
        calls = tool_calls(msg)
        if calls and any(str(c.get("id")) not in answered for c in calls):
            kept = [c for c in calls if str(c.get("id")) in answered]
            fixed = {k: v for k, v in msg.items() if k != "tool_calls"}
            if kept:
                fixed["tool_calls"] = kept
            if not kept and not content_text(msg.get("content")).strip():
                continue
            msg = fixed
        out.append(msg)
    return out


class _Peer:
    """Shared plumbing: the full trajectory so far, token counts and the summarizer."""

    name = "peer"

    def __init__(
        self, window: int, counter: TokenCounter, summarizer: Summarizer | None = None
    ) -> None:
        self.window = window
        self.counter = counter
        self.summarizer: Summarizer = summarizer or ExtractiveSummarizer()
        self.llm = summarizer is not None
        self.full: list[MsgDict] = []
        self._summ_in = self._summ_out = 0
        #: ids of the summary messages this strategy inserted (never summarized as "user")
        self.notes: set[int] = set()

    def add(self, messages: Sequence[MsgDict]) -> None:
        self.full.extend(messages)

    def prepare(self) -> Step:
        raise NotImplementedError

    def tokens(self, msgs: Sequence[MsgDict]) -> int:
        return sum(self.counter.message(m) for m in msgs)

    def summarize(self, msgs: Sequence[MsgDict], previous: str = "") -> str:
        """A summary of ``msgs`` (bounded like contextfold's: 6% of the window)."""
        converted: list[Message] = [from_openai(dict(m), i) for i, m in enumerate(msgs)]
        text = self.summarizer.summarize(
            SummaryRequest(
                messages=converted,
                previous_summary=previous or None,
                max_summary_tokens=max(256, min(4_000, int(self.window * 0.06))),
            )
        )
        if self.llm:
            self._summ_in += self.tokens(msgs) + self.counter.count(previous) + 300
            self._summ_out += self.counter.count(text)
        return text

    def note(self, text: str) -> MsgDict:
        msg = {"role": "user", "content": text}
        self.notes.add(id(msg))
        return msg

    def take_summary_tokens(self) -> tuple[int, int]:
        got = (self._summ_in, self._summ_out)
        self._summ_in = self._summ_out = 0
        return got

    def recover(self, tool_call_id: str) -> str | None:
        return None  # removed outputs are gone

    def close(self) -> None:
        pass


def _leading_system(msgs: Sequence[MsgDict]) -> int:
    n = 0
    while n < len(msgs) and msgs[n].get("role") in ("system", "developer"):
        n += 1
    return n


class AnthropicClearToolUses(_Peer):
    """Anthropic context editing, ``clear_tool_uses_20250919`` (API docs, "Context editing";
    same defaults in LangChain's ``ClearToolUsesEdit``): once the request's input tokens pass
    ``trigger`` (default 100,000 of Claude's 200,000-token window, here the same half of the
    replayed window), every tool result except the newest ``keep`` (3) is replaced by a
    placeholder (``[cleared]``); tool inputs stay. It runs on each request, so the cleared range
    moves with every new result."""

    name = "anthropic-clear"
    KEEP = 3
    PLACEHOLDER = "[cleared]"

    def __init__(
        self, window: int, counter: TokenCounter, summarizer: Summarizer | None = None
    ) -> None:
        super().__init__(window, counter)
        self.trigger = min(100_000, window // 2)
        self._cleared = 0
        self._total = 0
        self._seen = 0

    def prepare(self) -> Step:
        for m in self.full[self._seen :]:
            self._total += self.counter.message(m)
        self._seen = len(self.full)
        if self._total <= self.trigger:
            return Step(view=list(self.full))
        tools = [i for i, m in enumerate(self.full) if m.get("role") == "tool"]
        clear = set(tools[: -self.KEEP] if len(tools) > self.KEEP else [])
        view = [
            {**m, "content": self.PLACEHOLDER} if i in clear else m for i, m in enumerate(self.full)
        ]
        tier = "clear" if len(clear) > self._cleared else ""
        self._cleared = len(clear)
        return Step(view=view, tier=tier)


class CodexAutoCompact(_Peer):
    """OpenAI Codex CLI auto-compaction (codex-rs ``compact.rs``; ``auto_compact_token_limit``
    is 90% of the model's context window): when the history reaches the limit, the whole
    conversation is summarized and the history becomes the initial instructions, the user
    messages so far (newest first, at most 20,000 tokens) and the summary as one user message.
    """

    name = "codex-compact"
    LIMIT_RATIO = 0.9
    USER_TOKENS = 20_000

    def __init__(
        self, window: int, counter: TokenCounter, summarizer: Summarizer | None = None
    ) -> None:
        super().__init__(window, counter, summarizer)
        self.history: list[MsgDict] = []
        self._seen = 0
        self._summary = ""

    def prepare(self) -> Step:
        self.history.extend(self.full[self._seen :])
        self._seen = len(self.full)
        if self.tokens(self.history) < self.LIMIT_RATIO * self.window:
            return Step(view=list(self.history))
        head = _leading_system(self.history)
        body = self.history[head:]
        self._summary = self.summarize(body, self._summary)
        users: list[MsgDict] = []
        budget = self.USER_TOKENS
        for m in reversed(body):
            if m.get("role") != "user" or id(m) in self.notes:
                continue
            cost = self.counter.message(m)
            if cost > budget:
                break
            budget -= cost
            users.insert(0, m)
        note = self.note(
            "Summary of the work so far (the earlier history was compacted):\n\n" + self._summary
        )
        self.history = [*self.history[:head], *users, note]
        s_in, s_out = self.take_summary_tokens()
        return Step(
            view=list(self.history),
            tier="compact",
            summarizer_input_tokens=s_in,
            summarizer_output_tokens=s_out,
        )


class LangChainSummarization(_Peer):
    """LangChain v1 ``SummarizationMiddleware`` (``langchain.agents.middleware``): keep
    ``("messages", 20)`` (the default); the trigger has no default, so this uses
    ``("fraction", 0.8)`` of the window (the example in its docstring). When triggered,
    everything before the kept messages (moved back so no tool result loses its call) becomes
    one user message "Here is a summary of the conversation to date". The system prompt lives
    outside the message state and is kept."""

    name = "langchain-summary"
    KEEP = 20
    TRIGGER = 0.8

    def __init__(
        self, window: int, counter: TokenCounter, summarizer: Summarizer | None = None
    ) -> None:
        super().__init__(window, counter, summarizer)
        self.system: list[MsgDict] = []
        self.state: list[MsgDict] = []
        self._seen = 0

    def prepare(self) -> Step:
        new = self.full[self._seen :]
        if self._seen == 0:
            head = _leading_system(new)
            self.system, new = list(new[:head]), new[head:]
        self.state.extend(new)
        self._seen = len(self.full)
        total = self.tokens(self.system) + self.tokens(self.state)
        if total < self.TRIGGER * self.window or len(self.state) <= self.KEEP:
            return Step(view=[*self.system, *self.state])
        cut = len(self.state) - self.KEEP
        while cut > 0 and self.state[cut].get("role") == "tool":
            cut -= 1  # keep the AI message with its tool results
        if cut <= 0:
            return Step(view=[*self.system, *self.state])
        summary = self.summarize(self.state[:cut])
        note = self.note(f"Here is a summary of the conversation to date:\n\n{summary}")
        self.state = [note, *self.state[cut:]]
        s_in, s_out = self.take_summary_tokens()
        return Step(
            view=[*self.system, *self.state],
            tier="summary",
            summarizer_input_tokens=s_in,
            summarizer_output_tokens=s_out,
        )


class OpenHandsCondenser(_Peer):
    """OpenHands ``LLMSummarizingCondenser`` (openhands-sdk, ``context/condenser``; defaults
    ``max_size=120`` events, ``keep_first=4``): when the view holds more than ``max_size``
    events, it keeps the first ``keep_first`` and the newest ``max_size // 2 - keep_first - 1``
    and replaces the rest (with the previous summary) by one summary event. One message is one
    event here; calls left without their result are dropped, as OpenHands' view does."""

    name = "openhands-condenser"
    MAX_SIZE = 120
    KEEP_FIRST = 4

    def __init__(
        self, window: int, counter: TokenCounter, summarizer: Summarizer | None = None
    ) -> None:
        super().__init__(window, counter, summarizer)
        self.events: list[MsgDict] = []
        self._seen = 0
        self._summary = ""

    def prepare(self) -> Step:
        self.events.extend(self.full[self._seen :])
        self._seen = len(self.full)
        if len(self.events) <= self.MAX_SIZE:
            return Step(view=repair_pairs(self.events))
        tail = self.MAX_SIZE // 2 - self.KEEP_FIRST - 1
        forgotten = [m for m in self.events[self.KEEP_FIRST : -tail] if id(m) not in self.notes]
        self._summary = self.summarize(forgotten, self._summary)
        note = self.note(self._summary)
        self.events = [*self.events[: self.KEEP_FIRST], note, *self.events[-tail:]]
        s_in, s_out = self.take_summary_tokens()
        return Step(
            view=repair_pairs(self.events),
            tier="condense",
            summarizer_input_tokens=s_in,
            summarizer_output_tokens=s_out,
        )


def make_peer(
    name: str, window: int, counter: TokenCounter, summarizer: Summarizer | None
) -> _Peer:
    classes: dict[str, type[_Peer]] = {
        "anthropic-clear": AnthropicClearToolUses,
        "codex-compact": CodexAutoCompact,
        "langchain-summary": LangChainSummarization,
        "openhands-condenser": OpenHandsCondenser,
    }
    return classes[name](window, counter, summarizer)
