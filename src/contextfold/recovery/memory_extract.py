"""Fact extraction for long-term memory (the flush before compaction): what is worth keeping.

:class:`ExtractiveFactExtractor` is deterministic (rules, no LLM): requirements, constraints
and configuration from user messages, file changes from the agent's tool calls (read by
:mod:`contextfold.core.shell`), conclusions from its text. :class:`LLMFactExtractor` asks a chat
model for JSON lines and falls back to the extractive one when that fails. The store that
writes the facts is :mod:`contextfold.recovery.memory`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..core.aio import call_model
from ..core.messages import Message
from ..core.shell import FileOp, ShellReader, is_write_tool, parse_arguments
from ..core.textmemo import by_text
from ..errors import ConfigError
from ..jsontypes import JSON, JSONObject  # noqa: F401 (JSON: for get_type_hints)

log = logging.getLogger(__name__)

KINDS = ("requirement", "configuration", "file_change", "conclusion", "constraint")
TOPIC_OF_KIND = {
    "requirement": "requirements",
    "constraint": "constraints",
    "configuration": "configuration",
    "file_change": "files",
    "conclusion": "conclusions",
}
MAX_FACT_CHARS = 400


@dataclass(frozen=True, kw_only=True, slots=True)
class Fact:
    topic: str
    text: str
    kind: str
    source_uuid: str | None = None


@runtime_checkable
class FactExtractor(Protocol):
    def extract(self, messages: Sequence[Message]) -> list[Fact]: ...


def normalize(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip().lower()
    return text.strip(" .。!！;；:：,，-*")


def fact_hash(text: str) -> str:
    return hashlib.sha256(normalize(text).encode("utf-8")).hexdigest()[:16]


def clean_fact(text: str) -> str:
    flat = re.sub(r"\s+", " ", text).strip()
    return flat if len(flat) <= MAX_FACT_CHARS else flat[: MAX_FACT_CHARS - 1].rstrip() + "…"


# --------------------------------------------------------------------------- extraction

_SENT_SPLIT = re.compile(r"(?<=[.!?。！？；;])\s+|\n+|(?<=[。！？；])")
_CONSTRAINT = re.compile(
    r"\b(?:never|don't|do not|must not|mustn't|should not|shouldn't|cannot|can't|avoid|"
    r"not allowed|no longer|without)\b|不要|不能|禁止|不得|不可|别|切勿|避免",
    re.IGNORECASE,
)
_REQUIREMENT = re.compile(
    r"\b(?:must|should|need to|needs to|required?|requires|always|make sure|ensure|"
    r"please|want)\b|需要|必须|应该|要求|务必|确保|请",
    re.IGNORECASE,
)
_CONFIG = re.compile(
    r"(?-i:\b[A-Z][A-Z0-9_]{2,}=\S+)"  # KEY=VALUE
    r"|(?<![\w-])--[a-z][\w-]+(?:=\S+)?"  # --flag[=value]
    r"|\bport\s*[:=]?\s*\d{2,5}\b|(?:localhost|127\.0\.0\.1|0\.0\.0\.0):\d{2,5}\b"
    r"|\b(?:python|node|django|java|go|rust|numpy|pandas|postgres(?:ql)?|mysql|redis|version)"
    r"(?:\s+|\s*[:=]\s*)v?\d+(?:\.\d+)+\b"
    r"|\b(?:config|settings?|path|dir(?:ectory)?|root)\b\s*(?:is|=|:|to)\s*\S*/\S+"
    r"|端口|配置|版本|环境变量",
    re.IGNORECASE,
)
_CONCLUSION = re.compile(
    r"\b(?:the root cause|root cause is|the (?:issue|problem|bug) (?:is|was)|turns out|"
    r"is caused by|was caused by|fixed|works now|now works|is now working|resolved|"
    r"the fix (?:is|was)|successfully)\b|结论|原因是|根本原因|已修复|修复了|已解决",
    re.IGNORECASE,
)
_TENTATIVE = re.compile(
    r"^(?:let'?s|let me|now,? let|i'll|i will|we'll|we need to check|first,|next,)|\?$",
    re.IGNORECASE,
)
_CODE_BLOCK = re.compile(r"```.*?(?:```|$)", re.S)
_CODE_LINE = re.compile(
    r"^\s*(?:File \"|Traceback|at \S+\(|[\w.\[\]'\"]+\s*=\s*\S|>>>|\$ |import |from \S+ import|def |class |"
    r"return |print\(|#include|[{}()\[\];]|\d+:)"
)


def _prose(text: str) -> str:
    """Text without fenced code blocks and lines that look like code or tracebacks."""
    text = _CODE_BLOCK.sub("\n", text)
    return "\n".join(line for line in text.splitlines() if not _CODE_LINE.match(line))


#: "Decision: ...", "Requirement: ..." lines: stated facts whatever their wording.
_LABELED = re.compile(
    r"^(?P<label>decision|decided|conclusion|requirement|constraint|决定|决策|结论|需求|约束)"
    r"\s*[:：]\s*\S",
    re.IGNORECASE,
)
_LABEL_KIND = {
    "requirement": "requirement",
    "需求": "requirement",
    "constraint": "constraint",
    "约束": "constraint",
}
#: A sentence ending in one of these words was cut off (a wrapped line, a template's piece).
_DANGLING = re.compile(
    r"\b(?:is|are|was|were|be|to|the|a|an|and|or|of|for|with|that|your|our|their|in|on|at|"
    r"by|from|as|if|than|so)$",
    re.IGNORECASE,
)
_LIST_ITEM = re.compile(r"^\s*(?:[-*+>#]|\d+[.)])\s")
_ENDS_CLAUSE = re.compile(r"[.!?:;。！？：；]\s*$")


def _unwrap(text: str) -> str:
    """Join hard-wrapped lines: a line that does not end a clause, followed by one that
    starts in lower case (and is no list item), continues the same sentence."""
    out: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if (
            out
            and stripped
            and stripped[0].islower()
            and out[-1].strip()
            and not _ENDS_CLAUSE.search(out[-1])
            and not _LIST_ITEM.match(line)
        ):
            out[-1] = out[-1].rstrip() + " " + stripped
        else:
            out.append(line)
    return "\n".join(out)


@by_text()  # an agent's messages repeat (the same reminder, a rerun's output)
def _sentences(text: str) -> tuple[str, ...]:
    parts = (s.strip(" -*#>\t") for s in _SENT_SPLIT.split(_unwrap(text)) if s and s.strip())
    return tuple(s for s in parts if s and not _DANGLING.search(s))


@by_text(min_chars=24)
def _user_kind(sent: str) -> str | None:
    """The kind of fact a user sentence states, if any."""
    labeled = _labeled_kind(sent)
    if labeled is not None:
        return labeled
    if _CONSTRAINT.search(sent):
        return "constraint"
    if _CONFIG.search(sent):
        return "configuration"
    if _REQUIREMENT.search(sent):
        return "requirement"
    return None


@by_text(min_chars=24)
def _assistant_kind(sent: str) -> str | None:
    """The kind of fact an assistant sentence states (not a plan or a question), if any."""
    labeled = _labeled_kind(sent)
    if labeled is not None:
        return labeled
    if _TENTATIVE.search(sent):
        return None
    if _CONCLUSION.search(sent):
        return "conclusion"
    if _CONFIG.search(sent):
        return "configuration"
    return None


def _labeled_kind(sentence: str) -> str | None:
    m = _LABELED.match(sentence)
    if m is None:
        return None
    return _LABEL_KIND.get(m.group("label").lower(), "conclusion")


_VERBS = {
    "append": "appended to {f}",
    "move": "moved {d} to {f}",
    "copy": "copied {d} to {f}",
    "delete": "deleted {f}",
    "apply": "applied patch {f}",
}
_VIA = {
    "sed": " (sed -i)",
    "perl": " (perl -i)",
    "tee": " (tee)",
    "echo": " (echo)",
    "printf": " (echo)",
}


def describe_change(op: FileOp) -> str:
    """A file operation as a fact: ``edited a.py (sed -i)``, ``moved a to b`` ..."""
    if op.op in _VERBS:
        return _VERBS[op.op].format(f=op.path, d=op.detail)
    if op.via == "edit":  # SWE-agent's edit of the open file
        return f"edited {op.path}{' ' + op.detail if op.detail else ''} (edit)"
    if op.op == "patch":
        return f"patched {op.path} ({op.via})"
    if op.op == "create":
        return f"created {op.path}" + (" (touch)" if op.via == "touch" else "")
    if op.op == "edit":
        return f"edited {op.path}{_VIA.get(op.via, '')}"
    suffix = _VIA.get(op.via, "" if op.via in ("cat", "") else f" ({op.via})")
    return f"wrote {op.path}{suffix}"


def _file_changes(msg: Message, shell: ShellReader) -> list[str]:
    """Human-readable file changes done by an assistant message's tool calls."""
    out: list[str] = []
    for call in msg.tool_calls:
        eff = shell.read_call(call.name, parse_arguments(call.arguments))
        if eff.kind == "file":
            if eff.ops:
                verb = "created" if eff.subcommand == "create" else "changed"
                out.append(f"{verb} {eff.path} ({call.name})")
        elif eff.kind == "other" and is_write_tool(call.name):
            out.append(f"file change via {call.name}")
        for op in eff.ops if eff.kind == "shell" else ():
            if shell.norm(op.path) is not None:
                out.append(describe_change(op))
    return list(dict.fromkeys(out))


