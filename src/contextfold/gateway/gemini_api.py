"""The Gemini API's request fields apart from the conversation: tools as function
declarations, JSON-mode side requests (and fitting them into the window), usage, error bodies
as Google's APIs return them."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..errors import InvalidMessageError
from ..jsontypes import JSON, JSONObject, as_list, as_object
from .gemini import _objects, field


def declarations(tools: JSON) -> list[JSONObject]:
    """The function declarations of a request's ``tools`` (each Tool's list, flattened)."""
    if tools is None:
        return []
    if not _objects(tools):
        raise InvalidMessageError("tools must be a list of Tool objects")
    out: list[JSONObject] = []
    for k, tool in enumerate(tools):
        decls = field(tool, "functionDeclarations") or []
        if not _objects(decls):
            raise InvalidMessageError(f"tools[{k}].functionDeclarations must be a list of objects")
        out.extend(dict(d) for d in decls)
    return out


def declaration(openai_tool: Mapping[str, JSON]) -> JSONObject:
    """One of the gateway's tools (OpenAI function schema) as a Gemini function declaration."""
    fn = as_object(openai_tool.get("function"))
    out: JSONObject = {"name": fn.get("name", ""), "description": fn.get("description", "")}
    if fn.get("parameters") is not None:
        out["parametersJsonSchema"] = fn["parameters"]
    return out


def with_declarations(tools: JSON, extra: Sequence[JSON]) -> list[JSON]:
    """The client's ``tools`` (a list of Tool objects: the request was parsed) with ``extra``
    declarations added to its first list of them."""
    out: list[JSON] = [dict(t) for t in as_list(tools) if isinstance(t, Mapping)]
    for t in out:
        for key in ("functionDeclarations", "function_declarations"):
            decls = t.get(key) if isinstance(t, dict) else None
            if isinstance(t, dict) and isinstance(decls, list):
                t[key] = [*decls, *extra]
                return out
    out.append({"functionDeclarations": list(extra)})
    return out


def is_side_call(body: Mapping[str, JSON]) -> bool:
    """A JSON-mode request (``responseMimeType: application/json`` or a response schema):
    an agent's side question about the conversation (Gemini CLI's model router, loop and
    next-speaker checks), not a turn of it. Relayed as it is, never stored."""
    config = field(body, "generationConfig")
    if not isinstance(config, Mapping):
        return False
    mime = field(config, "responseMimeType")
    if isinstance(mime, str) and mime.split(";")[0].strip().lower() == "application/json":
        return True
    return (
        field(config, "responseSchema") is not None
        or field(config, "responseJsonSchema") is not None
    )


def input_tokens(usage: object) -> int | None:
    """``usageMetadata.promptTokenCount`` (the prompt as the model read it)."""
    if not isinstance(usage, Mapping):
        return None
    value = field(usage, "promptTokenCount")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "INVALID_ARGUMENT",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def error_body(status: int, message: str) -> JSONObject:
    """An error as Google's APIs return it: ``{"error": {"code", "message", "status"}}``."""
    return {"error": {"code": status, "message": message, "status": _STATUS.get(status, "UNKNOWN")}}


#: what a side request may use of the window (the rest: the answer, and the estimate's error)
SIDE_SHARE = 0.85
_CUT = "\n[... {n} characters left out by contextfold so that this request fits the context window ...]\n"
_KEEP = 400


def estimate_tokens(body: Mapping[str, JSON]) -> int:
    """A generous token estimate of a request (characters / 3 of what the model reads)."""
    parts = [field(body, "contents"), field(body, "systemInstruction"), body.get("tools")]
    return len(json.dumps(parts, ensure_ascii=False)) // 3


@dataclass(frozen=True, slots=True)
class _Leaf:
    """A long string of a request and where it is (``holder[key]``)."""

    holder: JSONObject | list[JSON]
    key: str | int
    text: str

    def replace(self, text: str) -> None:
        if isinstance(self.holder, dict):
            self.holder[str(self.key)] = text
        else:
            self.holder[int(self.key)] = text


def _strings(value: JSON, out: list[_Leaf]) -> None:
    """Every long string leaf below ``value``; signatures, ids and names are never cut."""
    items: Iterable[tuple[str | int, JSON]] = ()
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    for key, inner in items:
        if key in ("thoughtSignature", "thought_signature", "id", "name"):
            continue
        if isinstance(inner, str):
            if len(inner) > 2 * _KEEP and isinstance(value, dict | list):
                out.append(_Leaf(value, key, inner))
        else:
            _strings(inner, out)


