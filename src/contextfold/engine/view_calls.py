"""The facade's calls on the view (a mixin of :class:`~contextfold.ContextManager`):
``prepare`` rendered in a wire format, the current view's messages and tokens. Each one runs
under the session's lock and reads the open session ``_ctx``."""

from __future__ import annotations

from typing import Literal, overload

from ..errors import ConfigError
from ..jsontypes import JSON  # noqa: F401 (for get_type_hints of OpenAIView)
from ..providers.limits import LearnedWindow
from .context import SessionContext
from .prepare import PreparedView, ToolSchemas
from .surface import AnthropicView, OpenAIView, ViewMessages

Format = Literal["openai", "anthropic"]


class ViewCalls:
    """``prepare`` over the facade's :meth:`prepare_view`, and the view as it stands."""

    _ctx: SessionContext

    def _fresh(self) -> None:
        raise NotImplementedError  # the facade's: reload after a write that could not

    def prepare_view(self, *, tools: ToolSchemas | None = None) -> PreparedView:
        raise NotImplementedError  # the facade's

    @overload
    def prepare(
        self,
        *,
        tools: ToolSchemas | None = None,
        format: Literal["openai"] = "openai",
        copy: bool = False,
    ) -> OpenAIView: ...

    @overload
    def prepare(
        self,
        *,
        tools: ToolSchemas | None = None,
        format: Literal["anthropic"],
        copy: bool = False,
    ) -> AnthropicView: ...

    def prepare(
        self,
        *,
        tools: ToolSchemas | None = None,
        format: Format = "openai",
        copy: bool = False,
    ) -> OpenAIView | AnthropicView:
        """The view to send now: a list of OpenAI dicts, or for ``format="anthropic"`` a dict
        ``{"system": ..., "messages": [...]}`` ready for ``client.messages.create(**view)``.

        OpenAI dicts are cached per message and shared between calls, which keeps a turn
        without compaction O(new messages); treat them as read-only or pass ``copy=True``."""
        if format not in ("openai", "anthropic"):
            raise ConfigError(f"format must be 'openai' or 'anthropic', got {format!r}")
        with self._ctx.units.lock:
            view = self.prepare_view(tools=tools)
            return view.anthropic() if format == "anthropic" else view.openai(copy=copy)

    @property
    def view_messages(self) -> ViewMessages:
        """The current view as neutral messages (no compaction is run). A property since the
        public surface was made consistent; ``cm.view_messages()`` still works (deprecated)."""
        with self._ctx.units.lock:
            self._fresh()
            return ViewMessages(self._ctx.view.view_messages())

    @property
    def view_tokens(self) -> int:
        """Estimated (calibrated) tokens of the current view."""
        return self._ctx.compactor.view_tokens()

    def _schema_tokens(self, tools: ToolSchemas | None) -> int:
        return self._ctx.schema_tokens(tools)

    def _set_window(self, learned: LearnedWindow | None) -> None:
        self._ctx.set_window(learned)


__all__ = ["ViewCalls"]
