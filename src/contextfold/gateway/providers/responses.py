"""OpenAI Responses (``POST /v1/responses``, streamed or whole), as Codex CLI speaks it.

``input`` items of every kind are stored and the unchanged ones relayed as the client sent
them (``reasoning`` items with their ``encrypted_content``, compaction items, calls of every
kind, see :mod:`.responses_wire`); every other field (``store``, ``include``,
``prompt_cache_key``, ``reasoning``, ``text``, ...) goes upstream unchanged. A request that
continues an earlier response by ``previous_response_id`` is resolved from the responses this
gateway relayed (the whole conversation goes upstream as one view); an id it does not know is
left for the upstream to resolve. The gateway's own tools are function tools here.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from ...core.messages import Message
from ...errors import InvalidMessageError
from ...jsontypes import as_list
from ..sse import SSEEvent, encode
from ..turn import RequestError, Turn
from .base import (
    Calls,
    ClientRequest,
    HeldEvent,
    JSONDict,
    ParsedRequest,
    ProviderAdapter,
    RouteSpec,
    StreamRound,
    gateway_tools_for,
    usage_tokens,
)
from .responses_wire import CALL_TYPES, output_message, parse_responses, render_responses

PATH = "/v1/responses"
#: responses remembered for ``previous_response_id`` (oldest forgotten first)
REMEMBERED = 512
#: ... and at most this many items in all
REMEMBERED_ITEMS = 100_000
_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


def _tools_allowed(body: Mapping[str, Any]) -> bool:
    choice = body.get("tool_choice")
    return choice is None or choice == "auto"


def _ids(calls: Calls) -> set[Any]:
    return {c.get("call_id") for c in calls}


def _output(answer: JSONDict) -> list[Any]:
    output = answer.get("output")
    return output if isinstance(output, list) else []


def _is_call(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") in CALL_TYPES


class ResponsesAdapter(ProviderAdapter):
    name = "responses"
    summary_format = "openai"
    routes = (
        RouteSpec(PATH),
        RouteSpec(PATH + "/input_tokens", turn=False),
        RouteSpec(PATH + "/compact", turn=False),
        RouteSpec(PATH + "/{response_id}", methods=("GET",), turn=False),
    )

    def __init__(self) -> None:
        #: response id -> the conversation's items up to and with that response's output
        self._history: OrderedDict[str, list[Any]] = OrderedDict()
        self._items = 0
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ request
    def parse(self, request: ClientRequest) -> ParsedRequest:
        body = request.body
        items = body.get("input")
        previous = body.get("previous_response_id")
        if isinstance(previous, str):
            with self._lock:
                known = self._history.get(previous)
            if known is not None:  # the whole conversation goes upstream as one view
                new = [{"role": "user", "content": items}] if isinstance(items, str) else items
                items = [*known, *(new if isinstance(new, list) else [])]
                body = {k: v for k, v in body.items() if k != "previous_response_id"}
                body["input"] = items
        try:
            conv = parse_responses(items, body.get("instructions"))
        except InvalidMessageError as exc:
            where = f"input[{exc.index}]" if exc.index is not None else "input"
            raise RequestError(400, f"{where}: {exc.problem}") from None
        parsed = self.parsed(request, conv, PATH, _tools_allowed(body))
        return dataclasses.replace(parsed, body=body)

    def render(self, turn: Turn) -> JSONDict:
        payload = dict(turn.body)
        payload["input"] = render_responses(turn.prepared.items, turn.conv)
        ours = [t for t in gateway_tools_for(turn, self) if t.get("type") == "function"]
        if ours:
            payload["tools"] = [*as_list(turn.body.get("tools")), *ours]  # (parse: a list)
        return payload

    def tool_schemas(self, openai_schemas: Sequence[JSONDict]) -> list[JSONDict]:
        out = []
        for schema in openai_schemas:
            fn = schema.get("function") or {}
            out.append(
                {
                    "type": "function",
                    "name": fn.get("name", ""),
                    "description": fn.get("description", ""),
                    "parameters": fn.get("parameters") or {"type": "object"},
                    "strict": False,
                }
            )
        return out

    def remember(self, turn: Turn, answer: JSONDict) -> None:
        """Keep the conversation up to this response for a later ``previous_response_id``
        (only when the client asked the upstream to store it: with ``store: false`` a client
        resends everything itself)."""
        rid = answer.get("id")
        if not isinstance(rid, str) or turn.body.get("store") is False:
            return
        items = [item for unit in turn.conv.raw for item in as_list(unit)] + _output(answer)
        with self._lock:
            self._history[rid] = items
            self._items += len(items)
            while self._history and (
                len(self._history) > REMEMBERED or self._items > REMEMBERED_ITEMS
            ):
                _, gone = self._history.popitem(last=False)
                self._items -= len(gone)

    # ------------------------------------------------------------------ answers
    def read_answer(self, data: Any) -> JSONDict:
        if isinstance(data, dict) and isinstance(data.get("output"), list):
            return data
        raise RequestError(502, "the upstream answered with an unreadable response")

    def calls(self, answer: JSONDict) -> list[JSONDict]:
        return [item for item in _output(answer) if _is_call(item)]

    def call_name(self, call: Mapping[str, Any]) -> str:
        if call.get("type") == "function_call":
            return str(call.get("name", ""))
        return ""  # custom and shell calls are never the gateway's

    def neutral_call(self, call: JSONDict) -> JSONDict:
        return {
            "id": call.get("call_id", ""),
            "type": "function",
            "function": {"name": call.get("name", ""), "arguments": call.get("arguments", "")},
        }

    def continue_payload(
        self, payload: JSONDict, answer: JSONDict, mine: Calls, results: Sequence[str]
    ) -> None:
        stored = payload.get("store") is not False
        items = [item if stored else _without_id(item) for item in _output(answer)]
        outputs = [
            {"type": "function_call_output", "call_id": c.get("call_id"), "output": r}
            for c, r in zip(mine, results)
        ]
        payload["input"] = [*payload["input"], *items, *outputs]

    def kept(self, answer: JSONDict, mine: Calls) -> Any:
        ids = _ids(mine)
        items = [i for i in _output(answer) if not (_is_call(i) and i.get("call_id") in ids)]
        return {"id": answer.get("id"), "items": items}

    def merged(self, kept: Sequence[Any], answer: JSONDict) -> JSONDict:
        if not kept:
            return answer
        out = dict(answer)
        out["id"] = kept[0]["id"] or answer.get("id")
        out["output"] = [*(i for k in kept for i in k["items"]), *_output(answer)]
        return out

    def without_calls(self, answer: JSONDict, mine: Calls, others: bool) -> JSONDict:
        out = dict(answer)
        out["output"] = self.kept(answer, mine)["items"]
        return out

    def recorded(self, answer: JSONDict) -> Message:
        return output_message(_output(answer))

    def input_tokens(self, answer: JSONDict) -> int | None:
        return usage_tokens(answer, "input_tokens")

    def stream_round(
        self, turn: Turn, previous: StreamRound | None, kept: Sequence[Any]
    ) -> StreamRound:
        prior = [i for k in kept for i in k["items"]]
        if isinstance(previous, _Round):
            return _Round(prior, previous.first_id, previous.next_seq)
        return _Round(prior, None, None)

    def overflow_body(self, need: int | None, window: int | None, detail: str) -> Any:
        message = (
            "Your input exceeds the context window of this model. Please adjust your input "
            f"and try again. (contextfold: {detail})"
        )
        return {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": "input",
                "code": "context_length_exceeded",
            }
        }


def _without_id(item: Any) -> Any:
    if isinstance(item, dict) and "id" in item:
        return {k: v for k, v in item.items() if k != "id"}
    return item


#: the streamed input of a free-form (custom) tool's call
_CUSTOM_DELTA = "response.custom_tool_call_input.delta"


class _Round(StreamRound):
    """One Responses stream. A continuation (after the gateway answered its own calls) sends
    no second ``response.created``; its items come after the ones the client has, their
    ``output_index`` and every ``sequence_number`` continue the first stream's, and the final
    event carries the first response's id and the whole output."""

    def __init__(self, prior: list[Any], first_id: str | None, next_seq: int | None) -> None:
        self.prior = prior
        self.offset = len(prior)
        self._first_id = first_id
        self.continuing = next_seq is not None
        self.next_seq = next_seq or 0
        self.items: dict[int, JSONDict] = {}
        self.args: dict[int, list[str]] = {}
        self.id: str | None = None
        self.final: JSONDict | None = None
        self.failed = False

    @property
    def first_id(self) -> str | None:
        return self._first_id if self._first_id is not None else self.id

    def add(self, event: SSEEvent, obj: Any) -> None:
        if not isinstance(obj, dict):
            return
        kind = obj.get("type", event.event)
        seq = obj.get("sequence_number")
        if not self.continuing and isinstance(seq, int):
            self.next_seq = max(self.next_seq, seq + 1)
        response = obj.get("response")
        if kind == "response.created" and isinstance(response, dict):
            self.id = response.get("id") if isinstance(response.get("id"), str) else None
        elif kind in ("response.output_item.added", "response.output_item.done"):
            item = obj.get("item")
            if isinstance(item, dict):
                self.items[int(obj.get("output_index", len(self.items)))] = dict(item)
        elif kind in ("response.function_call_arguments.delta", _CUSTOM_DELTA):
            idx = int(obj.get("output_index", 0))
            self.args.setdefault(idx, []).append(str(obj.get("delta", "")))
        elif kind in ("response.completed", "response.incomplete") and isinstance(response, dict):
            self.final = response
        elif kind in ("response.failed", "error"):
            self.failed = True

    def holds(self, obj: Any) -> bool:
        if not isinstance(obj, dict):
            return False
        kind = obj.get("type")
        if kind == "response.output_item.added":
            return _is_call(obj.get("item"))
        return kind in _TERMINAL

    def relay(self, event: SSEEvent, obj: Any) -> bytes | None:
        if not self.continuing or not isinstance(obj, dict):
            return event.raw
        if obj.get("type") in ("response.created", "response.in_progress"):
            return None
        return self._encode(event, self._shift(obj, lambda i: i + self.offset))

    def _shift(self, obj: JSONDict, mapper: Any) -> JSONDict | None:
        if "output_index" not in obj:
            return obj
        new = mapper(int(obj["output_index"]))
        return None if new is None else {**obj, "output_index": new}

    def _encode(self, event: SSEEvent, obj: JSONDict | None) -> bytes | None:
        if obj is None:
            return None
        if "sequence_number" in obj:
            obj = {**obj, "sequence_number": self.next_seq}
            self.next_seq += 1
        return encode(obj, event.event or obj.get("type"))

    def _assembled(self) -> list[Any]:
        out = []
        for idx in sorted(self.items):
            item = dict(self.items[idx])
            if item.get("type") == "function_call" and not item.get("arguments"):
                item["arguments"] = "".join(self.args.get(idx, []))
            elif item.get("type") == "custom_tool_call" and not item.get("input"):
                item["input"] = "".join(self.args.get(idx, []))
            out.append(item)
        return out

    def answer(self) -> JSONDict:
        final = dict(self.final or {})
        if not isinstance(final.get("output"), list) or not final["output"]:
            final["output"] = self._assembled()
        final.setdefault("id", self.id)
        return final

    def complete(self) -> bool:
        return self.final is not None and not self.failed

    def tail(self, held: Sequence[HeldEvent], mine: Calls, others: bool) -> bytes:
        if not mine and not self.continuing:
            return b"".join(ev.raw for ev, _ in held)
        ids = _ids(mine)
        drop = {
            i for i, item in self.items.items() if _is_call(item) and item.get("call_id") in ids
        }
        kept = [i for i in sorted(self.items) if i not in drop]
        index_map = {old: self.offset + new for new, old in enumerate(kept)}
        out: list[bytes] = []
        for ev, obj in held:
            if not isinstance(obj, dict):
                out.append(ev.raw)
                continue
            if obj.get("type") in _TERMINAL and isinstance(obj.get("response"), dict):
                obj = {**obj, "response": self._final(obj["response"], drop)}
            data = self._encode(ev, self._shift(obj, index_map.get))
            if data:
                out.append(data)
        return b"".join(out)

    def _final(self, response: JSONDict, drop: set[int]) -> JSONDict:
        items = response.get("output")
        if not isinstance(items, list):
            items = self._assembled()
        ids = {self.items[i].get("call_id") for i in drop}
        own = [i for i in items if not (_is_call(i) and i.get("call_id") in ids)]
        out = {**response, "output": [*self.prior, *own]}
        if self.first_id is not None:
            out["id"] = self.first_id
        return out

    def input_tokens(self) -> int | None:
        return usage_tokens(self.final, "input_tokens")


__all__ = ["PATH", "ResponsesAdapter"]