def fit_side_call(body: JSONObject, window: int) -> tuple[JSONObject, int]:
    """A side request made to fit ``window``: the middles of its longest texts and tool
    outputs cut (the newest content is left whole), then its oldest turns dropped if that is
    not enough. Returns the request (a copy when changed) and the characters left out.
    Side requests are never stored: nothing of the conversation is lost."""
    budget = int(window * SIDE_SHARE)
    excess = (estimate_tokens(body) - budget) * 3
    contents = field(body, "contents")
    if excess <= 0 or not isinstance(contents, list) or not contents:
        return body, 0
    contents = copy.deepcopy(contents)
    leaves: list[_Leaf] = []
    _strings(contents[:-1], leaves)
    cut = 0
    for leaf in sorted(leaves, key=lambda leaf: -len(leaf.text)):
        if cut >= excess:
            break
        text = leaf.text
        length = len(text)
        keep = max(2 * _KEEP, length - (excess - cut) - len(_CUT) - 12)
        shorter = text[: keep // 2] + _CUT.format(n=length - keep) + text[length - keep // 2 :]
        if len(shorter) < length:
            leaf.replace(shorter)
            cut += length - len(shorter)
    out: JSONObject = {**body, "contents": contents}
    while len(contents) > 1 and estimate_tokens(out) > budget:
        cut += len(json.dumps(contents.pop(0), ensure_ascii=False))
        while len(contents) > 1 and _starts_badly(contents[0]):
            cut += len(json.dumps(contents.pop(0), ensure_ascii=False))
    return out, max(0, cut)


def _has(content: JSON, kind: str) -> bool:
    parts = content.get("parts") if isinstance(content, Mapping) else None
    return any(isinstance(p, Mapping) and field(p, kind) is not None for p in as_list(parts))


def _drop_parts(content: Mapping[str, JSON], kind: str) -> JSONObject | None:
    """(Called for a content that :func:`_has` parts of ``kind``: its parts are a list.)"""
    parts: list[JSON] = [
        p
        for p in as_list(content.get("parts"))
        if not (isinstance(p, Mapping) and field(p, kind) is not None)
    ]
    return {**content, "parts": parts} if parts else None


def pair_side_call(body: JSONObject) -> tuple[JSONObject, int]:
    """A side request without function calls that no response follows, and responses that
    follow no call: Gemini refuses both, and Gemini CLI's loop check sends a model turn that
    holds text and a call without its response (it trims only turns made of calls alone).
    Returns the request (a copy when changed) and how many turns were changed."""
    contents = field(body, "contents")
    if not isinstance(contents, list):
        return body, 0
    out: list[JSON] = []
    changed = 0
    for i, content in enumerate(contents):
        if not isinstance(content, Mapping):
            out.append(content)
            continue
        fixed: JSONObject | None = dict(content)
        nxt = contents[i + 1] if i + 1 < len(contents) else None
        if content.get("role") == "model" and _has(content, "functionCall"):
            if not _has(nxt, "functionResponse"):
                fixed = _drop_parts(content, "functionCall")
        elif _has(content, "functionResponse"):
            prev = out[-1] if out else None
            if not (
                isinstance(prev, Mapping)
                and prev.get("role") == "model"
                and _has(prev, "functionCall")
            ):
                fixed = _drop_parts(content, "functionResponse")
        if fixed != content:
            changed += 1
        if fixed is not None:
            out.append(fixed)
    return ({**body, "contents": out}, changed) if changed else (body, 0)


def drop_abandoned_calls(contents: list[JSON]) -> tuple[list[JSON], list[str]]:
    """The contents without the function calls of a model turn that a user turn without any
    function response follows; and the names of the calls left out.

    Gemini CLI abandons a call when its loop detection fires between the call and its
    answer: it sends its loop feedback as a user text turn after the model's call and never
    answers the call. Gemini refuses such a request (a call turn must be followed by its
    responses), so the gateway leaves the abandoned calls out (the model's text in that turn
    stays); the call never ran, so nothing it produced is lost. Every later request of the
    conversation holds the same turns and is repaired the same way. A user turn that answers
    only some of the calls is not repaired: it gets Gemini's own 400."""
    out: list[JSON] | None = None
    dropped: list[str] = []
    for i, content in enumerate(contents):
        nxt = contents[i + 1] if i + 1 < len(contents) else None
        abandoned = (
            isinstance(content, Mapping)
            and content.get("role") == "model"
            and isinstance(nxt, Mapping)
            and (nxt.get("role") or "user") == "user"
            and _has(content, "functionCall")
            and not _has(nxt, "functionResponse")
        )
        if not abandoned or not isinstance(content, Mapping):
            if out is not None:
                out.append(content)
            continue
        if out is None:
            out = list(contents[:i])
        for part in as_list(content.get("parts")):
            fc = field(part, "functionCall") if isinstance(part, Mapping) else None
            if isinstance(fc, Mapping):
                dropped.append(str(fc.get("name")))
        kept = _drop_parts(content, "functionCall")
        if kept is not None:
            out.append(kept)
    return (contents, []) if out is None else (out, dropped)


def _starts_badly(content: JSON) -> bool:
    """A first turn Gemini refuses: the model's, or answers to calls no longer there."""
    if not isinstance(content, Mapping) or content.get("role") == "model":
        return True
    parts = as_list(content.get("parts"))
    return any(isinstance(p, Mapping) and field(p, "functionResponse") is not None for p in parts)


__all__ = [
    "declaration",
    "declarations",
    "drop_abandoned_calls",
    "error_body",
    "estimate_tokens",
    "fit_side_call",
    "input_tokens",
    "is_side_call",
    "pair_side_call",
    "with_declarations",
]
