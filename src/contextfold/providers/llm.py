"""Chat model clients: the small protocol contextfold calls LLMs through, and two adapters.

:class:`ChatModel` is all an LLM-backed summarizer needs: OpenAI-format message dicts in
(``system``/``user``/``assistant``, tool messages too), text out. Two adapters wrap the official
SDKs, imported lazily so that contextfold itself has no hard dependency on either:

* :class:`OpenAIChatModel` - the ``openai`` SDK's Chat Completions. Works with every
  OpenAI-compatible server (vLLM, Ollama, llama.cpp server, LM Studio, LiteLLM proxy ...) through
  ``base_url``; local servers need no key (``"not-needed"`` is sent).
* :class:`AnthropicChatModel` - the ``anthropic`` SDK's Messages API. System messages go to
  ``system=``; the rest is converted with :func:`contextfold.core.wire.to_anthropic`.

Both have an async twin ``acomplete`` (``AsyncOpenAI`` / ``AsyncAnthropic``), described by the
optional :class:`AsyncChatModel` protocol. Provider errors (including context overflow, see
:mod:`contextfold.core.overflow`) propagate unchanged as the SDK's own exception classes.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import ModuleType, TracebackType
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from ..core.messages import Message
from ..core.wire import messages_from_openai, to_anthropic
from ..errors import ConfigError, InvalidMessageError
from ..extras import needs_extra
from ..jsontypes import JSONLike

#: The key sent to OpenAI-compatible local servers that do not check one.
LOCAL_API_KEY = "not-needed"


@dataclass(frozen=True, kw_only=True)
class ChatResult:
    """One completion: its text and, when the provider reports them, token counts."""

    text: str
    input_tokens: int | None = None
    output_tokens: int | None = None
    model: str | None = None
    #: Why generation stopped, in the provider's words ("stop", "length", "end_turn" ...).
    stop_reason: str | None = None


@runtime_checkable
class ChatModel(Protocol):
    """Anything that turns OpenAI-format messages into a reply."""

    def complete(
        self, messages: Sequence[Mapping[str, object]], *, max_tokens: int | None = None
    ) -> ChatResult: ...


@runtime_checkable
class AsyncChatModel(Protocol):
    """The optional async twin of :class:`ChatModel`."""

    async def acomplete(
        self, messages: Sequence[Mapping[str, object]], *, max_tokens: int | None = None
    ) -> ChatResult: ...


def _import_sdk(name: str, owner: str) -> ModuleType:
    try:
        if name == "openai":
            import openai

            return openai
        import anthropic

        return anthropic
    except ImportError as exc:
        raise ConfigError(needs_extra(f"{owner} (the {name} SDK, not installed)", name)) from exc


def _check_common(owner: str, model: str, timeout: float, max_retries: int) -> None:
    if not isinstance(model, str) or not model.strip():
        raise ConfigError(f"{owner}: model must be a non-empty model name, got {model!r}")
    if not timeout > 0:
        raise ConfigError(f"{owner}: timeout must be > 0 seconds, got {timeout!r}")
    if not isinstance(max_retries, int) or max_retries < 0:
        raise ConfigError(f"{owner}: max_retries must be an int >= 0, got {max_retries!r}")


def _message_dicts(owner: str, messages: Sequence[Mapping[str, object]]) -> list[dict[str, object]]:
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise InvalidMessageError(f"{owner}: messages must be a list of message dicts")
    if not messages:
        raise InvalidMessageError(f"{owner}: messages is empty")
    out: list[dict[str, object]] = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or "role" not in m:
            raise InvalidMessageError(f"{owner}: not a message dict with a role", index=i)
        out.append(dict(m))
    return out


def _max_tokens(owner: str, value: int | None, default: int | None) -> int | None:
    chosen = default if value is None else value
    if chosen is not None and (not isinstance(chosen, int) or chosen < 1):
        raise ConfigError(f"{owner}: max_tokens must be an int >= 1, got {chosen!r}")
    return chosen


def _without_openai_call_type(messages: list[Message]) -> list[Message]:
    """Drop OpenAI's ``"type": "function"`` from tool calls: Anthropic blocks are "tool_use"."""
    out = []
    for msg in messages:
        if any("type" in c.extra for c in msg.tool_calls):
            calls = tuple(
                replace(c, extra={k: v for k, v in c.extra.items() if k != "type"})
                for c in msg.tool_calls
            )
            msg = replace(msg, tool_calls=calls)
        out.append(msg)
    return out


_Owner = TypeVar("_Owner", bound="_ClientOwner")


