"""Read the provider-reported input tokens out of a response (OpenAI, Anthropic, dicts)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _get(obj: Any, name: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def extract_input_tokens(response: object) -> int | None:
    """Input tokens of a chat response, including cached ones; None if unknown."""
    usage = _get(response, "usage")
    if usage is None:
        return None
    prompt = _get(usage, "prompt_tokens")
    if isinstance(prompt, int):
        return prompt
    total = 0
    found = False
    for key in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
        value = _get(usage, key)
        if isinstance(value, int):
            total += value
            found = True
    return total if found else None
