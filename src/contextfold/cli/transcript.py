"""Reading a transcript file for ``contextfold compact`` and ``contextfold demo``."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import ContextFoldError, InvalidMessageError
from ..jsontypes import JSON, JSONObject


def load_transcript(path: Path) -> tuple[str, list[JSONObject], JSON]:
    """Read a transcript file: JSON list, JSONL, or an object with "messages" (and "system").

    Returns (format, messages, system). Anthropic format is recognised by its content blocks
    (tool_use / tool_result) or by a top-level "system" beside "messages".
    """
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ContextFoldError(f"cannot read {path}: {exc}") from exc
    system: JSON = None
    data: JSON
    try:
        data = json.loads(raw)
    except ValueError:
        lines: list[JSON] = []
        for lineno, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            try:
                lines.append(json.loads(line))
            except ValueError as exc:
                raise ContextFoldError(f"{path}:{lineno}: not JSON ({exc})") from None
        data = lines
    if isinstance(data, dict):
        system = data.get("system")
        data = data.get("messages")
    if not isinstance(data, list):
        raise ContextFoldError(f"{path}: expected a list of messages or {{'messages': [...]}}")
    fmt = "anthropic" if system is not None else "openai"
    messages: list[JSONObject] = []
    for index, m in enumerate(data):
        if not isinstance(m, dict):  # what reading the messages would say, said up front
            raise InvalidMessageError(
                f"expected a message object, got {type(m).__name__}", index=index
            )
        messages.append(m)
    for m in messages:
        content = m.get("content")
        if isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") in ("tool_use", "tool_result") for b in content
        ):
            fmt = "anthropic"
            break
    return fmt, messages, system


def anthropic_system(system: JSON) -> str | list[JSONObject] | None:
    """A transcript's top-level ``system``: a string or a list of content blocks."""
    if system is None or isinstance(system, str):
        return system
    if not isinstance(system, list):
        raise InvalidMessageError(
            f"system must be a string or a list of blocks, not {type(system).__name__}"
        )
    blocks: list[JSONObject] = []
    for j, block in enumerate(system):
        if not isinstance(block, dict):
            raise InvalidMessageError(f"content block {j} is not an object")
        blocks.append(block)
    return blocks


__all__ = ["anthropic_system", "load_transcript"]
