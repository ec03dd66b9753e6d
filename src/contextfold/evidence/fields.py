"""What a piece of evidence is about, as pure functions of the tool call (issue 11, part 2).

A shell output is found by its command; the output of a file tool (Claude Code's ``Read`` /
``Write`` / ``Edit`` / ``MultiEdit`` / ``Grep`` / ``Glob``, SWE-agent's and OpenHands'
``str_replace_editor``, ``apply_patch``-style tools) by the files, patterns and URLs its call
names. :func:`call_fields` reads one call into :class:`CallFields`; :func:`evidence_fields`
turns a pointer into the named text fields a search backend indexes; :func:`path_suffixes` and
:func:`normalize_path` make ``./pkg/x.py``, ``pkg/x.py`` and ``/testbed/pkg/x.py`` meet.
Nothing here does I/O.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.shell import (
    PATH_KEYS,
    CallEffects,
    Segment,
    ShellReader,
    parse_arguments,
    simple_commands,
)
from ..jsontypes import JSON
from .classify import normalize_command
from .model import EvidencePointer

#: contextfold's own agent tools: their results are views of evidence, never evidence.
OWN_TOOLS: frozenset[str] = frozenset(
    {
        "recall",
        "read_offloaded",
        "session_list",
        "session_history",
        "session_search",
        "memory_search",
        "memory_get",
    }
)
#: Tools whose only job is to run a command line.
MAX_COMMAND_CHARS = 500
MAX_ITEMS = 24

_READ_TOOLS = {"read", "read_file", "view", "view_file", "open_file", "cat", "notebookread"}
_WRITE_TOOLS = {"write", "write_file", "create_file", "create"}
_EDIT_TOOLS = {"edit", "multiedit", "edit_file", "notebookedit", "replace", "str_replace"}
_SEARCH_TOOLS = {"grep", "glob", "search", "search_file", "search_dir", "find_file", "ls"}
_PATCH_TOOLS = {"apply_patch", "patch", "applypatch"}
_LONG_KEYS = {
    "content",
    "file_text",
    "old_string",
    "new_string",
    "old_str",
    "new_str",
    "edits",
    "input",
    "patch",
    "diff",
}
_NO_PATHS = {"cd", "pushd", "popd", "echo", "printf", "export", "source", ".", "pwd", "true"}
_SHELL_VIEW = {"cat", "nl", "head", "tail", "less", "more", "bat", "sed", "open", "view"}
_GREP = {"grep", "egrep", "rg", "ag", "head", "tail", "wc", "sort", "uniq", "cut"}
_SHELL_SEARCH = {"grep", "egrep", "rg", "ag", "find", "find_file", "search_file", "search_dir"}
_PATCH_HEADER = re.compile(
    r"^\*\*\* (?:Update|Add|Delete) File: (\S+)|^\+\+\+ (?:b/)?(\S+)|^--- (?:a/)?(\S+)", re.M
)
_URL = re.compile(r"https?://[^\s'\"<>`)]+")
_SED_RANGE = re.compile(r"^(\d+)(?:,(\d+))?p$")
_WORDISH = re.compile(r"[^\w]+")


@dataclass(frozen=True, kw_only=True, slots=True)
class CallFields:
    """What one tool call was about.

    ``action`` is ``read`` (shows a file's content), ``write``, ``edit``, ``search``, ``run``
    (anything else a shell does) or ``other``; ``lines`` is the line range a read shows
    (first, last; last 0 when open-ended)."""

    tool: str
    command: str
    paths: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()
    urls: tuple[str, ...] = ()
    action: str = "other"
    lines: tuple[int, int] | None = None
    shell: bool = False


def normalize_path(path: str) -> str:
    """A path as compared: quotes, ``./`` and leading ``/`` dropped, no doubled slashes."""
    p = path.strip().strip("'\"").replace("\\", "/")
    p = re.sub(r"/{2,}", "/", p)
    while p.startswith("./"):
        p = p[2:]
    return p.strip("/")


def path_suffixes(path: str) -> tuple[str, ...]:
    """Every trailing run of path components, longest first: ``a/b/c.py``, ``b/c.py``,
    ``c.py``. Two paths name the same file when one is a suffix of the other."""
    parts = [p for p in normalize_path(path).split("/") if p and p != "."]
    return tuple("/".join(parts[i:]) for i in range(len(parts)))


def _plain_path(token: str) -> bool:
    if not token or token.startswith("-") or len(token) > 300 or "://" in token or "::" in token:
        return False
    if any(c in token for c in "*$?{}`()<>|;'\" \t\n=,"):
        return False
    last = token.rstrip("/").rsplit("/", 1)[-1]
    return "/" in token or ("." in last[1:] and not last.replace(".", "").isdigit())


def _dedupe(items: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(i for i in items if i))[:MAX_ITEMS]


def _lower(name: str) -> str:
    return name.lower().replace("-", "_")


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:59] + "…"


def _human(name: str, args: Mapping[str, Any]) -> str:
    """A short readable form of a non-shell call: ``Read /x.py offset=10 limit=40``."""
    parts = [name]
    sub = args.get("command")
    if isinstance(sub, str) and sub and " " not in sub:
        parts.append(sub)
    path = next((args[k] for k in PATH_KEYS if isinstance(args.get(k), str) and args[k]), None)
    if path:
        parts.append(path)
    for key in sorted(args):
        if key in PATH_KEYS or key == "command" or key in _LONG_KEYS:
            continue
        parts.append(f"{key}={_short(args[key])}")
    return " ".join(parts)[:MAX_COMMAND_CHARS]


def _range(args: Mapping[str, Any]) -> tuple[int, int] | None:
    rng = args.get("view_range")
    if isinstance(rng, list | tuple) and len(rng) == 2 and all(isinstance(v, int) for v in rng):
        return int(rng[0]), max(0, int(rng[1]))
    offset, limit = args.get("offset"), args.get("limit")
    if isinstance(limit, int) and not isinstance(limit, bool):
        first = offset if isinstance(offset, int) and offset > 0 else 1
        return first, first + limit - 1
    if isinstance(offset, int) and not isinstance(offset, bool) and offset > 0:
        return offset, 0
    for a, b in (("start_line", "end_line"), ("line_start", "line_end")):
        if isinstance(args.get(a), int):
            end = args.get(b)
            return int(args[a]), int(end) if isinstance(end, int) else 0
    return None


def _tool_action(name: str, args: Mapping[str, Any]) -> str:
    low = _lower(name)
    sub = args.get("command")
    if isinstance(sub, str) and low in ("str_replace_editor", "str_replace_based_edit_tool"):
        if sub == "view":
            return "read"
        if sub == "create":
            return "write"
        return "edit"
    if low in _READ_TOOLS:
        return "read"
    if low in _WRITE_TOOLS:
        return "write"
    if low in _EDIT_TOOLS:
        return "edit"
    if low in _SEARCH_TOOLS:
        return "search"
    if low in _PATCH_TOOLS or "patch" in low:
        return "edit"
    return "other"


def _patch_paths(text: str) -> list[str]:
    out: list[str] = []
    for m in _PATCH_HEADER.finditer(text):
        path = next(g for g in m.groups() if g is not None)
        if path != "/dev/null":
            out.append(path)
    return out


#: Options of grep / rg / ag whose value is the next word (``-A 20``: 20 is no pattern).
_GREP_VALUED = frozenset(
    {"-A", "-B", "-C", "-m", "-d", "-D", "-g", "-t", "-T", "--include", "--exclude"}
    | {"--exclude-dir", "--context", "--max-count", "--glob", "--type", "--after-context"}
    | {"--before-context", "--max-depth"}
)


def _search_operands(args: list[str]) -> list[str]:
    """A search's pattern (first) and paths: ``-e PATTERN`` or the first operand, option
    values left out."""
    out: list[str] = []
    explicit: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-e", "--regexp") and i + 1 < len(args):
            explicit.append(args[i + 1])
            i += 2
            continue
        if a in _GREP_VALUED:
            i += 2
            continue
        if not a.startswith("-"):
            out.append(a)
        i += 1
    return explicit[:1] + out if explicit else out


def _segment_fields(
    seg: Segment, paths: list[str], patterns: list[str], lines: tuple[int, int] | None
) -> tuple[int, int] | None:
    """Add one command's paths and patterns; the line range it reads (the first one)."""
    pos = [a for a in seg.args if not a.startswith("-")]
    patterns += [p for p in pos if "::" in p]
    if seg.prog in ("grep", "egrep", "rg", "ag") and pos:
        pos = _search_operands(seg.args)
        patterns += pos[:1]
        paths += [p for p in pos[1:] if _plain_path(p)]
    elif seg.prog == "find":
        for i, a in enumerate(seg.args[:-1]):
            if a in ("-name", "-iname", "-path"):
                patterns.append(seg.args[i + 1])
        paths += [p for p in pos[:1] if _plain_path(p) and p not in (".", "/")]
    elif seg.prog == "sed" and pos:
        m = _SED_RANGE.match(pos[0])
        if m and lines is None:
            lines = (int(m.group(1)), int(m.group(2) or m.group(1)))
    elif seg.prog == "head" and lines is None:
        n = next((a for a in seg.args if a.isdigit()), None)
        if n is not None:
            lines = (1, int(n))
    elif seg.prog in ("python", "python3", "pytest", "node", "bash", "sh", "ruby", "go"):
        paths += [p for p in pos[:3] if _plain_path(p)]
    else:
        paths += [p for p in pos if _plain_path(p)]
    paths += [p.split("::", 1)[0] for p in pos if "::" in p]
    return lines


def _shell_action(eff: CallEffects, progs: list[str]) -> str:
    """What a command line does: edit / write files, read them, search, or run."""
    if eff.writes or any(op.writes for op in eff.ops):
        return "edit" if any(op.op in ("edit", "patch") for op in eff.ops) else "write"
    if (
        eff.reads
        and all(p in _SHELL_VIEW or p in _GREP for p in progs)
        and any(seg.prog in _SHELL_VIEW and seg.reads for seg in eff.segments)
    ):
        return "read"
    if progs and progs[0] in _SHELL_SEARCH:
        return "search"
    return "run"


@functools.lru_cache(maxsize=4096)  # the same call is read at ingest, as evidence, in summaries
def _shell_fields(name: str, command: str) -> CallFields:
    reader = ShellReader()
    eff = reader.read_call(name, {"command": command})
    paths: list[str] = [op.path for op in eff.ops if op.path] + list(eff.writes) + list(eff.reads)
    patterns: list[str] = []
    progs: list[str] = []
    lines: tuple[int, int] | None = None
    for seg in eff.segments:
        if seg.prog in _NO_PATHS or not seg.prog:
            continue
        progs.append(seg.prog)
        lines = _segment_fields(seg, paths, patterns, lines)
    for _tokens, body in simple_commands(command):
        if body:
            paths += _patch_paths(body)
    urls = _URL.findall(command)
    action = _shell_action(eff, progs)
    return CallFields(
        tool=name,
        command=command[:MAX_COMMAND_CHARS],
        paths=_dedupe([p.strip("'\"") for p in paths if _plain_path(p.strip("'\""))]),
        patterns=_dedupe(patterns),
        urls=_dedupe(urls),
        action=action,
        lines=lines if action == "read" else None,
        shell=True,
    )


def call_fields(name: str, arguments: str | Mapping[str, JSON] | None) -> CallFields:
    """What the call ``name(arguments)`` was about (a shell command or a file tool)."""
    if isinstance(arguments, str):  # as a call carries them: read once per distinct call
        return _call_fields_of_text(name, arguments)
    return _call_fields(name, arguments)


@functools.lru_cache(maxsize=16_384)  # a call is read when stored, as evidence, in summaries
def _call_fields_of_text(name: str, arguments: str) -> CallFields:
    return _call_fields(name, arguments)


def _call_fields(name: str, arguments: str | Mapping[str, JSON] | None) -> CallFields:
    args = parse_arguments(arguments)
    low = _lower(name)
    cmd: str | None = None
    for key in ("command", "cmd", "script"):
        value = args.get(key)
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            value = " ".join(value)
        if isinstance(value, str):
            cmd = value
            break
    editor = low in ("str_replace_editor", "str_replace_based_edit_tool") or (
        cmd is not None and " " not in cmd.strip() and any(k in args for k in PATH_KEYS)
    )
    if cmd is not None and cmd.strip() and not editor:
        return _shell_fields(name, cmd)
    paths: list[str] = [
        str(args[k]) for k in PATH_KEYS if isinstance(args.get(k), str) and args.get(k)
    ]
    for key in ("paths", "files", "file_paths"):
        value = args.get(key)
        if isinstance(value, list):
            paths += [str(v) for v in value if isinstance(v, str)]
    for key in ("patch", "input", "diff"):
        value = args.get(key)
        if isinstance(value, str):
            paths += _patch_paths(value)
    patterns = [
        str(args[k]) for k in ("pattern", "query", "regex", "glob") if isinstance(args.get(k), str)
    ]
    urls: list[str] = []
    for key in ("url", "uri", "href"):
        value = args.get(key)
        if isinstance(value, str):
            urls.append(value)
    action = _tool_action(name, args)
    if action == "other" and low in _PATCH_TOOLS:
        action = "edit"
    return CallFields(
        tool=name,
        command=_human(name, args),
        paths=_dedupe([p for p in paths if p.strip()]),
        patterns=_dedupe(patterns),
        urls=_dedupe(urls),
        action=action,
        lines=_range(args) if action == "read" else None,
    )


def is_own_tool(name: str | None) -> bool:
    """Whether ``name`` is one of contextfold's own tools (recall, read_offloaded ...)."""
    return name is not None and name in OWN_TOOLS


def command_head(command: str) -> str:
    """The first line of a command, ``cd DIR &&`` steps dropped, blanks collapsed: how a user
    names a multi-line command (a heredoc, a script)."""
    cmd = command.strip()
    first = cmd.split("\n", 1)[0]
    head = normalize_command(first)
    if not head and "\n" in cmd:  # "cd /x &&" alone on the first line
        head = normalize_command(cmd).split("\n", 1)[0]
    return head


def call_key(tool: str | None, command: str | None, shell: bool) -> str:
    """What makes two calls "the same call": runs of one command (by its first line), or one
    file tool with the same arguments."""
    if shell:
        return "sh:" + command_head(command or "")
    return f"{tool or ''}:{normalize_command(command or '')}"


def pointer_key(pointer: EvidencePointer) -> str:
    return call_key(pointer.tool_name, pointer.command, pointer.shell)


def lines_text(lines: tuple[int, int] | None) -> str:
    if lines is None:
        return ""
    first, last = lines
    return f"{first}-{last}" if last else f"{first}-"


def evidence_fields(pointer: EvidencePointer) -> dict[str, str]:
    """The named texts a search backend indexes for ``pointer`` (the body is indexed apart,
    under ``body``): tool, command, paths (with every suffix), patterns, URLs, anchors,
    content types, action and line range. Empty fields are left out."""
    suffixes: list[str] = []
    for p in pointer.paths:
        suffixes += path_suffixes(p)
    fields = {
        "tool": pointer.tool_name or "",
        "command": pointer.command or "",
        "paths": " ".join(dict.fromkeys(suffixes)),
        "patterns": "\n".join(pointer.patterns),
        "urls": " ".join(pointer.urls),
        "anchors": " ".join(pointer.anchors),
        "types": " ".join(pointer.content_types),
        "action": pointer.action or "",
        "lines": pointer.lines or "",
        "role": pointer.role,
    }
    return {k: v for k, v in fields.items() if v}


def describe(pointer: EvidencePointer) -> str:
    """What a piece of evidence is, in a few words: the call's command (a shell command line or
    ``Read /src/app.ts``), else what it came from (``assistant message``, ``sub-agent text``)."""
    if pointer.command:
        return " ".join(pointer.command.split())
    if pointer.tool_name:
        return pointer.tool_name
    if pointer.role == "tool":
        return "tool result (call not seen)"
    if pointer.role == "text":
        return f"sub-agent {pointer.agent_run_id or ''} text".replace("  ", " ")
    return f"{pointer.role} message"


def pattern_key(pattern: str) -> str:
    """A search pattern as compared: lowercase words only."""
    return " ".join(_WORDISH.split(pattern.lower())).strip()


__all__ = [
    "OWN_TOOLS",
    "CallFields",
    "call_fields",
    "call_key",
    "command_head",
    "describe",
    "evidence_fields",
    "is_own_tool",
    "lines_text",
    "normalize_path",
    "path_suffixes",
    "pattern_key",
    "pointer_key",
]
