"""Long-term memory: flush facts before compaction (seed 002, section 3.1).

Before messages leave the view, facts (requirements, configuration, file changes, conclusions,
constraints) are extracted and written to ``<ws>/memory/MEMORY.md`` (an index, one line per
fact with a link to its topic file) and ``<ws>/memory/<topic>.md``. Writing is incremental and
never duplicates a fact: each fact line carries a hash of its normalized text, and the set of
known hashes is recovered by parsing the topic files, so the Markdown files are the only state.

Extraction is extractive (deterministic, no LLM) by default; :class:`LLMFactExtractor` asks a
chat model for JSON lines and falls back to the extractive one when that fails.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import math
import re
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from .errors import StorageError, ToolArgumentsError, UnsafeIdError
from .messages import Message
from .paths import Workspace, confined, safe_name
from .tools import Tool

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
INDEX_NAME = "MEMORY.md"


@dataclass(frozen=True, kw_only=True, slots=True)
class Fact:
    topic: str
    text: str
    kind: str
    source_uuid: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryHit:
    topic: str
    kind: str
    text: str
    score: float
    #: The topic file, relative to the memory folder (e.g. ``files.md``).
    path: str


@runtime_checkable
class FactExtractor(Protocol):
    def extract(self, messages: Sequence[Message]) -> list[Fact]: ...


def normalize(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip().lower()
    return text.strip(" .。!！;；:：,，-*")


def fact_hash(text: str) -> str:
    return hashlib.sha256(normalize(text).encode("utf-8")).hexdigest()[:16]


def _clean(text: str) -> str:
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
_WRITE_TOOLS = re.compile(
    r"^(?:write|write_file|create_file|edit|edit_file|str_replace(?:_editor|_based_edit_tool)?|"
    r"apply_patch|patch|multi_edit|multiedit|file_write|file_edit|notebook_edit|insert)$",
    re.IGNORECASE,
)
_SHELL_TOOLS = re.compile(r"^(?:bash|shell|sh|execute|run|terminal|exec|run_command|cmd)$", re.I)
_FILE = r"""(?P<f>[\w./~+-][\w./~+@-]*)"""
_SHELL_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(
            r"\bsed\s+(?:-\w+\s+)*-i\S*\s+(?:(?:-e\s+)?(?:'[^']*'|\"[^\"]*\"|\S+)\s+)+"
            + _FILE
            + r"\s*(?:$|[;&|\n])"
        ),
        "edited {f} (sed -i)",
    ),
    (re.compile(r"\bcat\s+(?:<<-?\s*['\"]?\w+['\"]?\s*)?>>\s*" + _FILE), "appended to {f}"),
    (re.compile(r"\bcat\s+(?:<<-?\s*['\"]?\w+['\"]?\s*)?>\s*" + _FILE), "wrote {f}"),
    (re.compile(r"\btee\s+(?:-a\s+)?" + _FILE), "wrote {f} (tee)"),
    (re.compile(r"\b(?:echo|printf)\b[^\n;&|]*?(?<![\d&])>>?\s*" + _FILE), "wrote {f} (echo)"),
    (re.compile(r"open\(\s*['\"]" + _FILE + r"['\"]\s*,\s*['\"][wa]"), "wrote {f} (python)"),
    (re.compile(r"\b(?:git\s+apply|patch\s+-p\d)\s*(?:<\s*)?" + _FILE), "applied patch {f}"),
    (re.compile(r"\bmv\s+(?:-\w+\s+)*(?P<a>\S+)\s+" + _FILE), "moved {a} to {f}"),
    (re.compile(r"\bcp\s+(?:-\w+\s+)*(?P<a>\S+)\s+" + _FILE), "copied {a} to {f}"),
    (re.compile(r"\brm\s+(?:-\w+\s+)*" + _FILE), "deleted {f}"),
    (re.compile(r"^\s*create\s+" + _FILE, re.M), "created {f}"),
)
_SWE_OPEN = re.compile(r"^\s*(?:open|create)\s+\"?(?P<f>[^\s\"]+)", re.M)
_SWE_EDIT = re.compile(r"^\s*edit(?:\s+(?P<r>\d+:\d+))?\s*$", re.M)
_IGNORED_FILES = {"/dev/null", "/dev/stdout", "/dev/stderr", "&1", "&2", "EOF", "-"}


_CODE_BLOCK = re.compile(r"```.*?(?:```|$)", re.S)
_CODE_LINE = re.compile(
    r"^\s*(?:File \"|Traceback|at \S+\(|[\w.\[\]'\"]+\s*=\s*\S|>>>|\$ |import |from \S+ import|def |class |"
    r"return |print\(|#include|[{}()\[\];]|\d+:)"
)


def _prose(text: str) -> str:
    """Text without fenced code blocks and lines that look like code or tracebacks."""
    text = _CODE_BLOCK.sub("\n", text)
    return "\n".join(line for line in text.splitlines() if not _CODE_LINE.match(line))


def _sentences(text: str) -> list[str]:
    return [s.strip(" -*#>\t") for s in _SENT_SPLIT.split(text) if s and s.strip()]


def _file_changes(msg: Message, open_file: list[str]) -> list[str]:
    """Human-readable file changes done by an assistant message's tool calls."""
    out: list[str] = []
    for call in msg.tool_calls:
        try:
            args = call.parsed_arguments()
        except ValueError:
            args = {}
        if not isinstance(args, dict):
            args = {}
        if _WRITE_TOOLS.match(call.name):
            path = next(
                (
                    str(args[k])
                    for k in ("path", "file_path", "filepath", "filename", "file", "target_file")
                    if isinstance(args.get(k), str)
                ),
                None,
            )
            verb = "created" if args.get("command") == "create" else "changed"
            out.append(f"{verb} {path} ({call.name})" if path else f"file change via {call.name}")
            continue
        command = args.get("command") or args.get("cmd") or args.get("script")
        if not isinstance(command, str) or not _SHELL_TOOLS.match(call.name):
            continue
        for m in _SWE_OPEN.finditer(command):
            open_file[:] = [m.group("f")]
        for m in _SWE_EDIT.finditer(command.split("\n", 1)[0] + "\n"):
            target = open_file[0] if open_file else "the open file"
            rng = f" lines {m.group('r')}" if m.group("r") else ""
            out.append(f"edited {target}{rng} (edit)")
        for pattern, template in _SHELL_RULES:
            if not template:
                continue
            for m in pattern.finditer(command):
                groups = {k: v for k, v in m.groupdict().items() if v}
                f = groups.get("f", "")
                if f in _IGNORED_FILES or f.startswith("&") or not f.strip("./"):
                    continue
                out.append(template.format(f=f, a=groups.get("a", "")))
    return list(dict.fromkeys(out))


