"""The gateway's wire formats, one provider adapter a module (see :mod:`.base`).

Adding a format: write ``providers/<name>.py`` with a :class:`~.base.ProviderAdapter`
subclass and add it to ``ADAPTERS`` below (or call :func:`register` before the app is built).
"""

from __future__ import annotations

from collections.abc import Mapping

from .base import ClientRequest, ParsedRequest, ProviderAdapter, RouteSpec, StreamRound

#: the adapter classes the gateway serves, in the order their routes are matched
ADAPTERS: list[type[ProviderAdapter]] = []


def register(cls: type[ProviderAdapter]) -> type[ProviderAdapter]:
    """Add an adapter class (usable as a class decorator); registering twice does nothing."""
    if cls not in ADAPTERS:
        ADAPTERS.append(cls)
    return cls


def adapters() -> list[ProviderAdapter]:
    """One instance of every registered adapter (a gateway holds its own)."""
    _load_builtin()
    return [cls() for cls in ADAPTERS]


def adapter_for(
    found: list[ProviderAdapter], path: str, headers: Mapping[str, str]
) -> ProviderAdapter:
    """The adapter whose format a request to ``path`` speaks (an unknown path included):
    the first that owns it, else OpenAI Chat Completions."""
    for adapter in found:
        if adapter.owns(path, headers):
            return adapter
    return next((a for a in found if a.name == "openai"), found[0])


def _load_builtin() -> None:
    from . import anthropic, gemini, openai_chat, responses

    # Gemini first: its /v1/models/{model}:generateContent paths share a prefix with OpenAI's
    register(gemini.GeminiAdapter)
    register(anthropic.AnthropicAdapter)
    register(openai_chat.ChatCompletionsAdapter)
    register(responses.ResponsesAdapter)


__all__ = [
    "ADAPTERS",
    "ClientRequest",
    "ParsedRequest",
    "ProviderAdapter",
    "RouteSpec",
    "StreamRound",
    "adapter_for",
    "adapters",
    "register",
]