class ExtractiveFactExtractor:
    """Deterministic, rule-based fact extraction (no LLM).

    * user messages: requirements and constraints (must / should / never / 需要 / 不要 ...),
      configuration (KEY=VALUE, --flags, versions, ports, paths in settings);
    * assistant tool calls: file changes (write/edit tools; ``sed -i``, ``cat > f``, ``tee``,
      ``echo > f``, python ``open(f, 'w')``, ``git apply``, ``mv``/``cp``/``rm``, SWE-agent
      ``create``/``edit``);
    * assistant text: conclusions ("the root cause is", "fixed", "works now", 结论 ...) and
      configuration it states (ports, KEY=VALUE, versions);
    * in both: labeled lines ("Decision: ...", "Requirement: ...", "Constraint: ...", 决定：).

    Hard-wrapped lines are joined first, and a sentence left dangling ("... to ensure your
    fix is") is no fact.
    """

    def __init__(self, *, max_per_message: int = 12, max_user_chars: int = 20_000) -> None:
        self.max_per_message = max_per_message
        self.max_user_chars = max_user_chars

    def extract(self, messages: Sequence[Message]) -> list[Fact]:
        facts: list[Fact] = []
        seen: set[str] = set()
        shell = ShellReader()

        def add(kind: str, text: str, msg: Message) -> None:
            text = clean_fact(text)
            key = normalize(text)
            if len(key) < 6 or key in seen:
                return
            seen.add(key)
            facts.append(
                Fact(topic=TOPIC_OF_KIND[kind], text=text, kind=kind, source_uuid=msg.uuid)
            )

        for msg in messages:
            if msg.role == "user" or msg.role == "developer":
                text = _prose(msg.text[: self.max_user_chars])
                self._sentences_of(text, 6, _user_kind, msg, add)
            elif msg.role == "assistant":
                for change in _file_changes(msg, shell):
                    add("file_change", change[:1].upper() + change[1:], msg)
                self._sentences_of(_prose(msg.text), 8, _assistant_kind, msg, add)
            elif msg.role == "tool":
                shell.observe_output(msg.text)
        return facts

    def _sentences_of(
        self,
        text: str,
        shortest: int,
        kind_of: Callable[[str], str | None],
        msg: Message,
        add: Callable[[str, str, Message], None],
    ) -> None:
        n = 0
        for sent in _sentences(text):
            if n >= self.max_per_message or not shortest <= len(sent) <= 600:
                continue
            kind = kind_of(sent)
            if kind is not None:
                add(kind, sent, msg)
                n += 1