class _ClientOwner:
    """Shared lifecycle: lazily built sync/async SDK clients, closable, usable with ``with``.

    The async client belongs to the event loop it was built on (its connection pool does): a
    call from another loop (a second ``asyncio.run``) builds a fresh one."""

    _client: Any
    _async_client: Any
    _async_loop: asyncio.AbstractEventLoop | None = None

    def _async_for_loop(self, build: Callable[[], Any]) -> Any:
        loop = asyncio.get_running_loop()
        if self._async_client is None or self._async_loop is not loop:
            self._async_client = build()
            self._async_loop = loop
        return self._async_client

    def close(self) -> None:
        """Close the sync SDK client (the async one is closed by :meth:`aclose`)."""
        if self._client is not None:
            self._client.close()
            self._client = None

    async def aclose(self) -> None:
        if self._async_client is not None:
            if self._async_loop is asyncio.get_running_loop():
                await self._async_client.close()
            self._async_client = None
            self._async_loop = None

    def __enter__(self: _Owner) -> _Owner:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class OpenAIChatModel(_ClientOwner):
    """Chat Completions through the official ``openai`` SDK.

    ``api_key`` defaults to ``OPENAI_API_KEY``; when neither is set and a ``base_url`` is given
    (a local server), ``"not-needed"`` is sent. ``max_tokens`` defaults to None (not sent: the
    server decides). ``max_tokens_param="max_completion_tokens"`` is for OpenAI reasoning models,
    which reject ``max_tokens``; ``extra_body`` is merged into every request (e.g. vLLM's
    ``{"chat_template_kwargs": {"enable_thinking": False}}``).
    """

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        temperature: float | None = 0.0,
        max_tokens: int | None = None,
        max_tokens_param: Literal["max_tokens", "max_completion_tokens"] = "max_tokens",
        extra_body: Mapping[str, JSONLike] | None = None,
    ) -> None:
        _check_common("OpenAIChatModel", model, timeout, max_retries)
        self._sdk = _import_sdk("openai", "OpenAIChatModel")
        if api_key is None:
            api_key = os.environ.get("OPENAI_API_KEY") or None
        if api_key is None:
            if base_url is None and not os.environ.get("OPENAI_BASE_URL"):
                raise ConfigError(
                    "OpenAIChatModel: no api_key given and OPENAI_API_KEY is not set "
                    "(for a local OpenAI-compatible server pass base_url=...)"
                )
            api_key = LOCAL_API_KEY
        if max_tokens_param not in ("max_tokens", "max_completion_tokens"):
            raise ConfigError(f"OpenAIChatModel: unknown max_tokens_param {max_tokens_param!r}")
        self.model = model
        self.base_url = base_url
        self.timeout = timeout
        self.max_retries = max_retries
        self.temperature = temperature
        self.max_tokens = _max_tokens("OpenAIChatModel", max_tokens, None)
        self.max_tokens_param = max_tokens_param
        self.extra_body = dict(extra_body or {})
        self._api_key = api_key
        self._client = None
        self._async_client = None

    def __repr__(self) -> str:
        return f"OpenAIChatModel(model={self.model!r}, base_url={self.base_url!r})"

    def _client_kwargs(self) -> dict[str, Any]:
        return {
            "api_key": self._api_key,
            "base_url": self.base_url,
            "timeout": self.timeout,
            "max_retries": self.max_retries,
        }

    def _request(
        self, messages: Sequence[Mapping[str, object]], max_tokens: int | None
    ) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": _message_dicts("OpenAIChatModel", messages),
        }
        limit = _max_tokens("OpenAIChatModel", max_tokens, self.max_tokens)
        if limit is not None:
            kwargs[self.max_tokens_param] = limit
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        if self.extra_body:
            kwargs["extra_body"] = dict(self.extra_body)
        return kwargs

    @staticmethod
    def _result(response: Any) -> ChatResult:
        choices = getattr(response, "choices", None) or []
        text = ""
        stop = None
        if choices:
            text = getattr(choices[0].message, "content", None) or ""
            stop = getattr(choices[0], "finish_reason", None)
        usage = getattr(response, "usage", None)
        return ChatResult(
            text=text,
            input_tokens=getattr(usage, "prompt_tokens", None) if usage is not None else None,
            output_tokens=(
                getattr(usage, "completion_tokens", None) if usage is not None else None
            ),
            model=getattr(response, "model", None),
            stop_reason=stop,
        )

    def complete(
        self, messages: Sequence[Mapping[str, object]], *, max_tokens: int | None = None
    ) -> ChatResult:
        kwargs = self._request(messages, max_tokens)
        if self._client is None:
            self._client = self._sdk.OpenAI(**self._client_kwargs())
        return self._result(self._client.chat.completions.create(**kwargs))

    async def acomplete(
        self, messages: Sequence[Mapping[str, object]], *, max_tokens: int | None = None
    ) -> ChatResult:
        kwargs = self._request(messages, max_tokens)
        client = self._async_for_loop(lambda: self._sdk.AsyncOpenAI(**self._client_kwargs()))
        return self._result(await client.chat.completions.create(**kwargs))


