"""Provider responses and provider-shaped input, as contextfold messages.

* :func:`response_message`: the assistant turn of an OpenAI ``ChatCompletion``, an OpenAI
  Responses API ``Response`` or an Anthropic ``Message`` (SDK objects or their dicts), used by
  ``ContextManager.add_response``. Text, tool calls and Anthropic thinking / redacted-thinking
  blocks (with their signatures) are kept exactly; response metadata (id, model, stop reason) goes
  to ``Message.metadata``, which is never sent back. Responses API items that have no Chat
  Completions form (reasoning, built-in tool calls) are kept whole in
  ``metadata["responses_output"]``.
* :func:`parse_inputs`: what ``ContextManager.add`` / ``add_many`` accept. OpenAI-format dicts
  and :class:`~contextfold.core.messages.Message` objects as before; a dict whose content holds
  Anthropic ``tool_use`` blocks (assistant) or ``tool_result`` blocks (user) is converted with
  :func:`contextfold.core.wire.from_anthropic` (a user turn with N tool results becomes N tool
  messages); any other mix is an :class:`~contextfold.errors.InvalidMessageError` that names the
  helper to use, never accepted silently.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import cast

from ..core.messages import Message, check_message
from ..core.wire import from_anthropic, from_openai
from ..errors import InvalidMessageError
from ..jsontypes import JSON

_ANTHROPIC_BLOCKS = frozenset({"tool_use", "tool_result"})
_HELP = (
    "convert Anthropic messages with contextfold.core.wire.from_anthropic(...) or add them with "
    "cm.add_anthropic(...); record a model's reply with cm.add_response(response)"
)


def as_plain(obj: object) -> object:
    """An SDK (pydantic) object as plain JSON data, None fields left out; dicts unchanged."""
    if isinstance(obj, Mapping):
        return dict(obj)
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        return dump(mode="json", exclude_none=True)
    to_dict = getattr(obj, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    raise InvalidMessageError(
        f"add_response: expected an OpenAI ChatCompletion / Response or an Anthropic Message "
        f"(object or dict), got {type(obj).__name__}"
    )


def _clean(value: object) -> object:
    """Drop None values recursively (SDK dicts carry many; providers reject some of them)."""
    if isinstance(value, Mapping):
        return {k: _clean(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _meta(data: Mapping[str, object], *keys: str) -> dict[str, JSON]:
    """Fields of a provider's decoded response: JSON values (adding the message refuses
    metadata that would not encode, naming the field)."""
    return {k: cast(JSON, data[k]) for k in keys if data.get(k) is not None}


# --------------------------------------------------------------------------- responses


def _from_chat_completion(data: Mapping[str, object], choice: int) -> Message:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise InvalidMessageError("add_response: the ChatCompletion has no choices")
    if not 0 <= choice < len(choices):
        raise InvalidMessageError(
            f"add_response: choice {choice} does not exist (the response has {len(choices)})"
        )
    picked = choices[choice]
    raw = picked.get("message") if isinstance(picked, Mapping) else None
    if not isinstance(raw, Mapping):
        raise InvalidMessageError(f"add_response: choice {choice} has no message")
    msg: dict[str, object] = {"role": "assistant", "content": raw.get("content")}
    if raw.get("tool_calls"):
        msg["tool_calls"] = _clean(raw["tool_calls"])
    for key in ("refusal", "function_call", "name"):
        if raw.get(key) is not None:
            msg[key] = _clean(raw[key])
    audio = raw.get("audio")
    if isinstance(audio, Mapping) and audio.get("id"):
        msg["audio"] = {"id": audio["id"]}  # the API takes the audio back by id only
    meta = _meta(data, "id", "model")
    if isinstance(picked, Mapping) and picked.get("finish_reason") is not None:
        meta["finish_reason"] = cast(JSON, picked["finish_reason"])
    for key in ("reasoning_content", "reasoning"):  # vLLM / DeepSeek: not to be sent back
        if raw.get(key) is not None:
            meta[key] = cast(JSON, raw[key])
    meta["source"] = "openai.chat.completions"
    return from_openai(msg, metadata=meta)


def _from_responses(data: Mapping[str, object]) -> Message:
    output = data.get("output")
    if not isinstance(output, list):
        raise InvalidMessageError("add_response: the Response has no output list")
    texts: list[str] = []
    calls: list[dict[str, object]] = []
    refusals: list[str] = []
    for item in output:
        if not isinstance(item, Mapping):
            continue
        kind = item.get("type")
        if kind == "message":
            for part in item.get("content") or []:
                if not isinstance(part, Mapping):
                    continue
                if part.get("type") == "output_text" and isinstance(part.get("text"), str):
                    texts.append(part["text"])
                elif part.get("type") == "refusal" and isinstance(part.get("refusal"), str):
                    refusals.append(part["refusal"])
        elif kind == "function_call":
            calls.append(
                {
                    "id": str(item.get("call_id") or item.get("id") or ""),
                    "type": "function",
                    "function": {
                        "name": str(item.get("name") or ""),
                        "arguments": item.get("arguments") or "{}",
                    },
                }
            )
    msg: dict[str, object] = {"role": "assistant", "content": "".join(texts) or None}
    if calls:
        msg["tool_calls"] = calls
    if refusals:
        msg["refusal"] = "".join(refusals)
    meta = _meta(data, "id", "model", "status")
    meta["responses_output"] = cast(
        JSON, _clean(output)
    )  # reasoning items, built-in tools: kept whole
    meta["source"] = "openai.responses"
    return from_openai(msg, metadata=meta)


def _plain_text_only(blocks: Sequence[Mapping[str, object]]) -> bool:
    return all(b.get("type") == "text" and set(b) <= {"type", "text"} for b in blocks)


def _from_anthropic_message(data: Mapping[str, object]) -> Message:
    content = data.get("content")
    if not isinstance(content, list):
        raise InvalidMessageError("add_response: the Anthropic Message has no content list")
    blocks = [_clean(b) for b in content]
    converted = from_anthropic([{"role": "assistant", "content": blocks}])
    if len(converted) != 1:  # pragma: no cover - an assistant message is always one message
        raise InvalidMessageError("add_response: could not convert the Anthropic Message")
    msg = converted[0]
    rest = [b for b in msg.content or () if isinstance(b, Mapping)]
    if isinstance(msg.content, tuple) and _plain_text_only(rest) and rest:
        # text only: the same message as a string, valid for both providers
        msg = replace(msg, content="".join(str(b["text"]) for b in rest))
    elif isinstance(msg.content, tuple) and not rest and msg.tool_calls:
        msg = replace(msg, content=None)
    meta = _meta(data, "id", "model", "stop_reason", "stop_sequence")
    meta["source"] = "anthropic.messages"
    return check_message(replace(msg, metadata=meta))


def response_message(response: object, *, choice: int = 0) -> Message:
    """The assistant turn of a provider response as one neutral message (see the module doc)."""
    data = as_plain(response)
    if not isinstance(data, Mapping):
        raise InvalidMessageError(f"add_response: unsupported response {type(response).__name__}")
    if "choices" in data:
        return _from_chat_completion(data, choice)
    if data.get("object") == "response" or (
        "output" in data and isinstance(data.get("output"), list)
    ):
        return _from_responses(data)
    if data.get("type") == "message" and data.get("role") == "assistant":
        return _from_anthropic_message(data)
    if data.get("role") == "assistant":
        raise InvalidMessageError(
            "add_response takes a whole response (ChatCompletion, Response or Anthropic "
            "Message); for a single message dict use cm.add(...)"
        )
    raise InvalidMessageError(
        "add_response: not an OpenAI ChatCompletion / Response or an Anthropic Message "
        f"(keys: {sorted(data)[:8]})"
    )


# --------------------------------------------------------------------------- add() input


def _block_types(content: object) -> set[str]:
    if not isinstance(content, list | tuple):
        return set()
    return {str(b.get("type")) for b in content if isinstance(b, Mapping)} & _ANTHROPIC_BLOCKS


def _anthropic_in_openai(item: Mapping[str, object], index: int) -> list[Message] | None:
    """The messages an Anthropic-shaped dict stands for; None for an ordinary OpenAI dict."""
    kinds = _block_types(item.get("content"))
    if not kinds:
        return None
    role = item.get("role")
    if role == "assistant" and kinds == {"tool_use"}:
        if item.get("tool_calls"):
            raise InvalidMessageError(
                "assistant message has both OpenAI tool_calls and Anthropic tool_use blocks; "
                "use one format per message (" + _HELP + ")",
                index=index,
            )
        return from_anthropic([{k: v for k, v in item.items() if k != "tool_calls"}])
    if role == "user" and kinds == {"tool_result"}:
        return from_anthropic([item])
    where = ", ".join(sorted(kinds))
    raise InvalidMessageError(
        f"{role} message holds Anthropic {where} blocks, which have no meaning in an OpenAI-format "
        f"{role} message (tool_use belongs to assistant, tool_result to user messages); " + _HELP,
        index=index,
    )


def parse_inputs(
    items: Iterable[Mapping[str, object] | Message], start: int, uuid_for: Callable[[int], str]
) -> list[Message]:
    """``add_many``'s input as messages at history positions ``start``, ``start + 1`` ...

    Dicts get the uuid ``uuid_for(position)`` (stable across replays); Message objects keep
    theirs; Anthropic-shaped dicts are converted (see the module doc)."""
    out: list[Message] = []
    for item in items:
        pos = start + len(out)
        if isinstance(item, Mapping):
            converted = _anthropic_in_openai(item, pos)
            if converted is not None:
                for j, msg in enumerate(converted):
                    out.append(check_message(replace(msg, uuid=uuid_for(pos + j)), pos + j))
                continue
            out.append(from_openai(item, pos, uuid=uuid_for(pos)))
        else:
            out.append(from_openai(item, pos))
    return out


__all__ = ["as_plain", "parse_inputs", "response_message"]
