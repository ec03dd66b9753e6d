"""Agent-facing tools: JSON schemas in OpenAI and Anthropic formats, and one dispatcher.

A tool is a name, a description, a JSON-schema for its arguments and a handler that takes the
parsed arguments and returns text. :class:`ToolBox` renders the schemas and dispatches a call;
bad arguments come back as a tool error message, never as an exception that kills the loop.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from ..errors import ContextFoldError, ToolArgumentsError
from ..jsontypes import JSONLike, JSONObject

Handler = Callable[[Mapping[str, object]], str]


@dataclass(frozen=True, kw_only=True, slots=True)
class Tool:
    name: str
    description: str
    parameters: Mapping[str, JSONLike]
    handler: Handler = field(compare=False, repr=False)

    def openai_schema(self) -> dict[str, JSONLike]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }

    def anthropic_schema(self) -> dict[str, JSONLike]:
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": dict(self.parameters),
        }


def _mapping(value: object) -> Mapping[str, object]:
    return value if isinstance(value, Mapping) else {}


def _check_args(tool: Tool, args: Mapping[str, object]) -> None:
    """A small JSON-schema subset: required keys, declared types, no unknown keys."""
    props = _mapping(tool.parameters.get("properties"))
    required = tool.parameters.get("required", [])
    for key in required if isinstance(required, list | tuple) else ():
        if key not in args:
            raise ToolArgumentsError(f"{tool.name}: missing required argument {key!r}")
    types = {
        "string": str,
        "integer": int,
        "number": (int, float),
        "boolean": bool,
        "array": list,
        "object": dict,
    }
    for key, value in args.items():
        if key not in props:
            raise ToolArgumentsError(f"{tool.name}: unknown argument {key!r}")
        spec = _mapping(props[key])
        want = spec.get("type")
        py = types.get(want) if isinstance(want, str) else None
        if py is None:
            continue
        ok = isinstance(value, py)  # type: ignore[arg-type]
        if want in ("integer", "number") and isinstance(value, bool):
            ok = False
        if not ok:
            raise ToolArgumentsError(
                f"{tool.name}: argument {key!r} must be {want}, got {type(value).__name__}"
            )
        least = spec.get("minimum")
        if (
            want == "integer"
            and isinstance(least, int | float)
            and isinstance(value, int)  # (it is: see ok)
            and value < least
        ):
            raise ToolArgumentsError(f"{tool.name}: argument {key!r} must be >= {least}")


class ToolBox:
    """A set of tools with schema rendering and dispatch."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools:
            self.register(t)

    def register(self, tool: Tool) -> None:
        self._tools[tool.name] = tool

    def names(self) -> list[str]:
        return list(self._tools)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def schemas(self, format: str = "openai") -> list[dict[str, JSONLike]]:
        if format == "openai":
            return [t.openai_schema() for t in self._tools.values()]
        if format == "anthropic":
            return [t.anthropic_schema() for t in self._tools.values()]
        raise ToolArgumentsError(f"unknown tool schema format {format!r}")

    def run(self, name: str, arguments: str | Mapping[str, object]) -> tuple[str, bool]:
        """Run a tool; returns (text, is_error). Never raises for bad input."""
        tool = self._tools.get(name)
        if tool is None:
            return f"Error: unknown tool {name!r}. Available: {', '.join(self._tools)}", True
        try:
            args: object
            if isinstance(arguments, str):
                try:
                    args = json.loads(arguments) if arguments.strip() else {}
                except ValueError as exc:
                    raise ToolArgumentsError(
                        f"{name}: arguments are not valid JSON ({exc})"
                    ) from None
            else:
                args = dict(arguments)
            if not isinstance(args, dict):
                raise ToolArgumentsError(f"{name}: arguments must be a JSON object")
            _check_args(tool, args)
            return tool.handler(args), False
        except ContextFoldError as exc:
            return f"Error: {exc}", True
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return f"Error: {name} failed: {exc}", True

    def handle(self, call: Mapping[str, object]) -> JSONObject:
        """Dispatch an OpenAI tool call dict (or an Anthropic tool_use block) and return the
        OpenAI tool message answering it."""
        if not isinstance(call, Mapping):
            return {
                "role": "tool",
                "tool_call_id": "",
                "content": f"Error: a tool call must be an object, got {type(call).__name__}",
            }
        if call.get("type") == "tool_use":
            call_id = str(call.get("id", ""))
            name = str(call.get("name", ""))
            raw = call.get("input") or {}
        else:
            fn = call.get("function") or {}
            call_id = str(call.get("id", ""))
            name = str(fn.get("name", "")) if isinstance(fn, Mapping) else ""
            raw = fn.get("arguments", "{}") if isinstance(fn, Mapping) else "{}"
        # arguments that are neither text nor an object: their text, refused as not an object
        text, _ = self.run(name, raw if isinstance(raw, str | Mapping) else str(raw))
        return {"role": "tool", "tool_call_id": call_id, "content": text}


__all__ = ["Tool", "ToolBox"]
