"""What the framework integrations share: keeping contextfold's log in step with the
framework's own history, and mapping contextfold's view back to the framework's objects.

How the two histories relate (the same rule for every integration):

* The framework's history (LangGraph's checkpointed ``messages``, the Agents SDK's input items,
  pydantic-ai's run messages) stays what the agent loop owns and sees between calls; the
  integrations never rewrite it.
* contextfold's log mirrors it, append-only: before each model call the framework's messages
  are converted to OpenAI form and compared, position by position, with what the log already
  holds; only the messages after that common prefix are appended. Nothing is stored twice.
* The model receives contextfold's view (compacted, offloaded, with evidence injected), mapped
  back to the framework's own objects: a message the view carries unchanged is the framework's
  original object (ids, metadata, reasoning intact); a changed or new one is built from the view.
* A rewrite of a message the log already holds (a message edited or removed in the framework's
  state, another summarizing middleware, a different conversation on the same session) cannot
  be mirrored by an append-only log: it raises :class:`HistoryDivergedError` naming the
  position, instead of silently sending a view of a history the framework no longer has.
  System prompts are the exception: they may change between calls (dynamic prompts); the first
  one is logged and the current one is sent.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..core.messages import Message
from ..core.wire import to_openai
from ..engine.manager import ContextManager
from ..errors import ContextFoldError

#: Key in a logged message's wire extras carrying the framework's handle on it (a LangChain
#: message id, a position, the original Responses items). Never counted, never sent.
REF = "x_contextfold_ref"

_MODEL_FIELDS = ("role", "content", "tool_calls", "tool_call_id", "name")


class HistoryDivergedError(ContextFoldError):
    """The framework's history no longer starts with what contextfold's log holds."""

    def __init__(self, session_id: str, position: int, detail: str) -> None:
        self.position = position
        super().__init__(
            f"session {session_id!r}: the framework's history diverges from contextfold's log at "
            f"message {position} ({detail}). The log is append-only, so messages it already "
            "holds cannot be edited or removed: keep the history append-only (no second "
            "summarizing middleware, no edits of earlier messages) or start a new session_id."
        )


def _normal_content(content: Any) -> Any:
    if isinstance(content, list) and all(
        isinstance(b, Mapping) and b.get("type") == "text" for b in content
    ):
        return "".join(str(b.get("text", "")) for b in content)
    return "" if content is None else content


def _normal_calls(calls: Any) -> Any:
    if not isinstance(calls, list):
        return calls
    out = []
    for call in calls:
        fn = call.get("function", {}) if isinstance(call, Mapping) else {}
        args = fn.get("arguments", "{}")
        with contextlib.suppress(ValueError):
            args = json.loads(args) if isinstance(args, str) and args.strip() else {}
        out.append([call.get("id"), fn.get("name"), args])
    return out


def fingerprint(message: Mapping[str, object]) -> str:
    """What the model sees of one OpenAI-form message, as canonical text (extras, the ``type``
    of tool calls and JSON spacing of arguments do not count)."""
    if message.get("role") == "system":
        return "system"  # system prompts may change between calls (dynamic prompts)
    visible = {k: message[k] for k in _MODEL_FIELDS if k in message and message[k] is not None}
    visible["content"] = _normal_content(message.get("content"))
    if "tool_calls" in visible:
        visible["tool_calls"] = _normal_calls(visible["tool_calls"])
        if not visible["tool_calls"]:
            del visible["tool_calls"]
    return json.dumps(visible, sort_keys=True, ensure_ascii=False, default=str)


def without_ref(message: Mapping[str, object]) -> dict[str, object]:
    return {k: v for k, v in message.items() if k != REF}


def logged_messages(manager: ContextManager) -> list[Message]:
    """The session's full history (``ContextManager.history``, a property or a method)."""
    history: Any = manager.history
    return list(history() if callable(history) else history)


class HistoryMirror:
    """Keeps one ContextManager's log an append-only mirror of a framework's history."""

    def __init__(self, manager: ContextManager) -> None:
        self.manager = manager
        self._prints: list[str] = []
        self._loaded = -1  # length of the log when _prints was built

    def _logged(self) -> list[str]:
        history = logged_messages(self.manager)
        if self._loaded != len(history):
            self._prints = [fingerprint(to_openai(m)) for m in history]
            self._loaded = len(history)
        return self._prints

    def sync(
        self, messages: Sequence[Mapping[str, object]], system: Mapping[str, object] | None = None
    ) -> int:
        """Append what the log does not hold yet; returns how many messages were appended.

        ``system`` is the framework's separate system prompt (instructions), if any: it is
        logged once, first, when the log is empty; ``messages`` are compared after it."""
        logged = self._logged()
        prints = [fingerprint(m) for m in messages]
        pending: list[Mapping[str, object]] = []
        if not logged and system is not None and not (prints and prints[0] == "system"):
            pending.append(system)
        # a system prompt logged separately (instructions) sits before the framework's messages
        starts_with_system = bool(prints) and prints[0] == "system"
        offset = 1 if logged and logged[0] == "system" and not starts_with_system else 0
        held = max(0, len(logged) - offset)
        for i in range(min(held, len(prints))):
            if logged[offset + i] != prints[i]:
                raise HistoryDivergedError(
                    self.manager.session_id,
                    offset + i,
                    f"the log holds {logged[offset + i][:120]!r}, the framework now has "
                    f"{prints[i][:120]!r}",
                )
        if len(prints) < held:
            raise HistoryDivergedError(
                self.manager.session_id,
                offset + len(prints),
                f"the framework has {len(prints)} messages, the log {held}",
            )
        pending.extend(messages[held:])
        if pending:
            self.manager.add_many(pending)
            self._prints = self._prints + [fingerprint(m) for m in pending]
            self._loaded = len(self._prints)
        return len(pending)

    def extend(self, messages: Sequence[Mapping[str, object]]) -> int:
        """Append messages that continue the log, skipping those it already ends with (a
        framework's session may hand over items another hook has just logged). Tool calls and
        results carry unique ids, so only plain text turns could repeat, and a repeated user
        message is never adjacent to itself."""
        logged = self._logged()
        prints = [fingerprint(m) for m in messages]
        overlap = 0
        for k in range(min(len(logged), len(prints)), 0, -1):
            if logged[-k:] == prints[:k]:
                overlap = k
                break
        new = list(messages[overlap:])
        if new:
            self.manager.add_many(new)
            self._prints = self._prints + prints[overlap:]
            self._loaded = len(self._prints)
        return len(new)


def openai_tool(name: str, description: str, parameters: Mapping[str, object]) -> dict[str, object]:
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": dict(parameters)},
    }


def input_tokens_of(usage: object) -> int | None:
    """Input tokens from a framework usage object or dict (``input_tokens``/``prompt_tokens``)."""
    for key in ("input_tokens", "prompt_tokens", "request_tokens"):
        value = usage.get(key) if isinstance(usage, Mapping) else getattr(usage, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


__all__ = [
    "REF",
    "HistoryDivergedError",
    "HistoryMirror",
    "fingerprint",
    "input_tokens_of",
    "logged_messages",
    "openai_tool",
    "without_ref",
]
