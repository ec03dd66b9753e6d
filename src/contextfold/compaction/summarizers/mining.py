"""Text mining for the extractive summarizer: sentences, stated decisions, the user's request.

Pure functions of message text, no model: :func:`sentences` splits prose (code blocks
dropped), :func:`decision_score` rates a sentence as a stated cause/fix/choice or an announced
change, :func:`intent` cuts a user request down to its task and :func:`user_requests` lists the
requests that are not agent-framework boilerplate.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ...core.messages import Message
from ...core.scaffolding import is_scaffolding, task_text
from .steps import clip
from .transcript import render_content

_DECISION_STRONG = re.compile(
    r"\b(root cause|the (?:real |actual |underlying |main )?(?:issue|problem|bug|cause) (?:is|was|seems|appears|lies)"
    r"|the fix (?:is|should|will|would|was)|the (?:correct|right|proper|best|simplest|cleanest) (?:fix|approach|solution|way)"
    r"|decided|decide to|instead of|rather than|the solution is|we need to (?:modify|change|fix|add|update|handle|ensure|make|wrap|catch|use|remove)"
    r"|should be (?:changed|modified|fixed|updated|handled))\b",
    re.I,
)
_DECISION_ACTION = re.compile(
    r"\b(?:I'll|I will|I'm going to|let's|let us|I need to|we should|I should|I can)\s+(?:now\s+|also\s+|simply\s+)?"
    r"(?:modify|change|fix|add|update|implement|replace|remove|wrap|use|catch|handle|rewrite|refactor|patch|apply|move|override|delegate|convert|make)\b",
    re.I,
)
NEXT_RE = re.compile(
    r"^(?:next,?|now,? (?:I|we|let's|let me)|then,? |finally,? |let me|let's|I'll|I will|I need to|I should|we need to)\b|next step",
    re.I,
)
_NOISE_USER = re.compile(
    r"EXACTLY ONE action|format your action|--- DEMONSTRATION ---|^Here is a demonstration|did not produce any output",
    re.I,
)
_BOILERPLATE = re.compile(
    r"^(?:<[^>]+>|consider the following (?:pr description|issue).*|we're currently solving the following issue.*"
    r"|here'?s the issue text:?|issue:?|description:?|#+ .*task.*|task:?)$",
    re.I,
)
_CUT_AT = re.compile(r"</pr_description>|<instructions>|^INSTRUCTIONS:|^# Task Instructions", re.M)
_NOT_DECISION = re.compile(
    r"^(?:good|great|perfect|excellent|nice|ok|okay|hmm|wait|interesting|now it|it now|still)\b"
    r"|\b(?:is working|works|now raises|passed|passes|is fixed|was fixed|has been fixed)\b",
    re.I,
)
_TOOL_USE = re.compile(
    r"\buse (?:the )?`?[\w-]+`? (?:command|tool)\b|\buse\b.*\bto (?:see|find|locate|check|look|view|open"
    r"|search|list|inspect)\b|\bconfirm",
    re.I,
)
_FIRST_PERSON = re.compile(r"\b(?:I|we|let's|should|will|use|using|need)\b", re.I)


def sentences(text: str) -> list[str]:
    """Sentences of prose (12 characters or more), fenced code blocks and list marks dropped."""
    text = re.sub(r"```.*?(```|$)", "\n", text, flags=re.S)
    out: list[str] = []
    for line in text.splitlines():
        line = re.sub(r"^\s*(?:THOUGHT:|DISCUSSION|[-*]|\d+[.)])\s*", "", line).strip()
        for s in re.split(r"(?<=[.!?])\s+(?=[A-Z`(])", line):
            s = s.strip()
            if len(s) >= 12:
                out.append(s)
    return out


def decision_score(sent: str) -> int:
    """2 for a stated cause/fix/choice, 1 for an announced change, 0 otherwise."""
    if _NOT_DECISION.search(sent) or sent.endswith("?") or _TOOL_USE.search(sent):
        return 0
    m = _DECISION_STRONG.search(sent)
    if m and (
        not m.group(1).lower().startswith(("instead", "rather")) or _FIRST_PERSON.search(sent)
    ):
        return 2
    return 1 if _DECISION_ACTION.search(sent) else 0


def intent(text: str, limit: int) -> str:
    """The task of a user request: instructions and tracebacks cut, boilerplate lines dropped."""
    m = _CUT_AT.search(text)
    if m and m.start() > 40:
        text = text[: m.start()]
    stop = re.search(r"^\s*(?:Traceback \(most recent call last\)|```)", text, re.M)
    if stop and stop.start() > 40:
        text = text[: stop.start()]
    keep = [
        ln.strip() for ln in text.splitlines() if ln.strip() and not _BOILERPLATE.match(ln.strip())
    ]
    joined = " ".join(keep)
    if len(joined) <= limit:
        return joined
    cut = joined[:limit]
    dot = max(cut.rfind(". "), cut.rfind("? "), cut.rfind("! "))
    return cut[: dot + 1] if dot > limit // 2 else clip(joined, limit)


def user_requests(messages: Sequence[Message], agent: str | None = None) -> list[str]:
    """The text of the user messages that are requests: agent scaffolding (reminders, few-shot
    examples, files blocks, format reminders) left out or cut (:mod:`contextfold.core.scaffolding`;
    ``agent``: that agent's rules only, else every agent's)."""
    out = []
    for m in messages:
        if m.role == "user":
            raw = render_content(m.content)
            if is_scaffolding(raw, agent):  # few-shot example, files block, reminder, context
                continue
            t = task_text(raw, agent)
            if len(t) >= 2 and not _NOISE_USER.search(t[:3000]):
                out.append(t)
    return out


__all__ = ["NEXT_RE", "decision_score", "intent", "sentences", "user_requests"]
