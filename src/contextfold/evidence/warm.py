"""What indexing an output as evidence derives from its text alone, computed ahead.

Classifying an output and reading its anchors scan all of its text; both are remembered by
the text (:mod:`contextfold.core.textmemo`). The gateway runs :func:`warm` on the newest
outputs after an answer, while the agent runs its tool, so a compaction that must happen on a
later request's path finds that work done."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..core.messages import Message
from .classify import classify, extract_anchors
from .fields import CallFields, call_fields, is_own_tool


def anchors_of(text: str, call: CallFields | None) -> tuple[str, ...]:
    """The text's anchors; a shell command adds its own, a file tool the files it named."""
    if call is None or call.shell:
        return extract_anchors(text, call.command if call is not None else None)
    found = extract_anchors(text)
    extra = tuple(f"file:{p}" for p in call.paths if f"file:{p}" not in found)
    return found + extra


def warm(messages: Sequence[Message], stop: Callable[[], bool] | None = None) -> int:
    """Classify and anchor the tool results of ``messages`` as evidence indexing will (the
    calls they answer read from the assistant messages among them); ``stop()`` is checked
    between results. How many results were looked at."""
    calls: dict[str, CallFields] = {}
    done = 0
    for msg in messages:
        if msg.role == "assistant":
            for tc in msg.tool_calls:
                calls[tc.id] = call_fields(tc.name, tc.arguments)
            continue
        if msg.role != "tool" or (stop is not None and stop()):
            continue
        call = calls.get(msg.tool_call_id or "")
        if call is not None and is_own_tool(call.tool):
            continue
        text = msg.text
        classify(text, "tool")
        anchors_of(text, call)
        done += 1
    return done


__all__ = ["anchors_of", "warm"]
