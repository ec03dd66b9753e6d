"""Rewrite shell-only trajectories into file-tool styles, so recall is measured on real outputs.

The development trajectories call a single ``bash`` tool. Agents built on Claude Code or
SWE-agent / OpenHands read and edit files through dedicated tools instead. This converter turns
the shell calls that are really file operations into those tools, deterministically, and keeps
every other call (tests, scripts, ``find`` ...) as ``bash``:

===============================================  =====================================  ===========================================
shell call (after any ``cd DIR &&``)             ``claude`` style                       ``sweagent`` style
===============================================  =====================================  ===========================================
``cat PATH``, ``cat -n PATH``                    ``Read {file_path}``                   ``str_replace_editor {command: view, path}``
``sed -n 'A,Bp' PATH``, ``nl -ba PATH | sed ..`` ``Read {file_path, offset, limit}``    ``view`` with ``view_range: [A, B]``
``head -n N PATH``                               ``Read {file_path, limit}``            ``view`` with ``view_range: [1, N]``
``grep [-n...] PATTERN PATH``                    ``Grep {pattern, path, output_mode}``  (kept as ``bash``: SWE-agent greps in the shell)
``cat > PATH << 'EOF' ... EOF``                  ``Write {file_path, content}``         ``create {path, file_text}``
``sed -i 's/OLD/NEW/' PATH``                     ``Edit {file_path, old_string, ...}``  ``str_replace {path, old_str, new_str}``
===============================================  =====================================  ===========================================

Paths become absolute against the directory the command ran in (``cd DIR``, else the trace's
usual ``/testbed``), as those tools expect. Output bodies are the trace's real output, reshaped
the way each tool prints it: reads are numbered like ``cat -n`` (the ``view`` reply has its
header line), writes and edits answer with the tool's confirmation line followed by the original
output. Calls whose shell form is anything else (pipes, several files, failing reads) stay as
they were. Tool call ids and the order of messages do not change.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence

from ..jsontypes import JSONObject
from .metrics import MsgDict, function_of, tool_calls

STYLES = ("claude", "sweagent")
DEFAULT_CWD = "/testbed"

_CD = re.compile(r"^\s*cd\s+(\"[^\"]*\"|'[^']*'|[^\s;&|]+)\s*&&\s*")
_OUT = re.compile(r"^<returncode>(-?\d+)</returncode>\n<output>\n(.*)</output>\s*$", re.S)
_SED_RANGE = re.compile(r"^(\d+),(\d+)p$")
_HEREDOC = re.compile(
    r"^cat\s+(?:>\s*(?P<p1>[^\s<>|;&]+)\s*<<-?\s*(?P<q1>['\"]?)(?P<t1>\w+)(?P=q1)"
    r"|<<-?\s*(?P<q2>['\"]?)(?P<t2>\w+)(?P=q2)\s*>\s*(?P<p2>[^\s<>|;&]+))[ \t]*\n"
    r"(?P<body>.*)\n(?P<end>\w+)\s*$",
    re.S,
)
_META = re.compile(r"[|;&<>`$()]")


def _split_cwd(command: str) -> tuple[str, str]:
    cwd = DEFAULT_CWD
    cmd = command.strip()
    while True:
        m = _CD.match(cmd)
        if not m:
            return cwd, cmd
        target = m.group(1).strip("'\"")
        cwd = target if target.startswith("/") else _join(cwd, target)
        cmd = cmd[m.end() :]


def _join(cwd: str, path: str) -> str:
    if path.startswith("/"):
        return path
    parts = [p for p in cwd.split("/") if p]
    for piece in path.split("/"):
        if piece in ("", "."):
            continue
        if piece == "..":
            if parts:
                parts.pop()
            continue
        parts.append(piece)
    return "/" + "/".join(parts)


def _body(output: str) -> tuple[int, str] | None:
    m = _OUT.match(output)
    if m is None:
        return None
    return int(m.group(1)), m.group(2)


def _numbered(text: str, start: int) -> str:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return "\n".join(f"{start + i:6}\t{line}" for i, line in enumerate(lines))


def _words(cmd: str) -> list[str] | None:
    if "\n" in cmd or _META.search(cmd):
        return None
    try:
        return shlex.split(cmd)
    except ValueError:
        return None


def _read_spec(cmd: str) -> tuple[str, int, int | None, bool] | None:
    """(path, first line, last line or None, output already numbered) of a plain file read."""
    m = re.match(r"^nl\s+-ba\s+(\S+)\s*\|\s*sed\s+-n\s+['\"]?(\d+),(\d+)p['\"]?\s*$", cmd)
    if m:
        return m.group(1), int(m.group(2)), int(m.group(3)), True
    words = _words(cmd)
    if not words:
        return None
    if words[0] == "cat" and len(words) == 2 and not words[1].startswith("-"):
        return words[1], 1, None, False
    if words[:2] == ["cat", "-n"] and len(words) == 3:
        return words[2], 1, None, True
    if words[:2] == ["sed", "-n"] and len(words) == 4:
        r = _SED_RANGE.match(words[2])
        if r:
            return words[3], int(r.group(1)), int(r.group(2)), False
    if words[0] == "head" and len(words) == 4 and words[1] == "-n" and words[2].isdigit():
        return words[3], 1, int(words[2]), False
    return None


def _grep_spec(cmd: str) -> tuple[str, str, list[str]] | None:
    words = _words(cmd)
    if not words or words[0] != "grep":
        return None
    flags = [w for w in words[1:] if w.startswith("-")]
    rest = [w for w in words[1:] if not w.startswith("-")]
    if len(rest) != 2 or any(f[:2] in ("-A", "-B", "-C", "-e", "-f") for f in flags):
        return None
    return rest[0], rest[1], flags


def _sed_edit(cmd: str) -> tuple[str, str, str] | None:
    words = _words(cmd)
    if not words or words[:2] != ["sed", "-i"] or len(words) != 4:
        return None
    expr = words[2]
    if len(expr) < 4 or expr[0] != "s":
        return None
    sep = expr[1]
    parts = expr[2:].split(sep)
    if len(parts) != 3 or parts[2] not in ("", "g"):
        return None
    old, new = parts[0].replace("\\" + sep, sep), parts[1].replace("\\" + sep, sep)
    return words[3], old, new


#: (tool name, arguments, output) of a converted call
Converted = tuple[str, JSONObject, str]


def convert_call(command: str, output: str, style: str) -> Converted | None:
    """``(tool name, arguments, output)`` of one shell call in ``style``, or None to keep it."""
    if style not in STYLES:
        raise ValueError(f"unknown tool style {style!r}; choose from {', '.join(STYLES)}")
    cwd, cmd = _split_cwd(command)
    parsed = _body(output)
    heredoc = _HEREDOC.match(cmd)
    if heredoc and heredoc.group("end") == (heredoc.group("t1") or heredoc.group("t2")):
        path = _join(cwd, heredoc.group("p1") or heredoc.group("p2"))
        content = heredoc.group("body") + "\n"
        note = f"File created successfully at: {path}"
        tail = "" if parsed is None or not parsed[1].strip() else "\n" + parsed[1].rstrip("\n")
        if style == "claude":
            return "Write", {"file_path": path, "content": content}, note + tail
        args: JSONObject = {"command": "create", "path": path, "file_text": content}
        return "str_replace_editor", args, note + tail
    if parsed is None:
        return None
    code, body = parsed
    edit = _sed_edit(cmd)
    if edit is not None:
        path = _join(cwd, edit[0])
        tail = "\n" + body.rstrip("\n") if body.strip() else ""
        if style == "claude":
            args = {"file_path": path, "old_string": edit[1], "new_string": edit[2]}
            return "Edit", args, f"The file {path} has been updated.{tail}"
        args = {"command": "str_replace", "path": path, "old_str": edit[1], "new_str": edit[2]}
        return "str_replace_editor", args, f"The file {path} has been edited.{tail}"
    if code != 0:
        return None
    read = _read_spec(cmd)
    if read is not None:
        return _read_call(cwd, read, body, style)
    grep = _grep_spec(cmd)
    if grep is not None and style == "claude":
        return _grep_call(cwd, grep, body)
    return None


def _read_call(
    cwd: str, read: tuple[str, int, int | None, bool], body: str, style: str
) -> Converted:
    """A file read as the style's read/view tool."""
    rel, first, last, numbered = read
    path = _join(cwd, rel)
    text = body if numbered else _numbered(body, first)
    if style == "claude":
        rargs: JSONObject = {"file_path": path}
        if first > 1:
            rargs["offset"] = first
        if last is not None:
            rargs["limit"] = last - first + 1
        return "Read", rargs, text
    vargs: JSONObject = {"command": "view", "path": path}
    if last is not None:
        vargs["view_range"] = [first, last]
    head = f"Here's the result of running `cat -n` on {path}:\n"
    return "str_replace_editor", vargs, head + text


