"""Types of ContextManager's public surface.

The rule the manager follows: **properties are cheap reads of in-memory state** (``history``,
``view_messages``, ``view_tokens``, ``window``, ``last_record``, ``last_prepare``, ``state``);
**methods do work or read from disk** (``prepare``, ``compact``, ``records()``, ``offloaded()``,
``restore()`` ...). :class:`ViewMessages` keeps the old method form ``cm.view_messages()`` working,
with a DeprecationWarning.
"""

from __future__ import annotations

import warnings
from typing import TypedDict

from ..core.messages import Message
from ..jsontypes import JSON, JSONObject  # noqa: F401 (JSON: for get_type_hints)


class _AnthropicViewBase(TypedDict):
    messages: list[JSONObject]


class AnthropicView(_AnthropicViewBase, total=False):
    """``prepare(format="anthropic")``: keyword arguments for ``client.messages.create``."""

    system: str | list[JSONObject]


#: ``prepare(format="openai")``: Chat Completions message dicts.
OpenAIView = list[JSONObject]


class ViewMessages(list[Message]):
    """The view as neutral messages (a plain list). Calling it - the method form
    ``cm.view_messages()`` of earlier versions - still works and warns."""

    def __call__(self) -> list[Message]:
        warnings.warn(
            "ContextManager.view_messages is a property now: use cm.view_messages without ()",
            DeprecationWarning,
            stacklevel=2,
        )
        return list(self)


__all__ = ["AnthropicView", "OpenAIView", "ViewMessages"]