class ExtractiveFactExtractor:
    """Deterministic, rule-based fact extraction (no LLM).

    * user messages: requirements and constraints (must / should / never / 需要 / 不要 ...),
      configuration (KEY=VALUE, --flags, versions, ports, paths in settings);
    * assistant tool calls: file changes (write/edit tools; ``sed -i``, ``cat > f``, ``tee``,
      ``echo > f``, python ``open(f, 'w')``, ``git apply``, ``mv``/``cp``/``rm``, SWE-agent
      ``create``/``edit``);
    * assistant text: conclusions ("the root cause is", "fixed", "works now", 结论 ...).
    """

    def __init__(self, *, max_per_message: int = 12, max_user_chars: int = 20_000) -> None:
        self.max_per_message = max_per_message
        self.max_user_chars = max_user_chars

    def extract(self, messages: Sequence[Message]) -> list[Fact]:
        facts: list[Fact] = []
        seen: set[str] = set()
        open_file: list[str] = []

        def add(kind: str, text: str, msg: Message) -> None:
            text = _clean(text)
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
                n = 0
                for sent in _sentences(text):
                    if n >= self.max_per_message or not 6 <= len(sent) <= 600:
                        continue
                    if _CONSTRAINT.search(sent):
                        add("constraint", sent, msg)
                    elif _CONFIG.search(sent):
                        add("configuration", sent, msg)
                    elif _REQUIREMENT.search(sent):
                        add("requirement", sent, msg)
                    else:
                        continue
                    n += 1
            elif msg.role == "assistant":
                for change in _file_changes(msg, open_file):
                    add("file_change", change[:1].upper() + change[1:], msg)
                n = 0
                for sent in _sentences(_prose(msg.text)):
                    if n >= self.max_per_message or not 8 <= len(sent) <= 600:
                        continue
                    if _CONCLUSION.search(sent) and not _TENTATIVE.search(sent):
                        add("conclusion", sent, msg)
                        n += 1
        return facts


# --------------------------------------------------------------------------- LLM extraction


class _HasText(Protocol):
    @property
    def text(self) -> str: ...