class AnthropicChatModel(_ClientOwner):
    """The Messages API through the official ``anthropic`` SDK.

    OpenAI-format input is converted with :func:`contextfold.core.wire.to_anthropic`: system and
    developer messages become ``system=``, tool calls/results become tool_use/tool_result
    blocks, same-role neighbours are merged. ``api_key`` defaults to the SDK's own resolution
    (``ANTHROPIC_API_KEY`` ...); with a ``base_url`` and no key anywhere, ``"not-needed"`` is sent.
    ``input_tokens`` of the result includes cache reads and writes.

    ``temperature`` defaults to None (not sent): anthropic SDK 2.x speaks API version
    2026-10-21, which rejects ``temperature``/``top_p``/``top_k`` with a 400 on every model. Set
    it only for servers that accept it (older API versions, Anthropic-compatible local servers);
    it is then sent as a raw body field.
    """

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        temperature: float | None = None,
        max_tokens: int = 2048,
    ) -> None:
        _check_common("AnthropicChatModel", model, timeout, max_retries)
        self._sdk = _import_sdk("anthropic", "AnthropicChatModel")
        if (
            api_key is None
            and base_url is not None
            and not os.environ.get("ANTHROPIC_API_KEY")
            and not os.environ.get("ANTHROPIC_AUTH_TOKEN")
        ):
            api_key = LOCAL_API_KEY
        self.model = model
        self.base_url = base_url
        self.timeout = timeout
        self.max_retries = max_retries
        self.temperature = temperature
        limit = _max_tokens("AnthropicChatModel", max_tokens, None)
        assert limit is not None
        self.max_tokens: int = limit
        self._api_key = api_key
        self._client = None
        self._async_client = None

    def __repr__(self) -> str:
        return f"AnthropicChatModel(model={self.model!r}, base_url={self.base_url!r})"

    def _client_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"timeout": self.timeout, "max_retries": self.max_retries}
        if self._api_key is not None:
            kwargs["api_key"] = self._api_key
        if self.base_url is not None:
            kwargs["base_url"] = self.base_url
        return kwargs

    def _request(
        self, messages: Sequence[Mapping[str, object]], max_tokens: int | None
    ) -> dict[str, Any]:
        dicts = _message_dicts("AnthropicChatModel", messages)
        system, converted = to_anthropic(_without_openai_call_type(messages_from_openai(dicts)))
        if not converted:
            raise InvalidMessageError(
                "AnthropicChatModel: only system messages given; the Messages API needs at "
                "least one user message"
            )
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": converted,
            "max_tokens": _max_tokens("AnthropicChatModel", max_tokens, self.max_tokens),
        }
        if system:
            kwargs["system"] = system
        if self.temperature is not None:
            # Not a parameter of anthropic SDK 2.x (API version 2026-10-21 rejects sampling
            # parameters); sent raw for older API versions and Anthropic-compatible servers.
            kwargs["extra_body"] = {"temperature": self.temperature}
        return kwargs

    @staticmethod
    def _result(response: Any) -> ChatResult:
        parts = [
            block.text
            for block in getattr(response, "content", None) or []
            if getattr(block, "type", None) == "text"
        ]
        usage = getattr(response, "usage", None)
        input_tokens = None
        output_tokens = None
        if usage is not None:
            base = getattr(usage, "input_tokens", None)
            if base is not None:
                input_tokens = (
                    base
                    + (getattr(usage, "cache_creation_input_tokens", None) or 0)
                    + (getattr(usage, "cache_read_input_tokens", None) or 0)
                )
            output_tokens = getattr(usage, "output_tokens", None)
        model = getattr(response, "model", None)
        return ChatResult(
            text="".join(parts),
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            model=str(model) if model is not None else None,
            stop_reason=getattr(response, "stop_reason", None),
        )

    def complete(
        self, messages: Sequence[Mapping[str, object]], *, max_tokens: int | None = None
    ) -> ChatResult:
        kwargs = self._request(messages, max_tokens)
        if self._client is None:
            self._client = self._sdk.Anthropic(**self._client_kwargs())
        return self._result(self._client.messages.create(**kwargs))

    async def acomplete(
        self, messages: Sequence[Mapping[str, object]], *, max_tokens: int | None = None
    ) -> ChatResult:
        kwargs = self._request(messages, max_tokens)
        client = self._async_for_loop(lambda: self._sdk.AsyncAnthropic(**self._client_kwargs()))
        return self._result(await client.messages.create(**kwargs))


__all__ = [
    "LOCAL_API_KEY",
    "AnthropicChatModel",
    "AsyncChatModel",
    "ChatModel",
    "ChatResult",
    "OpenAIChatModel",
]
