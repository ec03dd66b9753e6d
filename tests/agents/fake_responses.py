"""OpenAI's Responses API (``POST /v1/responses``) for the scripted upstream, as Codex CLI uses
it: ``input`` items (messages of every role, ``function_call`` / ``function_call_output``,
``reasoning`` with ``encrypted_content``), streamed as the API's SSE events or answered whole.

Like the real API it answers 400 for an input over the context limit (code
``context_length_exceeded``), for a ``function_call_output`` whose call is not in the input, for
a ``function_call`` left without its output, and for ``encrypted_content`` it did not issue.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.gateway_fake_wire import Call, Received, Reply, _path
from tests.gateway_fakes import FakeUpstream

_ids = itertools.count(1)
PATH = "/v1/responses"


def encrypted_for(text: str) -> str:
    return "enc-" + hashlib.sha256(("fake-responses|" + text).encode()).hexdigest()


def tokens(body: dict[str, Any]) -> int:
    parts = [body.get("input"), body.get("instructions"), body.get("tools")]
    return len(json.dumps(parts, ensure_ascii=False)) // 4


def _error(message: str, code: str | None, param: str | None = "input") -> JSONResponse:
    err = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    return JSONResponse({"error": err}, status_code=400)


def problem(items: list[Any]) -> str | None:
    """The API's own 400 message for broken pairing or foreign encrypted content."""
    calls: list[str] = []
    answered: set[str] = set()
    for item in items:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind in ("function_call", "custom_tool_call"):
            calls.append(str(item.get("call_id")))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            cid = str(item.get("call_id"))
            if cid not in calls:
                return f"No tool call found for function call output with call_id {cid}."
            answered.add(cid)
        elif kind == "reasoning" and item.get("encrypted_content") is not None:
            summary = "".join(str(s.get("text", "")) for s in item.get("summary") or [])
            if item["encrypted_content"] != encrypted_for(summary):
                return f"The encrypted content for item {item.get('id')} could not be verified."
    for cid in calls:
        if cid not in answered:
            return f"No tool output found for function call {cid}."
    return None


def _output(reply: Reply) -> list[dict[str, Any]]:
    n = next(_ids)
    out: list[dict[str, Any]] = []
    if reply.thinking is not None:
        out.append(
            {
                "type": "reasoning",
                "id": f"rs_{n}",
                "summary": [{"type": "summary_text", "text": reply.thinking}],
                "encrypted_content": encrypted_for(reply.thinking),
            }
        )
    if reply.text:
        out.append(
            {
                "type": "message",
                "id": f"msg_{n}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
            }
        )
    for k, (cid, name, args) in enumerate(reply.tool_calls):
        out.append(
            {
                "type": "function_call",
                "id": f"fc_{n}_{k}",
                "call_id": cid,
                "name": name,
                "arguments": json.dumps(args),
                "status": "completed",
            }
        )
    return out


def _response(reply: Reply, model: str, used: int) -> dict[str, Any]:
    return {
        "id": f"resp_{next(_ids)}",
        "object": "response",
        "created_at": 0,
        "status": "completed",
        "model": model,
        "output": _output(reply),
        "usage": {
            "input_tokens": used,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 9,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": used + 9,
        },
    }


def _events(resp: dict[str, Any]) -> list[bytes]:
    seq = itertools.count()
    frames: list[tuple[str, dict[str, Any]]] = []
    start = {**resp, "status": "in_progress", "output": [], "usage": None}
    frames.append(("response.created", {"response": start}))
    for i, item in enumerate(resp["output"]):
        first = {**item, "status": "in_progress"}
        if item["type"] == "message":
            first["content"] = []
        if item["type"] == "function_call":
            first["arguments"] = ""
        frames.append(("response.output_item.added", {"output_index": i, "item": first}))
        if item["type"] == "message":
            text = item["content"][0]["text"]
            for j in range(0, len(text), 16):
                frames.append(
                    (
                        "response.output_text.delta",
                        {
                            "item_id": item["id"],
                            "output_index": i,
                            "content_index": 0,
                            "delta": text[j : j + 16],
                        },
                    )
                )
        if item["type"] == "function_call":
            args = item["arguments"]
            for j in range(0, len(args), 20):
                frames.append(
                    (
                        "response.function_call_arguments.delta",
                        {"item_id": item["id"], "output_index": i, "delta": args[j : j + 20]},
                    )
                )
        frames.append(("response.output_item.done", {"output_index": i, "item": item}))
    frames.append(("response.completed", {"response": resp}))
    return [
        f"event: {name}\ndata: {json.dumps({'type': name, 'sequence_number': next(seq), **data})}\n\n".encode()
        for name, data in frames
    ]


async def _handle(fake: FakeUpstream, request: Request) -> Response:
    body = await request.json()
    headers = {k.lower(): v for k, v in request.headers.items()}
    used = tokens(body)
    path = _path(request)
    items = body.get("input")
    items = (
        [{"type": "message", "role": "user", "content": items}] if isinstance(items, str) else items
    )
    found = problem(items or [])
    if found is None and used > fake.limit:
        fake._record(Received(path, headers, body, used, "overflow"))
        return _error(
            "Your input exceeds the context window of this model. Please adjust your input "
            "and try again.",
            "context_length_exceeded",
        )
    fake._record(Received(path, headers, body, used, found))
    if found is not None:
        return _error(found, None)
    reply = fake._script(request)(Call("responses", body, headers))
    resp = _response(reply, str(body.get("model")), used)
    if body.get("stream"):
        return await fake._stream(request, _events(resp), reply.event_delay)
    return await fake._whole(request, resp)


def serve_responses(fake: FakeUpstream) -> FakeUpstream:
    """Add ``POST /v1/responses`` to a fake upstream (before it starts)."""
    fake.app.router.routes.append(Route(PATH, partial(_handle, fake), methods=["POST"]))
    return fake
