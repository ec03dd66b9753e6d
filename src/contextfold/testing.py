"""Test doubles for code built on contextfold (and for contextfold's own tests).

* :class:`ScriptedLLM` - a :class:`~contextfold.providers.llm.ChatModel` that replies from a script and
  records every call.
* :class:`ScriptedSummarizer` - the same idea at the :class:`~contextfold.compaction.summarizers.Summarizer`
  level (records each :class:`~contextfold.compaction.summarizers.SummaryRequest`).
* :func:`overflow_error` - realistic context-overflow exceptions as each provider raises them
  (the real ``openai``/``anthropic`` SDK classes, built around a real HTTP response object).
* :class:`OverflowingModel` - a fake agent model that overflows above a token limit.
* :func:`fake_openai_server` / :func:`fake_anthropic_server` - real HTTP servers on 127.0.0.1
  that play OpenAI (Chat Completions and Responses) and Anthropic for the official SDKs, with
  the providers' own overflow and tool-pairing errors (context managers giving a
  :class:`FakeProviderServer` with ``base_url``; they need the ``gateway`` extra: Starlette
  and uvicorn).

Example::

    with ScriptedLLM(["### User Intent\\n- fix the bug\\n## Summary\\nok"]) as llm:
        text = LLMSummarizer(llm).summarize(request)
    assert "fix the bug" in llm.calls[0][-1]["content"]
"""

from __future__ import annotations

import copy
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Generic, TypeVar

from .compaction.summarizers.base import SummaryRequest
from .core.tokens import get_counter
from .providers.llm import ChatResult
from .testing_overflow import OVERFLOW_PROVIDERS, OverflowingModel, overflow_error
from .testing_overflow import OllamaResponseError as OllamaResponseError
from .testing_overflow import _text_of as _text_of
from .testing_overflow import message_tokens as message_tokens

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})

LLMStep = (
    str
    | ChatResult
    | BaseException
    | type[BaseException]
    | Callable[[list[dict[str, object]]], str | ChatResult]
)
SummaryStep = str | BaseException | type[BaseException] | Callable[[SummaryRequest], str]

_Self = TypeVar("_Self", bound="_Script[Any]")
_StepT = TypeVar("_StepT")


class _Script(Generic[_StepT]):
    """A thread-safe queue of scripted steps with leftover checking."""

    _name = "script"

    def __init__(self, steps: Iterable[_StepT], *, strict: bool) -> None:
        self._steps: deque[_StepT] = deque(steps)
        self._lock = threading.Lock()
        self._count = 0
        self.strict = strict

    def _next(self) -> tuple[int, _StepT | None, bool]:
        """(call number, step, found)."""
        with self._lock:
            self._count += 1
            if self._steps:
                return self._count, self._steps.popleft(), True
            return self._count, None, False

    @property
    def remaining(self) -> int:
        """How many scripted steps have not been used yet."""
        return len(self._steps)

    def add(self, *steps: _StepT) -> None:
        """Append more steps to the script."""
        with self._lock:
            self._steps.extend(steps)

    def assert_done(self) -> None:
        """Fail (AssertionError) if scripted steps were never used."""
        if self._steps:
            raise AssertionError(
                f"{self._name}: {len(self._steps)} scripted step(s) left unused after "
                f"{self._count} call(s): {[_describe(s) for s in self._steps]}"
            )

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None and self.strict:
            self.assert_done()


def _describe(step: object) -> str:
    if isinstance(step, str):
        return repr(step if len(step) <= 40 else step[:37] + "...")
    if isinstance(step, BaseException):
        return f"raise {type(step).__name__}"
    if isinstance(step, type):
        return f"raise {step.__name__}"
    return getattr(step, "__name__", type(step).__name__)


def _raise_step(step: object) -> None:
    if isinstance(step, BaseException):
        raise step
    if isinstance(step, type) and issubclass(step, BaseException):
        raise step()


def _check_openai_messages(messages: Sequence[Mapping[str, object]], call: int) -> None:
    where = f"ScriptedLLM call {call}"
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise AssertionError(f"{where}: messages must be a list, got {type(messages).__name__}")
    if not messages:
        raise AssertionError(f"{where}: messages is empty")
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise AssertionError(f"{where}: message {i} is not a dict")
        if m.get("role") not in _ROLES:
            raise AssertionError(f"{where}: message {i} has unknown role {m.get('role')!r}")
        content = m.get("content")
        if content is not None and not isinstance(content, str | list):
            raise AssertionError(
                f"{where}: message {i} content must be a string, a list or null, "
                f"not {type(content).__name__}"
            )


