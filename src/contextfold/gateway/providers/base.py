"""The provider-adapter interface: one wire format of the gateway.

A provider adapter is one subclass of :class:`ProviderAdapter` in its own module of this
package, registered with :func:`contextfold.gateway.providers.register`. The gateway serves
every route an adapter declares; the steps every format shares (the session, the view, the
overflow retry, the gateway's own tools ``recall`` / ``read_offloaded``, the commit that
overlaps the upstream wait, recording the answer) run in
:mod:`contextfold.gateway.providers.rounds` and call the adapter only for what differs.

What an adapter provides
========================

Routes
    ``routes``: a tuple of :class:`RouteSpec` (a Starlette path pattern, its methods, and
    ``turn=False`` for a route forwarded unchanged such as ``count_tokens``).
    :meth:`ProviderAdapter.wants_turn` can send a request of a turn route on unchanged too
    (one pattern serving several actions). :meth:`ProviderAdapter.owns` says whether an
    unknown path or a failed request should get this provider's error shape.

Request
    :meth:`~ProviderAdapter.parse` turns the client's request (:class:`ClientRequest`) into a
    :class:`ParsedRequest`: the neutral :class:`~contextfold.gateway.convert.Conversation`
    (which client object each neutral message came from, so that unchanged messages are
    relayed byte for byte), the model, whether it streams, the client's tools, whether the
    gateway may add its own, and the upstream path. :meth:`~ProviderAdapter.render` builds
    the upstream body from the turn's view (``turn.prepared.items``).
    :meth:`~ProviderAdapter.tool_schemas` gives the gateway's tools in the format's shape from
    their OpenAI function schemas.

Answer (one upstream JSON answer, a ``dict`` in the format's own shape)
    :meth:`~ProviderAdapter.read_answer` checks a whole answer; a streamed round assembles the
    same shape (:meth:`StreamRound.answer`). :meth:`~ProviderAdapter.calls` lists its tool
    calls, :meth:`~ProviderAdapter.neutral_call` turns one into the OpenAI call dict the
    gateway's toolbox answers, :meth:`~ProviderAdapter.continue_payload` appends a round the
    gateway answered itself, :meth:`~ProviderAdapter.kept` / :meth:`~ProviderAdapter.merged`
    carry what the client still sees of such rounds into the final answer,
    :meth:`~ProviderAdapter.without_calls` removes the gateway's calls when the client's own
    calls stand beside them, :meth:`~ProviderAdapter.recorded` is the assistant message
    stored, :meth:`~ProviderAdapter.input_tokens` what the upstream counted.

Stream
    :meth:`~ProviderAdapter.stream_round` returns a :class:`StreamRound` for each upstream
    stream of the turn (the first, then one per continuation): it assembles the events, says
    which event starts what must be held back until the round ends (a tool call that may be
    the gateway's, the answer's end), relays the others (the upstream's bytes unchanged
    whenever possible) and rewrites the held ones at the end.

Errors
    :meth:`~ProviderAdapter.error_body` / :meth:`~ProviderAdapter.error_event`: the
    gateway's own errors in the provider's shape, so a client's SDK raises its usual error;
    :meth:`~ProviderAdapter.overflow_body`: a view that cannot fit, worded as the provider's
    own context overflow so that the client's fallback (its own compaction) runs.

Adding a provider is one module with one subclass and one ``register`` call in
``providers/__init__.py``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from ...core.messages import Message
from ...jsontypes import JSON, JSONObject
from ..sse import SSEEvent, encode
from ..turn import RequestError
from ..upstream import error_body

if TYPE_CHECKING:
    from starlette.responses import Response

    from ..convert import Conversation
    from ..pipeline import Pipeline
    from ..turn import Turn
#: a JSON object as the client or the upstream sent it
JSONDict = JSONObject
#: tool calls of an answer, in the format's shape
Calls = Sequence[JSONObject]
#: an event and its data parsed as JSON (None when it is not JSON)
HeldEvent = tuple[SSEEvent, JSON]


@dataclass(frozen=True, slots=True)
class RouteSpec:
    """One route of an adapter: a Starlette path pattern (``{name:path}`` parameters allowed),
    its methods, and whether it is a conversation turn (False: forwarded unchanged)."""

    path: str
    methods: tuple[str, ...] = ("POST",)
    turn: bool = True


@dataclass(frozen=True, slots=True)
class ClientRequest:
    """What the client sent, body parsed (a JSON object) and header names lower-case."""

    path: str
    query: str
    headers: Mapping[str, str]
    body: JSONDict
    path_params: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    """A turn's request in the gateway's terms."""

    conversation: Conversation
    model: str
    stream: bool
    #: the client's tools, in the format's shape (their token cost is budgeted)
    client_tools: list[JSONDict]
    #: the names of the client's tools (the gateway never adds a tool of the same name)
    client_tool_names: frozenset[str]
    #: whether the gateway may add its own tools (``tool_choice`` leaves the model free)
    tools_allowed: bool
    #: the upstream path the turn goes to (the client's query string is added to it)
    upstream_path: str
    #: the body the upstream gets, before the view replaces the conversation in it
    body: JSONDict


class StreamRound(ABC):
    """One upstream stream of a turn (see the module docstring)."""

    @abstractmethod
    def add(self, event: SSEEvent, obj: JSON) -> None:
        """Assemble one upstream event (``obj``: its data as JSON, None when not JSON)."""

    @abstractmethod
    def holds(self, obj: JSON) -> bool:
        """Whether this event starts what is held back until the round ends."""

    @abstractmethod
    def relay(self, event: SSEEvent, obj: JSON) -> bytes | None:
        """The bytes passed on now for an event not held (None: dropped)."""

    @abstractmethod
    def answer(self) -> JSONDict:
        """The answer assembled so far, in the shape of :meth:`ProviderAdapter.read_answer`."""

    @abstractmethod
    def complete(self) -> bool:
        """Whether the round ended with a whole answer (no error event, not cut off)."""

    @abstractmethod
    def tail(self, held: Sequence[HeldEvent], mine: Sequence[JSONDict], others: bool) -> bytes:
        """The held events as the client gets them: the gateway's calls ``mine`` removed
        (``others``: the client's own calls stand beside them), indexes and the stop reason
        fixed, earlier rounds' parts counted."""

    @abstractmethod
    def input_tokens(self) -> int | None:
        """The input tokens the upstream reported for this round."""


class ProviderAdapter(ABC):
    """One wire format (see the module docstring for the whole contract)."""

    #: the format's name: ``Conversation.provider``, session keys, logs
    name: ClassVar[str]
    #: the wire the gateway's upstream summarizer speaks for sessions of this format
    #: (``"openai"`` Chat Completions or ``"anthropic"`` Messages)
    summary_format: ClassVar[str] = "openai"
    #: the routes the gateway serves for this format
    routes: ClassVar[tuple[RouteSpec, ...]] = ()

    # ------------------------------------------------------------------ routing
    def owns(self, path: str, headers: Mapping[str, str]) -> bool:
        """Whether a request to ``path`` (known route or not) speaks this format."""
        return any(path.startswith(_static_prefix(r.path)) for r in self.routes)

    def wants_turn(self, request: ClientRequest) -> bool:
        """Whether a request on a turn route is a conversation turn (False: forwarded)."""
        return True

    # ------------------------------------------------------------------ request
    @abstractmethod
    def parse(self, request: ClientRequest) -> ParsedRequest:
        """The request in the gateway's terms; raise ``RequestError(400, ...)`` on bad input."""

    @abstractmethod
    def render(self, turn: Turn) -> JSONDict:
        """The upstream body for the turn's view (the gateway's tools added when
        ``turn.gateway_tools`` names some; their schemas are in ``turn.prepared.tools``)."""

    @abstractmethod
    def tool_schemas(self, openai_schemas: Sequence[JSONDict]) -> list[JSONDict]:
        """The gateway's tools in this format, from their OpenAI function schemas."""

    def parsed(
        self, request: ClientRequest, conv: Conversation, upstream_path: str, tools_allowed: bool
    ) -> ParsedRequest:
        """A :class:`ParsedRequest` for a body that holds ``model``, ``stream`` and ``tools``
        (a list of objects) at its top level, as most formats do."""
        body = request.body
        listed = body.get("tools") or []
        if not isinstance(listed, list) or not all(isinstance(t, dict) for t in listed):
            raise RequestError(400, "tools: Input should be a valid list of tool objects")
        tools = [t for t in listed if isinstance(t, dict)]
        model = body.get("model")
        return ParsedRequest(
            conversation=conv,
            model=model if isinstance(model, str) else "",
            stream=body.get("stream") is True,
            client_tools=tools,
            client_tool_names=frozenset(self.tool_name(t) for t in tools),
            tools_allowed=tools_allowed,
            upstream_path=upstream_path,
            body=body,
        )

    def tool_name(self, tool: Mapping[str, object]) -> str:
        """A tool definition's name."""
        fn = tool.get("function")
        if isinstance(fn, Mapping):
            return str(fn.get("name", ""))
        return str(tool.get("name", ""))

    async def side_request(self, pipe: Pipeline, request: ClientRequest) -> Response | None:
        """A request of a turn route that :meth:`wants_turn` declined but that needs more than
        forwarding (Gemini's JSON-mode side requests are fitted into the window); None:
        forwarded unchanged."""
        return None

    def recorded_in(self, turn: Turn, answer: JSONDict) -> Message:
        """The assistant message stored for ``turn``'s answer: :meth:`recorded` unless the
        format's neutral form depends on the conversation (Gemini's call ids do)."""
        return self.recorded(answer)

    def remember(self, turn: Turn, answer: JSONDict) -> None:
        """Called once a whole answer reached the client (the Responses adapter keeps it for
        ``previous_response_id``). Does nothing by default."""
        return None

    # ------------------------------------------------------------------ answers
    @abstractmethod
    def read_answer(self, data: JSON) -> JSONDict:
        """A whole upstream answer checked (``RequestError(502, ...)`` when unreadable)."""

    @abstractmethod
    def calls(self, answer: JSONDict) -> list[JSONDict]:
        """The answer's tool calls, in the format's shape, in order."""

    def call_name(self, call: Mapping[str, object]) -> str:
        fn = call.get("function")
        if isinstance(fn, Mapping):
            return str(fn.get("name", ""))
        return str(call.get("name", ""))

    @abstractmethod
    def neutral_call(self, call: JSONDict) -> JSONDict:
        """An OpenAI tool-call dict (``id``, ``function.name``, ``function.arguments``)."""

    @abstractmethod
    def continue_payload(
        self, payload: JSONDict, answer: JSONDict, mine: Calls, results: Sequence[str]
    ) -> None:
        """Append the answer and the gateway's tool results to ``payload`` (in place)."""

    @abstractmethod
    def kept(self, answer: JSONDict, mine: Sequence[JSONDict]) -> JSON:
        """What the client keeps of a round the gateway answered and continued."""

    @abstractmethod
    def merged(self, kept: Sequence[JSON], answer: JSONDict) -> JSONDict:
        """The final answer with the earlier rounds' kept parts before its own."""

    @abstractmethod
    def without_calls(self, answer: JSONDict, mine: Sequence[JSONDict], others: bool) -> JSONDict:
        """The answer without the gateway's calls (stop reason fixed when none are left)."""

    @abstractmethod
    def recorded(self, answer: JSONDict) -> Message:
        """The assistant message stored for the answer (``InvalidMessageError`` if bad)."""

    @abstractmethod
    def input_tokens(self, answer: JSONDict) -> int | None:
        """The input tokens the upstream reported."""

    @abstractmethod
    def stream_round(
        self, turn: Turn, previous: StreamRound | None, kept: Sequence[JSON]
    ) -> StreamRound:
        """A new upstream stream of ``turn`` (``previous``: the round before, if any;
        ``kept``: what the client kept of the rounds continued so far)."""

    # ------------------------------------------------------------------ errors
    def error_body(self, status: int, message: str, kind: str | None = None) -> JSONDict:
        """The gateway's own error in this format's shape (OpenAI's by default)."""
        return error_body("openai", status, message, kind)

    def error_event(
        self, status: int, message: str, kind: str | None = None, body: JSONDict | None = None
    ) -> bytes:
        """An error event ending a client's stream (``body``: the upstream's own error)."""
        return encode(body or self.error_body(status, message, kind))

    def overflow_body(self, need: int | None, window: int | None, detail: str) -> JSONDict:
        """The 400 body when even the smallest view does not fit the window (``need`` and
        ``window`` in tokens when known): worded as the provider words its own overflow, so
        a client's fallback (its own compaction) runs. OpenAI Chat Completions' by default."""
        message = (
            f"This model's maximum context length is {window or 0} tokens. However, your "
            f"messages resulted in {need or 0} tokens. Please reduce the length of the "
            f"messages. (contextfold: {detail})"
        )
        return {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        }


def _static_prefix(pattern: str) -> str:
    return pattern.split("{", 1)[0]


def usage_tokens(answer: Mapping[str, object] | None, key: str) -> int | None:
    """``answer["usage"][key]`` when it is an int."""
    usage = answer.get("usage") if answer is not None else None
    value = usage.get(key) if isinstance(usage, Mapping) else None
    return value if isinstance(value, int) else None


def as_int(value: JSON) -> int:
    """``int(value)`` for a number or a numeric string as the wire sent it (``ValueError`` for
    other text, ``TypeError`` for null, a list or an object, as :class:`int` raises)."""
    if isinstance(value, int | float | str):
        return int(value)
    raise TypeError(f"int() argument must be a number or a string, not {type(value).__name__}")


def gateway_tools_for(turn: Turn, adapter: ProviderAdapter) -> list[JSONDict]:
    """The gateway's tool definitions the turn adds (in the adapter's shape)."""
    if not turn.gateway_tools:
        return []
    return [t for t in turn.prepared.tools if adapter.tool_name(t) in turn.gateway_tools]


__all__ = [
    "Calls",
    "ClientRequest",
    "HeldEvent",
    "JSONDict",
    "ParsedRequest",
    "ProviderAdapter",
    "RouteSpec",
    "StreamRound",
    "as_int",
    "gateway_tools_for",
    "usage_tokens",
]
