"""The Gemini API's wire shapes for the fake upstream (tests/gateway/gateway_fakes.py): the real 400s
for function calls and responses that do not pair up, for Gemini 3's missing thought
signatures and for an over-long prompt, the 403 of a request without an API key, the JSON
answer of ``generateContent`` and the SSE chunks of ``streamGenerateContent?alt=sse``."""

from __future__ import annotations

import hashlib
import itertools
import json
from typing import Any

from tests.gateway.gateway_fake_wire import Reply

PAIRING = (
    "Please ensure that the number of function response parts is equal to the number of "
    "function call parts of the function call turn."
)
CALL_ORDER = (
    "Please ensure that function call turn comes immediately after a user turn or after a "
    "function response turn."
)
NO_KEY = (
    "Method doesn't allow unregistered callers (callers without established identity). "
    "Please use API Key or other form of API consumer identity to call this API."
)
#: the value Gemini accepts in place of a signature (clients use it for calls they made up)
SKIP_SIGNATURE = "skip_thought_signature_validator"

_ids = itertools.count(1)


def error(code: int, message: str, status: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status}}


def signature(name: str, args: Any) -> str:
    text = f"fake-gemini|{name}|{json.dumps(args, sort_keys=True)}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def gemini_tokens(body: dict[str, Any]) -> int:
    """What the fake model reads: contents, system instruction and tools, characters / 4."""
    parts = [body.get("contents"), body.get("systemInstruction"), body.get("tools")]
    return len(json.dumps(parts, ensure_ascii=False)) // 4


def _fr(part: Any) -> Any:
    return part.get("functionResponse") if isinstance(part, dict) else None


def _fc(part: Any) -> Any:
    return part.get("functionCall") if isinstance(part, dict) else None


def last_function_responses(contents: list[Any]) -> list[tuple[str, str]]:
    """(call id or name, output text) of the function responses in the last content."""
    if not contents or contents[-1].get("role", "user") != "user":
        return []
    out = []
    for part in contents[-1].get("parts") or []:
        fr = _fr(part)
        if isinstance(fr, dict):
            response = fr.get("response")
            text = (
                response["output"]
                if isinstance(response, dict) and isinstance(response.get("output"), str)
                else json.dumps(response)
            )
            out.append((str(fr.get("id") or fr.get("name")), text))
    return out


def _combined(contents: list[Any]) -> list[dict[str, Any]]:
    """Neighbouring contents of one role as one turn, as the API reads them."""
    out: list[dict[str, Any]] = []
    for c in contents:
        role = c.get("role") or "user"
        parts = list(c.get("parts") or [])
        if out and out[-1]["role"] == role:
            out[-1]["parts"].extend(parts)
        else:
            out.append({"role": role, "parts": parts})
    return out


def _active_loop_start(turns: list[dict[str, Any]]) -> int:
    for i in range(len(turns) - 1, -1, -1):
        parts = turns[i]["parts"]
        if turns[i]["role"] == "user" and not any(_fr(p) for p in parts):
            return i
    return 0


def gemini_problem(body: dict[str, Any], model: str) -> str | None:
    """Gemini's own 400 message for this request's contents, or None."""
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        return "* GenerateContentRequest.contents: contents is not specified"
    turns = _combined(contents)
    for i, turn in enumerate(turns):
        calls = [p for p in turn["parts"] if _fc(p)]
        if turn["role"] == "model" and calls:
            prev = turns[i - 1] if i else None
            if prev is not None and prev["role"] == "model":
                return CALL_ORDER
            nxt = turns[i + 1] if i + 1 < len(turns) else None
            answers = [p for p in (nxt or {}).get("parts", []) if _fr(p)]
            if nxt is None or len(answers) != len(calls):
                return PAIRING
        if turn["role"] == "user":
            answers = [p for p in turn["parts"] if _fr(p)]
            prev = turns[i - 1] if i else None
            calls_before = [p for p in (prev or {}).get("parts", []) if _fc(p)]
            if answers and len(answers) != len(calls_before):
                return PAIRING
    return _signature_problem(turns) if model.startswith("gemini-3") else None


def _signature_problem(turns: list[dict[str, Any]]) -> str | None:
    """Gemini 3: the first call of every model turn of the active loop carries the signature
    the model gave it."""
    for turn in turns[_active_loop_start(turns) :]:
        calls = [p for p in turn["parts"] if _fc(p)]
        if turn["role"] != "model" or not calls:
            continue
        first = calls[0]
        fc = first["functionCall"]
        if first.get("thoughtSignature") not in (
            SKIP_SIGNATURE,
            signature(fc.get("name"), fc.get("args") or {}),
        ):
            return (
                "Function call is missing a thought_signature in functionCall parts. "
                "This is required for tools to work correctly, and missing "
                "thought_signature may lead to degraded model performance. Additional "
                f"data, function call `default_api:{fc.get('name')}` , position 1. "
                "Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures "
                "for more details."
            )
    return None


def overflow(tokens: int, limit: int) -> dict[str, Any]:
    return error(
        400,
        f"The input token count ({tokens}) exceeds the maximum number of tokens allowed ({limit}).",
        "INVALID_ARGUMENT",
    )


def _parts(reply: Reply) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    if reply.thinking is not None:
        parts.append({"text": reply.thinking, "thought": True})
    if reply.text:
        parts.append({"text": reply.text})
    for k, (_cid, name, args) in enumerate(reply.tool_calls):
        part: dict[str, Any] = {"functionCall": {"name": name, "args": args}}
        if k == 0:
            part["thoughtSignature"] = signature(name, args)
        parts.append(part)
    return parts


def _usage(tokens: int, done: bool) -> dict[str, Any]:
    out = {"promptTokenCount": tokens, "totalTokenCount": tokens + (9 if done else 0)}
    if done:
        out["candidatesTokenCount"] = 9
    return out


def gemini_response(reply: Reply, model: str, tokens: int) -> dict[str, Any]:
    return {
        "candidates": [
            {
                "content": {"parts": _parts(reply), "role": "model"},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": _usage(tokens, True),
        "modelVersion": model,
        "responseId": f"resp-{next(_ids)}",
    }


def gemini_chunks(reply: Reply, model: str, tokens: int) -> list[dict[str, Any]]:
    """The streamed answer: text in pieces, each function call whole in its own chunk, the
    finish reason and the final usage on the last chunk."""
    rid = f"resp-{next(_ids)}"
    pieces: list[dict[str, Any]] = []
    if reply.thinking is not None:
        pieces.append({"text": reply.thinking, "thought": True})
    for i in range(0, len(reply.text), 16):
        pieces.append({"text": reply.text[i : i + 16]})
    pieces += [p for p in _parts(reply) if "functionCall" in p]
    if not pieces:
        pieces.append({"text": ""})
    chunks = []
    for k, part in enumerate(pieces):
        last = k == len(pieces) - 1
        cand: dict[str, Any] = {"content": {"parts": [part], "role": "model"}, "index": 0}
        if last:
            cand["finishReason"] = "STOP"
        chunks.append(
            {
                "candidates": [cand],
                "usageMetadata": _usage(tokens, last),
                "modelVersion": model,
                "responseId": rid,
            }
        )
    return chunks


def sse(chunks: list[dict[str, Any]]) -> list[bytes]:
    """As Google's servers frame them: ``data: {json}`` and a CRLF blank line."""
    return [f"data: {json.dumps(c)}\r\n\r\n".encode() for c in chunks]