class ScriptedLLM(_Script[LLMStep]):
    """A :class:`~contextfold.providers.llm.ChatModel` (and ``AsyncChatModel``) that follows a script.

    Each call takes the next step: a ``str`` (or :class:`ChatResult`) is the reply; an exception
    instance or class is raised; a callable gets the call's messages (a deep copy, list of dicts)
    and returns the reply. With no step left, ``default`` is the reply when it is not None,
    else ``AssertionError("ScriptedLLM: no scripted step left for call N")``.

    ``calls`` records every call's messages (deep copies) and ``max_tokens`` each call's limit.
    With ``strict=True`` (the default) every call's messages are checked to be well-formed
    OpenAI-format dicts (AssertionError otherwise) and leaving the ``with`` block without an
    exception runs :meth:`assert_done`. With ``strict=False`` neither happens; an explicit
    :meth:`assert_done` still checks.
    """

    _name = "ScriptedLLM"

    def __init__(
        self,
        steps: Iterable[LLMStep] = (),
        *,
        default: str | None = None,
        strict: bool = True,
        model_name: str = "scripted",
    ) -> None:
        super().__init__(steps, strict=strict)
        self.default = default
        self.model_name = model_name
        self.calls: list[list[dict[str, object]]] = []
        self.max_tokens: list[int | None] = []

    def complete(
        self, messages: Sequence[Mapping[str, object]], *, max_tokens: int | None = None
    ) -> ChatResult:
        number, step, found = self._next()
        if self.strict:
            _check_openai_messages(messages, number)
        recorded = [copy.deepcopy(dict(m)) for m in messages]
        with self._lock:
            self.calls.append(recorded)
            self.max_tokens.append(max_tokens)
        if not found:
            if self.default is None:
                raise AssertionError(f"ScriptedLLM: no scripted step left for call {number}")
            return self._result(self.default, recorded)
        assert step is not None
        _raise_step(step)
        if isinstance(step, str | ChatResult):
            return self._result(step, recorded)
        if callable(step) and not isinstance(step, BaseException | type):
            return self._result(step(copy.deepcopy(recorded)), recorded)
        raise AssertionError(f"ScriptedLLM: step {number} is not usable: {step!r}")

    async def acomplete(
        self, messages: Sequence[Mapping[str, object]], *, max_tokens: int | None = None
    ) -> ChatResult:
        return self.complete(messages, max_tokens=max_tokens)

    def _result(self, reply: str | ChatResult, messages: list[dict[str, object]]) -> ChatResult:
        if isinstance(reply, ChatResult):
            return reply
        if not isinstance(reply, str):
            raise AssertionError(
                f"ScriptedLLM: a step must produce a str or ChatResult, not {type(reply).__name__}"
            )
        return ChatResult(
            text=reply,
            input_tokens=message_tokens(messages),
            output_tokens=get_counter().count_text(reply),
            model=self.model_name,
            stop_reason="stop",
        )

    @property
    def prompts(self) -> list[str]:
        """The text of the last message of every call (the summarizer's prompt)."""
        return [_text_of(call[-1].get("content")) if call else "" for call in self.calls]


class ScriptedSummarizer(_Script[SummaryStep]):
    """A :class:`~contextfold.compaction.summarizers.Summarizer` that follows a script.

    Steps: a ``str`` is the summary; an exception (instance or class) is raised; a callable gets
    the :class:`SummaryRequest` and returns the summary. ``requests`` records every request.
    Running out of steps returns ``default`` or raises AssertionError. ``strict`` as for
    :class:`ScriptedLLM` (leftover steps fail the ``with`` block).
    """

    _name = "ScriptedSummarizer"

    def __init__(
        self,
        steps: Iterable[SummaryStep] = (),
        *,
        default: str | None = None,
        strict: bool = True,
    ) -> None:
        super().__init__(steps, strict=strict)
        self.default = default
        self.requests: list[SummaryRequest] = []

    def summarize(self, request: SummaryRequest) -> str:
        number, step, found = self._next()
        with self._lock:
            self.requests.append(request)
        if not found:
            if self.default is None:
                raise AssertionError(f"ScriptedSummarizer: no scripted step left for call {number}")
            return self.default
        assert step is not None
        _raise_step(step)
        if isinstance(step, str):
            return step
        if callable(step):
            out = step(request)
            if not isinstance(out, str):
                raise AssertionError(
                    f"ScriptedSummarizer: step {number} returned {type(out).__name__}, not str"
                )
            return out
        raise AssertionError(f"ScriptedSummarizer: step {number} is not usable: {step!r}")


# the fake HTTP servers (their web framework is imported only when one starts)
from .testing_servers import (  # noqa: E402
    FakeProviderServer,
    FakeReply,
    FakeRequest,
    fake_anthropic_server,
    fake_openai_server,
)

__all__ = [
    "OVERFLOW_PROVIDERS",
    "FakeProviderServer",
    "FakeReply",
    "FakeRequest",
    "OverflowingModel",
    "ScriptedLLM",
    "ScriptedSummarizer",
    "fake_anthropic_server",
    "fake_openai_server",
    "message_tokens",
    "overflow_error",
]
