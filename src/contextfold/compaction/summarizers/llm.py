"""LLM-backed summarizer with chunking, so the summarizing call itself never overflows.

:class:`LLMSummarizer` renders the messages as a transcript
(:func:`~contextfold.compaction.summarizers.transcript.render_transcript`), fills the prompt
(:func:`~contextfold.core.anchors.build_prompt`) and asks a :class:`~contextfold.providers.llm.ChatModel`.

When the prompt would not fit the summarizer model's own window (``context_window`` minus
``max_summary_tokens`` for the reply minus a safety ``margin``), the messages are split into
chunks that fit - never inside a message; a single message too big on its own is cut (head and
tail kept, a marker in the middle). Chunk 1 is summarized with the request's template, every
later chunk incrementally, with the summary so far as ``previous_summary``. If the model still
reports a context overflow, the current chunk is packed again with a smaller budget, up to
``overflow_retries`` times: when the error states the model's real window ("maximum context
length is 16384 tokens") ``context_window`` is lowered to it for good (with a
:class:`~contextfold.providers.limits.WindowLearnedWarning`), otherwise the budget is halved.

``model`` is a :class:`~contextfold.providers.llm.ChatModel` or a LangChain chat model (wrapped by
:class:`~contextfold.providers.chat_adapters.LangChainChatModel`). :meth:`LLMSummarizer.asummarize` is the
async path (``acomplete``: ``AsyncOpenAI`` / ``AsyncAnthropic`` / ``ainvoke``).
"""

from __future__ import annotations

import asyncio
import re
import warnings
from collections.abc import Generator, Sequence
from dataclasses import replace

from ...core.aio import call_model
from ...core.anchors import build_prompt
from ...core.messages import Message
from ...core.overflow import is_context_overflow
from ...core.tokens import TokenCounter, get_counter
from ...errors import ConfigError, SummarizerError
from ...providers.chat_adapters import as_chat_model
from ...providers.limits import WindowLearnedWarning, stated_limit
from ...providers.llm import AnthropicChatModel, ChatModel, ChatResult, OpenAIChatModel
from .base import SummaryRequest
from .transcript import render_transcript, shorten_middle, truncate_tool_arguments

DEFAULT_SYSTEM_PROMPT = (
    "You write compact, faithful summaries of AI agent conversations so that the agent can "
    "continue its work without the original messages. Follow the requested format exactly."
)

#: Tokens added per chat message by provider chat templates (role markers and the like).
_PER_MESSAGE = 8
#: Tokens of separator between two transcript entries ("\n\n").
_SEPARATOR = 2
#: A chunk must have at least this many tokens of room for messages.
_MIN_ROOM = 64
_THINK = re.compile(r"<think(?:ing)?>.*?</think(?:ing)?>", re.S | re.I)


def _cut_marker(omitted: int) -> str:
    return (
        f"\n... [contextfold: {omitted} characters cut so this message fits the summarizer's "
        "context window] ...\n"
    )


