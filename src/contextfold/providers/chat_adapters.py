"""Adapt other chat-model objects to :class:`contextfold.providers.llm.ChatModel`.

:func:`as_chat_model` accepts a ``ChatModel`` (anything with ``complete()``) unchanged and wraps a
LangChain chat model (``langchain_core.language_models.BaseChatModel``: ``ChatOpenAI``,
``ChatAnthropic``, ``ChatOllama``, the fake chat models ...) in :class:`LangChainChatModel`, which
calls ``invoke`` / ``ainvoke``. ``langchain_core`` is imported only when such a model is wrapped.
Anything else is a :class:`~contextfold.errors.ConfigError` that says what is accepted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, TypeGuard

from ..errors import ConfigError
from .llm import ChatModel, ChatResult


class _Runnable(Protocol):
    """What :class:`LangChainChatModel` calls on a LangChain chat model."""

    def invoke(self, input: list[object], /) -> object: ...

    async def ainvoke(self, input: list[object], /) -> object: ...


def _is_langchain_chat_model(obj: object) -> TypeGuard[_Runnable]:
    """True for a LangChain chat model, decided without importing LangChain when it is absent."""
    modules = {cls.__module__.split(".", 1)[0] for cls in type(obj).__mro__}
    if not modules & {"langchain_core", "langchain"}:
        return False
    try:
        from langchain_core.language_models import BaseChatModel
    except ImportError:  # pragma: no cover - a langchain class without langchain_core
        return False
    return isinstance(obj, BaseChatModel)


def _text_of(reply: object) -> str:
    text = getattr(reply, "text", None)
    if isinstance(text, str):  # langchain-core 1.x: a str subclass; 0.3: a method
        return str(text)
    if callable(text):
        value = text()
        return value if isinstance(value, str) else ""
    content = getattr(reply, "content", "")
    if isinstance(content, str):
        return content
    return "".join(
        b.get("text", "")
        for b in content or []
        if isinstance(b, Mapping) and b.get("type") == "text"
    )


class LangChainChatModel:
    """A LangChain chat model seen as a :class:`~contextfold.providers.llm.ChatModel`.

    OpenAI-format message dicts are converted with ``langchain_core.messages.convert_to_messages``.
    ``max_tokens`` is not forwarded: the reply limit is the LangChain model's own setting (each
    integration names and validates it differently). Token counts come from
    ``usage_metadata`` and the stop reason from ``response_metadata`` when the model reports them.
    """

    def __init__(self, model: object) -> None:
        if not _is_langchain_chat_model(model):
            raise ConfigError(f"LangChainChatModel: {model!r} is not a LangChain chat model")
        self.model: _Runnable = model

    def __repr__(self) -> str:
        return f"LangChainChatModel({type(self.model).__name__})"

    @staticmethod
    def _convert(messages: Sequence[Mapping[str, object]]) -> list[object]:
        from langchain_core.messages import convert_to_messages

        return list(convert_to_messages([dict(m) for m in messages]))

    @staticmethod
    def _result(reply: object) -> ChatResult:
        usage = getattr(reply, "usage_metadata", None) or {}
        meta = getattr(reply, "response_metadata", None) or {}
        stop = meta.get("finish_reason") or meta.get("stop_reason")
        model = meta.get("model_name") or meta.get("model")
        return ChatResult(
            text=_text_of(reply),
            input_tokens=usage.get("input_tokens") if isinstance(usage, Mapping) else None,
            output_tokens=usage.get("output_tokens") if isinstance(usage, Mapping) else None,
            model=str(model) if model else None,
            stop_reason=str(stop) if stop else None,
        )

    def complete(
        self, messages: Sequence[Mapping[str, object]], *, max_tokens: int | None = None
    ) -> ChatResult:
        return self._result(self.model.invoke(self._convert(messages)))

    async def acomplete(
        self, messages: Sequence[Mapping[str, object]], *, max_tokens: int | None = None
    ) -> ChatResult:
        return self._result(await self.model.ainvoke(self._convert(messages)))


def _has_complete(model: object) -> TypeGuard[ChatModel]:
    return callable(getattr(model, "complete", None))


def as_chat_model(model: object, owner: str) -> ChatModel:
    """``model`` as a :class:`~contextfold.providers.llm.ChatModel`, or a ConfigError naming ``owner``."""
    if _has_complete(model):
        return model
    if _is_langchain_chat_model(model):
        return LangChainChatModel(model)
    raise ConfigError(
        f"{owner}: {model!r} is not a chat model. Pass a contextfold.providers.llm.ChatModel (an object "
        "with complete(messages, max_tokens=...), e.g. OpenAIChatModel / AnthropicChatModel) or "
        "a LangChain chat model (langchain_core BaseChatModel, e.g. ChatOpenAI(...))"
    )


__all__ = ["LangChainChatModel", "as_chat_model"]