# --------------------------------------------------------------------------- LLM extraction


class _HasText(Protocol):
    @property
    def text(self) -> str: ...


class ChatModelLike(Protocol):
    """Structural shape of :class:`contextfold.providers.llm.ChatModel` used here."""

    def complete(self, messages: list[JSONObject], max_tokens: int = ...) -> _HasText: ...


FACT_PROMPT = """Extract durable facts from the conversation below, for an agent's long-term memory.
Keep only facts worth remembering after the messages are deleted: the user's requirements and
constraints, configuration (settings, versions, ports, paths, flags), file changes (which file,
what changed), and conclusions (root causes, what was fixed, what works). No speculation, no
plans that were not carried out. Write one JSON object per line, nothing else:
{{"topic": "<short topic, e.g. requirements, configuration, files, conclusions>", "kind": "<requirement|configuration|file_change|conclusion|constraint>", "text": "<one self-contained sentence>", "msg": <message number>}}
If there is nothing worth keeping, answer NONE.

Conversation:
{messages}"""


def _render_for_prompt(messages: Sequence[Message], max_chars: int) -> str:
    lines = []
    for i, m in enumerate(messages):
        text = m.text
        for call in m.tool_calls:
            text += f"\n[call {call.name} {call.arguments}]"
        if len(text) > 2_000:
            text = text[:1_500] + " … " + text[-400:]
        lines.append(f"#{i} {m.role}: {text}")
    out = "\n".join(lines)
    return (
        out if len(out) <= max_chars else out[: max_chars // 2] + "\n…\n" + out[-max_chars // 2 :]
    )


def parse_fact_lines(text: str, messages: Sequence[Message]) -> list[Fact]:
    """Tolerant parsing of the model's answer: JSON lines, a JSON array, code fences."""
    text = re.sub(r"```(?:json|jsonl)?", "", text).strip()
    items: list[Any] = []
    if text.startswith("["):
        try:
            loaded = json.loads(text)
            items = loaded if isinstance(loaded, list) else []
        except ValueError:
            items = []
    if not items:
        for line in text.splitlines():
            line = line.strip().rstrip(",")
            if line.startswith("{") and line.endswith("}"):
                try:
                    items.append(json.loads(line))
                except ValueError:
                    continue
    facts: list[Fact] = []
    for item in items:
        if not isinstance(item, Mapping):
            continue
        body = item.get("text")
        kind = str(item.get("kind") or "").strip().lower().replace("-", "_").replace(" ", "_")
        if not isinstance(body, str) or not body.strip():
            continue
        if kind not in KINDS:
            kind = {
                "file": "file_change",
                "config": "configuration",
                "requirements": "requirement",
            }.get(kind, "conclusion")
        topic = str(item.get("topic") or TOPIC_OF_KIND[kind]).strip() or TOPIC_OF_KIND[kind]
        ref = item.get("msg")
        uuid = (
            messages[ref].uuid
            if isinstance(ref, int) and not isinstance(ref, bool) and 0 <= ref < len(messages)
            else None
        )
        facts.append(Fact(topic=topic[:60], text=clean_fact(body), kind=kind, source_uuid=uuid))
    return facts


class LLMFactExtractor:
    """Facts from a chat model (JSON lines); falls back to extractive on any failure."""

    def __init__(
        self,
        model: ChatModelLike,
        *,
        max_tokens: int = 1_500,
        max_input_chars: int = 60_000,
        prompt: str = FACT_PROMPT,
        fallback: FactExtractor | None = None,
    ) -> None:
        if "{messages}" not in prompt:
            raise ConfigError("the fact prompt must contain {messages}")
        self.model = model
        self.max_tokens = max_tokens
        self.max_input_chars = max_input_chars
        self.prompt = prompt
        self.fallback: FactExtractor = fallback or ExtractiveFactExtractor()
        #: Why the last call fell back to extractive extraction (None when it did not).
        self.last_fallback: str | None = None

    def extract(self, messages: Sequence[Message]) -> list[Fact]:
        self.last_fallback = None
        if not messages:
            return []
        body = _render_for_prompt(messages, self.max_input_chars)
        request: list[JSONObject] = [
            {"role": "user", "content": self.prompt.replace("{messages}", body)}
        ]
        model = self.model
        acomplete = getattr(model, "acomplete", None)
        try:
            # inside ContextManager.aprepare/acall the request goes through the model's async
            # client on the caller's event loop (contextfold.core.aio); otherwise it is a sync call
            answer = call_model(
                lambda: model.complete(request, max_tokens=self.max_tokens),
                (lambda: acomplete(request, max_tokens=self.max_tokens))
                if callable(acomplete)
                else None,
            ).text
        except Exception as exc:  # any provider failure: fall back, never lose the flush
            return self._fall_back(f"model call failed: {type(exc).__name__}: {exc}", messages)
        if not isinstance(answer, str):
            return self._fall_back("model returned no text", messages)
        if answer.strip().upper().startswith("NONE"):
            return []
        facts = parse_fact_lines(answer, messages)
        if not facts:
            return self._fall_back("no fact lines could be parsed from the answer", messages)
        return facts

    def _fall_back(self, reason: str, messages: Sequence[Message]) -> list[Fact]:
        self.last_fallback = f"LLM fact extraction failed ({reason}); used extractive facts"
        log.warning("%s", self.last_fallback)
        return self.fallback.extract(messages)


__all__ = [
    "FACT_PROMPT",
    "KINDS",
    "MAX_FACT_CHARS",
    "TOPIC_OF_KIND",
    "ChatModelLike",
    "ExtractiveFactExtractor",
    "Fact",
    "FactExtractor",
    "LLMFactExtractor",
    "clean_fact",
    "describe_change",
    "fact_hash",
    "normalize",
    "parse_fact_lines",
]