class LLMSummarizer:
    """A :class:`~contextfold.compaction.summarizers.Summarizer` that asks a chat model.

    ``context_window`` is the summarizer model's window (not the agent's); ``max_summary_tokens``
    is the reply limit sent with every call and reserved in the budget; ``margin`` (default 10%
    of the window, at least 256) absorbs token-estimate error. ``counter`` defaults to
    :func:`contextfold.core.tokens.get_counter`. Failures raise :class:`SummarizerError` (the model's
    exception is its ``__cause__``); an empty or whitespace-only reply is a failure too.
    ``<think>...</think>`` blocks of reasoning models are removed from the reply. ``model`` may
    also be a LangChain chat model (``ChatOpenAI(...)``); anything else is a ConfigError.
    """

    def __init__(
        self,
        model: ChatModel | object,
        *,
        context_window: int = 32_000,
        max_summary_tokens: int = 2_000,
        counter: TokenCounter | None = None,
        margin: int | None = None,
        system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
        overflow_retries: int = 2,
    ) -> None:
        chat_model = as_chat_model(model, "LLMSummarizer")
        for name, value in (
            ("context_window", context_window),
            ("max_summary_tokens", max_summary_tokens),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"LLMSummarizer: {name} must be an int >= 1, got {value!r}")
        self._auto_margin = margin is None
        if margin is None:
            margin = max(256, context_window // 10)
        if not isinstance(margin, int) or margin < 0:
            raise ConfigError(f"LLMSummarizer: margin must be an int >= 0, got {margin!r}")
        if not isinstance(overflow_retries, int) or overflow_retries < 0:
            raise ConfigError(
                f"LLMSummarizer: overflow_retries must be an int >= 0, got {overflow_retries!r}"
            )
        self.model: ChatModel = chat_model
        self.context_window = context_window
        #: The overflow error text the window was lowered from (None while it was not).
        self.learned_from: str | None = None
        self.max_summary_tokens = max_summary_tokens
        self.margin = margin
        self.system_prompt = system_prompt
        self.overflow_retries = overflow_retries
        self.counter: TokenCounter = get_counter(counter)
        if self.prompt_budget < 4 * _MIN_ROOM:
            raise ConfigError(
                f"LLMSummarizer: context_window {context_window} leaves only "
                f"{self.prompt_budget} tokens for the prompt after max_summary_tokens "
                f"{max_summary_tokens}, margin {margin} and the system prompt"
            )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, context_window={self.context_window})"

    # ------------------------------------------------------------------ token accounting

    @property
    def prompt_budget(self) -> int:
        """Tokens the user prompt may take in one call."""
        system = (
            self.counter.count_text(self.system_prompt) + _PER_MESSAGE if self.system_prompt else 0
        )
        return self.context_window - self.max_summary_tokens - self.margin - system - _PER_MESSAGE

    def prompt_tokens(self, prompt: str) -> int:
        """Estimated tokens of a user prompt (without the system prompt)."""
        return self.counter.count_text(prompt)

    def _entry_tokens(self, msg: Message) -> int:
        return self.prompt_tokens(render_transcript([msg])) + _SEPARATOR

    # ------------------------------------------------------------------ chunking

    def _cut(self, msg: Message, room: int) -> Message:
        """A copy of ``msg`` whose transcript entry fits ``room`` tokens (head/tail kept)."""
        cost = self._entry_tokens(msg)
        ratio = 0.9 * room / max(cost, 1)
        text = msg.text
        for _ in range(12):
            limit = max(int(len(text) * ratio), 0)
            content: str | None = (
                shorten_middle(text, limit, _cut_marker(len(text) - limit))
                if len(text) > limit
                else text
            )
            cut = replace(msg, content=content if msg.content is not None else None)
            if msg.tool_calls:
                per_value = max(int(max(len(c.arguments) for c in msg.tool_calls) * ratio), 16)
                marker = _cut_marker(0).replace("0 characters", "some characters")
                cut = truncate_tool_arguments(
                    [cut], tools=("*",), max_length=per_value, text=marker
                )[0]
                cut = replace(
                    cut,
                    tool_calls=tuple(
                        replace(c, arguments=shorten_middle(c.arguments, per_value * 4, marker))
                        for c in cut.tool_calls
                    ),
                )
            if self._entry_tokens(cut) <= room:
                return cut
            ratio *= 0.6
        # Nothing of the content survives: keep only the role and a marker.
        return replace(
            msg,
            content=_cut_marker(len(text)).strip(),
            tool_calls=tuple(replace(c, arguments="{}") for c in msg.tool_calls),
        )

    def _pack(
        self, messages: Sequence[Message], start: int, request: SummaryRequest, budget: int
    ) -> tuple[list[Message], int]:
        """The next chunk from ``start`` whose prompt fits ``budget``; returns (chunk, next)."""
        overhead = self.prompt_tokens(build_prompt(replace(request, messages=()), ""))
        room = budget - overhead
        if room < _MIN_ROOM:
            raise SummarizerError(
                f"LLMSummarizer: the prompt template and previous summary take {overhead} "
                f"tokens, leaving {room} of the {budget}-token budget for messages "
                f"(context_window={self.context_window})"
            )
        chunk: list[Message] = []
        used = 0
        pos = start
        while pos < len(messages):
            cost = self._entry_tokens(messages[pos])
            if used + cost > room:
                break
            chunk.append(messages[pos])
            used += cost
            pos += 1
        if not chunk:
            chunk = [self._cut(messages[start], room)]
            pos = start + 1
        # The estimate is additive; the real prompt decides.
        while self._prompt_cost(request, chunk) > budget:
            if len(chunk) > 1:
                chunk.pop()
                pos -= 1
            else:
                room = int(room * 0.8)
                if room < _MIN_ROOM:
                    raise SummarizerError(
                        f"LLMSummarizer: message {start} cannot be cut to fit the "
                        f"{budget}-token budget"
                    )
                chunk = [self._cut(messages[start], room)]
        return chunk, pos

    def _prompt_cost(self, request: SummaryRequest, chunk: Sequence[Message]) -> int:
        return self.prompt_tokens(self._prompt(request, chunk))

    @staticmethod
    def _prompt(request: SummaryRequest, chunk: Sequence[Message]) -> str:
        return build_prompt(replace(request, messages=tuple(chunk)), render_transcript(chunk))

    # ------------------------------------------------------------------ calling the model

    def _chat(self, prompt: str) -> list[dict[str, object]]:
        chat: list[dict[str, object]] = []
        if self.system_prompt:
            chat.append({"role": "system", "content": self.system_prompt})
        chat.append({"role": "user", "content": prompt})
        return chat

    def _failed(self, exc: Exception, call: int) -> Exception:
        """What a failed model call raises: an overflow as is (the caller shrinks the chunk),
        anything else as a SummarizerError."""
        if isinstance(exc, SummarizerError) or is_context_overflow(exc):
            return exc
        error = SummarizerError(
            f"LLMSummarizer: summarizer call {call} to {self.model!r} failed: "
            f"{type(exc).__name__}: {exc}"
        )
        error.__cause__ = exc
        return error

    def _reply_text(self, result: ChatResult, call: int) -> str:
        text = _THINK.sub("", result.text or "").strip()
        if not text:
            raise SummarizerError(
                f"LLMSummarizer: {self.model!r} returned an empty summary on call {call}"
                + (f" (stop reason {result.stop_reason!r})" if result.stop_reason else "")
            )
        return text

    def _call(self, prompt: str, call: int) -> str:
        chat = self._chat(prompt)
        model = self.model
        acomplete = getattr(model, "acomplete", None)
        try:
            result = call_model(
                lambda: model.complete(chat, max_tokens=self.max_summary_tokens),
                (lambda: acomplete(chat, max_tokens=self.max_summary_tokens))
                if callable(acomplete)
                else None,
            )
        except Exception as exc:
            raise self._failed(exc, call) from exc
        return self._reply_text(result, call)

    async def _acall(self, prompt: str, call: int) -> str:
        chat = self._chat(prompt)
        acomplete = getattr(self.model, "acomplete", None)
        try:
            if callable(acomplete):
                result = await acomplete(chat, max_tokens=self.max_summary_tokens)
            else:  # a sync-only model: its blocking call runs in a worker thread
                result = await asyncio.to_thread(
                    self.model.complete, chat, max_tokens=self.max_summary_tokens
                )
        except Exception as exc:
            raise self._failed(exc, call) from exc
        return self._reply_text(result, call)

    def _learn(self, exc: Exception, prompt: str, budget: int) -> int:
        """The prompt budget after the model reported an overflow: when the error states the
        model's window and it is smaller than ``context_window``, the window is lowered for good
        (with a :class:`~contextfold.providers.limits.WindowLearnedWarning`) and chunks shrink to it; the
        prompt size the provider counted corrects the token estimate. Always smaller than
        ``budget`` (halved when the error says nothing usable)."""
        stated = stated_limit(exc)
        new = budget // 2
        if stated is not None:
            if stated.limit < self.context_window:
                warnings.warn(
                    WindowLearnedWarning(
                        f"LLMSummarizer: {self.model!r} reported a context window of "
                        f"{stated.limit} tokens ({stated.source!r}); context_window lowered from "
                        f"{self.context_window} to {stated.limit}, chunks shrink accordingly"
                    ),
                    stacklevel=4,
                )
                self.context_window = stated.limit
                if self._auto_margin:
                    self.margin = max(256, stated.limit // 10)
                self.learned_from = stated.source
            learned = self.prompt_budget
            estimate = self.prompt_tokens(prompt)
            if stated.prompt_tokens and stated.prompt_tokens > estimate > 0:
                # the provider counts more than we estimate: shrink by that ratio (at most 4x)
                learned = int(learned * max(0.25, estimate / stated.prompt_tokens))
            new = min(max(learned, 0), budget * 9 // 10)
        return new

    def _plan(self, request: SummaryRequest) -> Generator[tuple[str, int], str, str]:
        """The summarizing conversation: yields (prompt, call number), receives the reply text
        (or the model's overflow error thrown in), returns the final summary. Driven by
        :meth:`summarize` (sync) and :meth:`asummarize` (async) alike."""
        messages = list(request.messages)
        if not messages:
            raise SummarizerError("LLMSummarizer: the request has no messages to summarize")
        budget = self.prompt_budget
        retries = 0
        running_request = request
        pos = 0
        summary: str | None = None
        call = 0
        while pos < len(messages):
            if pos == 0 and self._prompt_cost(request, messages) <= budget:
                chunk, nxt = messages, len(messages)
            else:
                chunk, nxt = self._pack(messages, pos, running_request, budget)
            call += 1
            prompt = self._prompt(running_request, chunk)
            try:
                summary = yield prompt, call
            except SummarizerError:
                raise
            except Exception as exc:  # a context overflow: the estimate was too optimistic
                if retries >= self.overflow_retries:
                    raise SummarizerError(
                        f"LLMSummarizer: {self.model!r} still reports a context overflow on "
                        f"call {call} with a {budget}-token prompt budget; lower context_window"
                    ) from exc
                retries += 1
                budget = self._learn(exc, prompt, budget)
                continue
            pos = nxt
            # Later chunks merge into the summary so far; the previous anchors are in it now.
            running_request = replace(request, previous_summary=summary, previous_anchors=())
        assert summary is not None
        return summary

    def summarize(self, request: SummaryRequest) -> str:
        plan = self._plan(request)
        step = next(plan)
        while True:
            try:
                text = self._call(*step)
            except Exception as exc:
                try:
                    step = plan.throw(exc)
                except StopIteration as stop:  # pragma: no cover - a throw never finishes
                    return str(stop.value)
                continue
            try:
                step = plan.send(text)
            except StopIteration as stop:
                return str(stop.value)

    async def asummarize(self, request: SummaryRequest) -> str:
        """:meth:`summarize` with the model's async path (``acomplete``): never blocks the
        event loop (a sync-only model runs in a worker thread)."""
        plan = self._plan(request)
        step = next(plan)
        while True:
            try:
                text = await self._acall(*step)
            except Exception as exc:
                try:
                    step = plan.throw(exc)
                except StopIteration as stop:  # pragma: no cover - a throw never finishes
                    return str(stop.value)
                continue
            try:
                step = plan.send(text)
            except StopIteration as stop:
                return str(stop.value)


class OpenAICompatibleSummarizer(LLMSummarizer):
    """:class:`LLMSummarizer` over :class:`~contextfold.providers.llm.OpenAIChatModel` (OpenAI, vLLM,
    Ollama, llama.cpp server ... via ``base_url``)."""

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        context_window: int = 32_000,
        max_summary_tokens: int = 2_000,
        temperature: float | None = 0.0,
        counter: TokenCounter | None = None,
    ) -> None:
        super().__init__(
            OpenAIChatModel(
                model=model,
                base_url=base_url,
                api_key=api_key,
                timeout=timeout,
                max_retries=max_retries,
                temperature=temperature,
            ),
            context_window=context_window,
            max_summary_tokens=max_summary_tokens,
            counter=counter,
        )


class AnthropicSummarizer(LLMSummarizer):
    """:class:`LLMSummarizer` over :class:`~contextfold.providers.llm.AnthropicChatModel`."""

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        context_window: int = 200_000,
        max_summary_tokens: int = 2_000,
        temperature: float | None = None,
        counter: TokenCounter | None = None,
    ) -> None:
        super().__init__(
            AnthropicChatModel(
                model=model,
                base_url=base_url,
                api_key=api_key,
                timeout=timeout,
                max_retries=max_retries,
                temperature=temperature,
                max_tokens=max_summary_tokens,
            ),
            context_window=context_window,
            max_summary_tokens=max_summary_tokens,
            counter=counter,
        )


__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "AnthropicSummarizer",
    "LLMSummarizer",
    "OpenAICompatibleSummarizer",
]
