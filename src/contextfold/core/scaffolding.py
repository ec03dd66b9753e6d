"""Client scaffolding: text an agent program wraps around the real conversation.

Claude Code puts ``<system-reminder>`` blocks into user messages and tool results and sends a
``<persisted-output>`` preview for a large output; aider sends few-shot example messages, its
files block and repository map as user/assistant pairs; Codex sends ``<environment_context>``
and ``AGENTS.md`` instructions as user messages; Gemini CLI opens with its session context;
mini-swe-agent wraps the task in its instance template and answers a malformed step with a
format reminder. None of it is the user's task or question.

The rules are data (``data/scaffolding.json``): per agent, the markers that recognize it, the
blocks cut out of any message, the messages that are scaffolding as a whole and where the task
starts and ends in its first request; plus generic rules (XML-ish reminder tags) for every
agent. With no agent named, the rules of every agent apply (their markers are distinctive).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from ..errors import ConfigError

__all__ = [
    "AgentRules",
    "agent_rules",
    "detect_agent",
    "is_pinned_state",
    "is_scaffolding",
    "strip_scaffolding",
    "task_text",
]

_FLAGS = re.S


@dataclass(frozen=True, slots=True)
class AgentRules:
    """How one agent program's scaffolding looks."""

    name: str
    #: Substrings of its system prompt (or first messages) that recognize it.
    detect: tuple[str, ...]
    #: Cut out of any message, wherever they are.
    blocks: tuple[re.Pattern[str], ...]
    #: A message that starts with one of these (after blocks are cut) is scaffolding.
    messages: tuple[re.Pattern[str], ...]
    #: Cut from the start of a message: the agent's wrapper before the user's own words
    #: (mini-swe-agent's "The user added a new task: ...").
    leads: tuple[re.Pattern[str], ...] = ()
    #: In a task request: where the task text starts / ends (the template around it dropped).
    task_start: re.Pattern[str] | None = None
    task_end: re.Pattern[str] | None = None
    #: Messages (matched at the start) that carry the client's current state, re-sent each
    #: turn (aider's files block, repository map, read-only files): scaffolding, never the
    #: task, but pinned in the view like the system prompt.
    pin: tuple[re.Pattern[str], ...] = ()


def _compile(items: object, where: str) -> tuple[re.Pattern[str], ...]:
    if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
        raise ConfigError(f"scaffolding rules: {where} must be a list of regular expressions")
    try:
        return tuple(re.compile(x, _FLAGS) for x in items)
    except re.error as exc:
        raise ConfigError(f"scaffolding rules: bad pattern in {where}: {exc}") from None


def _optional(value: object, where: str) -> re.Pattern[str] | None:
    if value is None:
        return None
    return _compile([value], where)[0]


def parse_rules(data: object) -> tuple[AgentRules, ...]:
    """Rules from the JSON document's structure (the generic rules last, named ``generic``)."""
    if not isinstance(data, dict) or not isinstance(data.get("agents"), list):
        raise ConfigError("scaffolding rules: expected an object with an 'agents' list")
    out: list[AgentRules] = []
    for n, item in enumerate(data["agents"]):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise ConfigError(f"scaffolding rules: agents[{n}] needs a name")
        name = item["name"]
        detect = item.get("detect", [])
        if not isinstance(detect, list) or not all(isinstance(x, str) for x in detect):
            raise ConfigError(f"scaffolding rules: {name}.detect must be a list of strings")
        out.append(
            AgentRules(
                name=name,
                detect=tuple(detect),
                blocks=_compile(item.get("blocks", []), f"{name}.blocks"),
                leads=_compile(item.get("leads", []), f"{name}.leads"),
                messages=_compile(item.get("messages", []), f"{name}.messages"),
                task_start=_optional(item.get("task_start"), f"{name}.task_start"),
                task_end=_optional(item.get("task_end"), f"{name}.task_end"),
                pin=_compile(item.get("pin", []), f"{name}.pin"),
            )
        )
    generic = data.get("generic", {})
    if not isinstance(generic, dict):
        raise ConfigError("scaffolding rules: 'generic' must be an object")
    out.append(
        AgentRules(
            name="generic",
            detect=(),
            blocks=_compile(generic.get("blocks", []), "generic.blocks"),
            messages=_compile(generic.get("messages", []), "generic.messages"),
        )
    )
    return tuple(out)


@lru_cache(maxsize=1)
def agent_rules() -> tuple[AgentRules, ...]:
    """The shipped rules: every known agent, then the generic fallback."""
    text = resources.files("contextfold").joinpath("data/scaffolding.json").read_text("utf-8")
    return parse_rules(json.loads(text))


def _named(agent: str | None) -> tuple[AgentRules, ...]:
    rules = agent_rules()
    if agent is None:
        return rules
    chosen = tuple(r for r in rules if r.name in (agent, "generic"))
    if len(chosen) < 2 and agent != "generic":
        known = ", ".join(r.name for r in rules)
        raise ConfigError(f"unknown agent {agent!r} for the scaffolding rules; known: {known}")
    return chosen


def detect_agent(texts: Iterable[str]) -> str | None:
    """The agent whose markers appear first in ``texts`` (its system prompt, first messages)."""
    rules = agent_rules()
    for text in texts:
        for r in rules:
            if any(marker in text for marker in r.detect):
                return r.name
    return None


_BLANKS = re.compile(r"\n{3,}")


def _cut_leads(text: str, agent: str | None) -> str:
    rest = text.lstrip()
    for r in _named(agent):
        for pattern in r.leads:
            m = pattern.match(rest)
            if m is not None:
                return rest[m.end() :]
    return text


def strip_scaffolding(text: str, agent: str | None = None) -> str:
    """``text`` without the scaffolding blocks of ``agent`` (or of every known agent) and the
    generic reminder tags, and an agent's wrapper before the user's own words cut; surrounding
    whitespace trimmed."""
    text = _cut_leads(text, agent)
    if "<" not in text and "[" not in text and "\n..." not in text:
        return text.strip()
    for r in _named(agent):
        for pattern in r.blocks:
            text = pattern.sub("", text)
    return _BLANKS.sub("\n\n", text).strip()


def is_scaffolding(text: str, agent: str | None = None) -> bool:
    """True when the whole message is scaffolding: nothing is left once the blocks are cut,
    or it is one of the agent's own messages (few-shot example, files block, format
    reminder, session context)."""
    rest = strip_scaffolding(text, agent)
    if not rest:
        return True
    return any(p.match(rest) for r in _named(agent) for p in (*r.messages, *r.pin))


def is_pinned_state(text: str, agent: str | None = None) -> bool:
    """True when the message carries the client's current state (its files block, its
    repository map): the client re-sends it every turn as its current view, so the view keeps
    it wherever compaction puts the boundary."""
    rest = text.lstrip()
    return any(p.match(rest) for r in _named(agent) for p in r.pin)


def task_text(text: str, agent: str | None = None) -> str:
    """The task of a request: scaffolding cut, and the agent's template around the task
    (mini-swe-agent's "Please solve this issue: ..." and its workflow) dropped."""
    rest = strip_scaffolding(text, agent)
    for r in _named(agent):
        if r.task_start is not None:
            m = r.task_start.search(rest)
            if m is not None and m.start() < 200:
                rest = rest[m.end() :]
        if r.task_end is not None:
            m = r.task_end.search(rest)
            if m is not None and m.start() > 0:
                rest = rest[: m.start()]
    return rest.strip()
