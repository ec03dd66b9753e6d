"""The facade's calls that add to the history in another form (a mixin of
:class:`~contextfold.ContextManager`): one message, a model's response, Anthropic messages,
the caller's own rewrite. Each one converts under the session's lock and stores through the
facade's :meth:`add_many` (one unit of work) or :mod:`contextfold.engine.client_rewrite`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ..core.messages import Message
from ..jsontypes import JSONLike
from . import client_rewrite, ingest
from .context import SessionContext
from .ingest import MessageInput


class IngestCalls:
    """``add``, ``add_response``, ``add_anthropic`` and ``rewrite`` of the open session."""

    _ctx: SessionContext

    def _fresh(self) -> None:
        raise NotImplementedError  # the facade's: reload after a write that could not

    def add_many(self, messages: Iterable[MessageInput]) -> list[Message]:
        raise NotImplementedError  # the facade's

    def add(self, message: MessageInput) -> Message:
        """Append one message (OpenAI dict or Message). Validated before anything is written.

        A dict with Anthropic ``tool_use`` (assistant) or ``tool_result`` (user) blocks is
        converted; a user turn with several tool results becomes several tool messages, and the
        last one is returned (``add_many`` returns them all)."""
        return self.add_many([message])[-1]

    def rewrite(
        self,
        retract: Sequence[int],
        messages: Iterable[MessageInput] = (),
        *,
        note: Mapping[str, JSONLike] | None = None,
    ) -> list[Message]:
        """The caller rewrote its own conversation (summarized old turns, moved or refreshed
        messages, dropped what it no longer needs): the history messages at ``retract``
        leave the view for good and ``messages`` are appended, all or nothing, in one unit.
        Nothing is deleted: the retracted messages stay in the history (``history``,
        search, export) and a ``rewrite`` event records which were taken out, when, and
        ``note`` (a JSON object: why, what replaced them). Returns the messages added."""
        with self._ctx.units.lock:
            self._fresh()
            return client_rewrite.rewrite(self._ctx, retract, messages, note or {})

    def add_response(self, response: object, *, choice: int = 0) -> Message:
        """Record the assistant turn of a model's response: an OpenAI ``ChatCompletion`` (its
        ``choice``-th message), an OpenAI Responses API ``Response`` or an Anthropic
        ``Message`` - SDK objects or their dicts. Tool calls and Anthropic thinking blocks are
        kept exactly; see :mod:`contextfold.providers.responses`. Usage is not reported here (``call``
        does it; otherwise ``report_usage(response=...)``)."""
        with self._ctx.units.lock:
            self._fresh()
            return self.add_many([ingest.from_response(self._ctx, response, choice)])[0]

    def add_anthropic(
        self,
        messages: Mapping[str, object] | Sequence[Mapping[str, object]],
        *,
        system: str | Sequence[Mapping[str, object]] | None = None,
    ) -> list[Message]:
        """Append Anthropic Messages API messages (one dict or a list; ``system`` apart), as
        :func:`contextfold.core.wire.from_anthropic` converts them. Returns the messages added."""
        with self._ctx.units.lock:
            self._fresh()
            return self.add_many(ingest.from_anthropic_messages(self._ctx, messages, system))

    def _uuid_for(self, position: int) -> str:
        return self._ctx.uuid_for(position)


__all__ = ["IngestCalls"]