class ChatModelLike(Protocol):
    """Structural shape of :class:`contextfold.llm.ChatModel` used here."""

    def complete(self, messages: list[dict[str, Any]], max_tokens: int = ...) -> _HasText: ...


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
        facts.append(Fact(topic=topic[:60], text=_clean(body), kind=kind, source_uuid=uuid))
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
            raise ValueError("the fact prompt must contain {messages}")
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
        request = [{"role": "user", "content": self.prompt.replace("{messages}", body)}]
        try:
            answer = self.model.complete(request, max_tokens=self.max_tokens).text
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


# --------------------------------------------------------------------------- store

_FACT_LINE = re.compile(
    r"^- \((?P<kind>[a-z_]+)\) (?P<text>.*?) <!-- cf:(?P<h>[0-9a-f]+)(?: [^>]*)? -->$"
)
_TOKEN = re.compile(r"[a-z0-9_]+|[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


def _terms(text: str) -> list[str]:
    toks = _TOKEN.findall(text.lower())
    out = [t for t in toks if len(t) > 1 or not t.isascii()]
    # CJK bigrams make multi-character words rank above scattered single characters
    cjk = [t for t in toks if not t.isascii()]
    out.extend(a + b for a, b in itertools.pairwise(cjk))
    return out


class MemoryStore:
    """``<ws>/memory/``: MEMORY.md (index) plus one Markdown file per topic."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self.dir = workspace.memory_dir
        self._lock = threading.Lock()
        self._hashes: set[str] | None = None

    @property
    def index_path(self) -> Path:
        return self.dir / INDEX_NAME

    def topic_file(self, topic: str) -> str:
        name = safe_name(topic.strip().lower().replace(" ", "-") or "misc", what="topic")
        return "topics.md" if name.upper() == "MEMORY" else f"{name}.md"

    def _load_facts(self) -> list[tuple[str, str, str, str]]:
        """(topic file, kind, text, hash) of every stored fact."""
        out: list[tuple[str, str, str, str]] = []
        if not self.dir.is_dir():
            return out
        for path in sorted(self.dir.glob("*.md")):
            if path.name == INDEX_NAME:
                continue
            try:
                lines = path.read_text(encoding="utf-8").splitlines()
            except OSError as exc:
                raise StorageError(f"cannot read {path}: {exc}") from exc
            for line in lines:
                m = _FACT_LINE.match(line)
                if m:
                    out.append((path.name, m.group("kind"), m.group("text"), m.group("h")))
        return out

    def flush(self, facts: Sequence[Fact]) -> int:
        """Write the facts not stored yet; returns how many were new."""
        with self._lock:
            if self._hashes is None:
                self._hashes = {h for *_, h in self._load_facts()}
            by_file: dict[str, list[str]] = {}
            titles: dict[str, str] = {}
            index_lines: list[str] = []
            for fact in facts:
                text = _clean(fact.text)
                if not text:
                    continue
                h = fact_hash(text)
                if h in self._hashes:
                    continue
                self._hashes.add(h)
                kind = fact.kind if fact.kind in KINDS else "conclusion"
                fname = self.topic_file(fact.topic or TOPIC_OF_KIND[kind])
                titles.setdefault(fname, fact.topic or TOPIC_OF_KIND[kind])
                src = f" src:{safe_name(fact.source_uuid)}" if fact.source_uuid else ""
                by_file.setdefault(fname, []).append(f"- ({kind}) {text} <!-- cf:{h}{src} -->")
                index_lines.append(f"- [{titles[fname]}]({fname}) ({kind}) {text}")
            if not index_lines:
                return 0
            try:
                self.dir.mkdir(parents=True, exist_ok=True)
                for fname, lines in by_file.items():
                    path = self.dir / fname
                    head = "" if path.exists() else f"# {titles[fname]}\n\n"
                    with path.open("a", encoding="utf-8") as fh:
                        fh.write(head + "\n".join(lines) + "\n")
                head = (
                    ""
                    if self.index_path.exists()
                    else "# Memory\n\nOne line per fact; details in the topic files.\n\n"
                )
                with self.index_path.open("a", encoding="utf-8") as fh:
                    fh.write(head + "\n".join(index_lines) + "\n")
            except OSError as exc:
                self._hashes = None  # re-read the files next time
                raise StorageError(f"cannot write memory in {self.dir}: {exc}") from exc
            return len(index_lines)

    def search(self, query: str, limit: int = 10) -> list[MemoryHit]:
        """Facts ranked by a BM25-like score over their words (CJK characters and bigrams)."""
        q = set(_terms(query))
        if not q or limit <= 0:
            return []
        facts = self._load_facts()
        docs = [_terms(text) for _, _, text, _ in facts]
        n = len(docs)
        if not n:
            return []
        avg = sum(len(d) for d in docs) / n or 1.0
        df: Counter[str] = Counter()
        for d in docs:
            df.update(set(d) & q)
        scored: list[tuple[float, int]] = []
        for i, d in enumerate(docs):
            tf = Counter(t for t in d if t in q)
            if not tf:
                continue
            score = 0.0
            for term, f in tf.items():
                idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                score += idf * f * 2.2 / (f + 1.2 * (0.25 + 0.75 * len(d) / avg))
            scored.append((score, i))
        scored.sort(key=lambda x: (-x[0], x[1]))
        hits = []
        for score, i in scored[:limit]:
            fname, kind, text, _ = facts[i]
            hits.append(
                MemoryHit(topic=fname[:-3], kind=kind, text=text, score=round(score, 4), path=fname)
            )
        return hits

    def topics(self) -> list[str]:
        if not self.dir.is_dir():
            return []
        return sorted(p.name for p in self.dir.glob("*.md") if p.name != INDEX_NAME)

    def get(self, topic_or_path: str | None = None) -> str:
        """MEMORY.md (default) or a topic file, by topic name or file name; confined to memory/."""
        raw = (topic_or_path or "").strip()
        if raw in ("", INDEX_NAME, "MEMORY", "index"):
            name = INDEX_NAME
        elif "/" in raw or "\\" in raw or ".." in raw or "\x00" in raw:
            target = self.dir / raw
            confined(self.dir, target)  # raises UnsafeIdError for anything outside
            if target.parent.resolve() != self.dir.resolve():
                raise UnsafeIdError(f"memory path {raw!r} must name a file in {self.dir}")
            name = target.name
        elif raw.endswith(".md"):
            name = raw if safe_name(raw, what="memory file") == raw else self.topic_file(raw[:-3])
        else:
            name = self.topic_file(raw)
        path = self.dir / name
        confined(self.dir, path)
        try:
            return path.read_text(encoding="utf-8")
        except FileNotFoundError:
            if name == INDEX_NAME:
                return "# Memory\n\n(no facts stored yet)\n"
            known = ", ".join(t[:-3] for t in self.topics()) or "none"
            raise ToolArgumentsError(f"no memory topic {raw!r}; topics: {known}") from None
        except OSError as exc:
            raise StorageError(f"cannot read {path}: {exc}") from exc


def memory_tools(store: MemoryStore) -> list[Tool]:
    """``memory_search`` {query, limit?} and ``memory_get`` {topic?}."""

    def memory_search(args: Mapping[str, Any]) -> str:
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ToolArgumentsError("memory_search: 'query' must be a non-empty string")
        limit = args.get("limit", 10)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ToolArgumentsError("memory_search: 'limit' must be an integer >= 1")
        hits = store.search(query, min(limit, 50))
        if not hits:
            return f"No memory matches {json.dumps(query, ensure_ascii=False)}."
        lines = [f"{len(hits)} fact(s), best first:"]
        lines.extend(f"- [{h.topic}] ({h.kind}) {h.text}" for h in hits)
        lines.append('Read a whole topic with memory_get {"topic": ...}.')
        return "\n".join(lines)

    def memory_get(args: Mapping[str, Any]) -> str:
        topic = args.get("topic")
        if topic is not None and not isinstance(topic, str):
            raise ToolArgumentsError("memory_get: 'topic' must be a string")
        try:
            return store.get(topic)
        except UnsafeIdError as exc:
            raise ToolArgumentsError(f"memory_get: {exc}") from None

    return [
        Tool(
            name="memory_search",
            description="Search long-term memory (facts kept from compacted conversation).",
            parameters={
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "Words to look for."},
                    "limit": {"type": "integer", "minimum": 1, "description": "Max facts (10)."},
                },
                "required": ["query"],
            },
            handler=memory_search,
        ),
        Tool(
            name="memory_get",
            description="Read MEMORY.md (the index, default) or one topic file of memory.",
            parameters={
                "type": "object",
                "properties": {
                    "topic": {"type": "string", "description": "Topic name or file (optional)."}
                },
                "required": [],
            },
            handler=memory_get,
        ),
    ]


__all__ = [
    "ExtractiveFactExtractor",
    "Fact",
    "FactExtractor",
    "LLMFactExtractor",
    "MemoryHit",
    "MemoryStore",
    "memory_tools",
    "parse_fact_lines",
]