def _grep_call(cwd: str, grep: tuple[str, str, list[str]], body: str) -> Converted:
    """A grep as Claude Code's Grep tool."""
    pattern, where, flags = grep
    gargs: JSONObject = {"pattern": pattern, "path": _join(cwd, where)}
    gargs["output_mode"] = "content"
    if any("n" in f for f in flags if not f.startswith("--")):
        gargs["-n"] = True
    if any("i" in f for f in flags if not f.startswith("--")):
        gargs["-i"] = True
    return "Grep", gargs, body.rstrip("\n") or "No matches found"


def convert_trace(messages: Sequence[MsgDict], style: str) -> list[dict[str, object]]:
    """A copy of ``messages`` with its file operations rewritten into ``style``'s tools."""
    outputs = {
        str(m.get("tool_call_id")): m.get("content")
        for m in messages
        if m.get("role") == "tool" and isinstance(m.get("content"), str)
    }
    new_outputs: dict[str, str] = {}
    out: list[dict[str, object]] = []
    for msg in messages:
        calls = tool_calls(msg)
        if msg.get("role") == "assistant" and calls:
            new_calls: list[object] = []
            for call in calls:
                fn = function_of(call)
                converted = None
                if fn.get("name") == "bash":
                    try:
                        raw = fn.get("arguments") or "{}"
                        args = json.loads(raw) if isinstance(raw, str | bytes) else {}
                    except ValueError:
                        args = {}
                    cmd = args.get("command") if isinstance(args, dict) else None
                    output = outputs.get(str(call.get("id")))
                    if isinstance(cmd, str) and isinstance(output, str):
                        converted = convert_call(cmd, output, style)
                if converted is None:
                    new_calls.append(call)
                    continue
                name, new_args, new_output = converted
                new_outputs[str(call.get("id"))] = new_output
                new_fn = {"name": name, "arguments": json.dumps(new_args, ensure_ascii=False)}
                new_calls.append({**call, "function": new_fn})
            out.append({**msg, "tool_calls": new_calls})
        elif msg.get("role") == "tool" and str(msg.get("tool_call_id")) in new_outputs:
            out.append({**msg, "content": new_outputs[str(msg.get("tool_call_id"))]})
        else:
            out.append(dict(msg))
    return out


__all__ = ["DEFAULT_CWD", "STYLES", "convert_call", "convert_trace"]
