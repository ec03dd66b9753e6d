"""Reading what an agent's tool calls did: the files a shell command or an editor call writes.

One parser serves the extractive summarizer, the memory fact extractor and the replay
benchmark. It splits a command line into simple commands (shlex, heredoc bodies kept) and
knows the usual ways agents change files: ``sed -i``/``perl -i``, ``cat > f`` and heredocs,
``echo/printf > f``, ``tee``, Python ``open(f, 'w')``/``Path(f).write_text`` (in ``python -c``,
a heredoc or a script written earlier), ``patch``/``git apply`` (the ``+++`` files of the diff),
``cp``/``mv``/``install``/``ln``, ``touch``, ``rm``, and SWE-agent's ``open``/``create``/
``edit``. Editor tools (``str_replace_editor``, ``write_file`` ...) are read from their path
argument. :class:`ShellReader` keeps state across calls (the working directory, scripts written
by heredoc, SWE-agent's open file); :func:`files_written` reads one call on its own.

Also here: :func:`exit_code`, the exit status a tool output reports.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

#: Argument keys that name the file of an editor tool call.
PATH_KEYS = ("path", "file_path", "filepath", "filename", "file", "target_file")
#: Argument keys that hold the command line of a shell tool call.
COMMAND_KEYS = ("command", "cmd", "script")
#: Editor sub-commands (``{"command": "create", "path": ...}``) that change the file.
WRITE_SUBCOMMANDS = ("create", "str_replace", "insert", "undo_edit", "write")
#: Operations that do not leave the named path changed.
NOT_WRITES = ("delete", "apply")

_WRITE_NAME = re.compile(r"(write|create|edit|replace|patch|insert|apply|save)", re.I)
_BACKUP = re.compile(r"\.(bak|backup|orig|old|save|swp)\d*$|~$")
_OPEN_W = re.compile(
    r"""(?:open|Path)\(\s*(?:[rbf]?(['"])(?P<lit>[^'"\n]+)\1|(?P<var>[A-Za-z_]\w*))\s*"""
    r"""(?:\)\s*\.\s*write_(?:text|bytes)|,\s*(?:mode\s*=\s*)?['"][^'"]*[wax+][^'"]*['"])"""
)
_ASSIGN = re.compile(r"""^\s*([A-Za-z_]\w*)\s*=\s*[rbf]?(['"])([^'"\n]+)\2\s*$""", re.M)
_HEREDOC = re.compile(r"<<(-?)\s*(['\"]?)([A-Za-z_]\w*)\2")
_DIFF_TARGET = re.compile(r"^\+\+\+ (?:b/)?(\S+)", re.M)
_OPT_ARGS = {
    "grep": {"-A", "-B", "-C", "-m", "-e", "-f", "--include", "--exclude"},
    "head": {"-n", "-c"},
    "sed": {"-e", "-f", "--expression", "--file"},
    "tail": {"-n", "-c"},
}
_VIEW_PROGS = {"cat", "nl", "head", "tail", "less", "more", "bat", "open", "view"}
_RETURNCODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")
_EXIT = re.compile(
    r"(?:exit(?:ed)? (?:with )?(?:code|status)|exit code|return code|returncode)[:= ]+(-?\d+)",
    re.IGNORECASE,
)


@dataclass(frozen=True, kw_only=True, slots=True)
class FileOp:
    """One file operation of a command, the path as written there (quotes removed)."""

    path: str
    #: edit | write | append | patch | move | copy | create | delete | apply
    op: str
    #: The program or tool that did it (``sed``, ``tee``, ``python``, ``str_replace_editor`` ...).
    via: str = ""
    #: mv/cp: the source; apply: nothing; edit (SWE-agent): ``lines A:B`` when given.
    detail: str = ""

    @property
    def writes(self) -> bool:
        """Whether ``path`` is left changed (``rm`` and a patch of unknown content are not)."""
        return self.op not in NOT_WRITES


@dataclass(kw_only=True, slots=True)
class Segment:
    """One simple command of a command line and what it does to files."""

    #: Program name (``git-<sub>`` for git), without ``sudo``/``env``/``VAR=``/``timeout N``.
    prog: str
    tokens: list[str]
    #: Arguments without redirections.
    args: list[str]
    ops: list[FileOp] = field(default_factory=list)
    #: Files written / read, normalized (see :meth:`ShellReader.norm`), backups left out.
    writes: list[str] = field(default_factory=list)
    reads: list[str] = field(default_factory=list)


@dataclass(kw_only=True, slots=True)
class CallEffects:
    """What one tool call does: an editor call on ``path`` or a shell ``command``."""

    #: ``file`` (an editor call with a path), ``shell`` (a command line) or ``other``.
    kind: str
    command: str = ""
    path: str = ""
    #: The editor sub-command (``create``, ``str_replace``, ``view`` ...), if any.
    subcommand: str = ""
    segments: list[Segment] = field(default_factory=list)
    ops: list[FileOp] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)
    reads: list[str] = field(default_factory=list)


def parse_arguments(raw: str | Mapping[str, object] | None) -> Mapping[str, object]:
    """Tool-call arguments as a mapping; text that is not JSON is taken as a command line."""
    if isinstance(raw, Mapping):
        return raw
    if raw is None:
        return {}
    try:
        val = json.loads(raw) if raw.strip() else {}
    except ValueError:
        return {"command": raw}
    return val if isinstance(val, Mapping) else {"value": val}


def command_of(arguments: str | Mapping[str, object] | None) -> str | None:
    """The shell command line of a tool call's arguments (``command``/``cmd``/``script``)."""
    args = parse_arguments(arguments)
    return next((v for k in COMMAND_KEYS if isinstance(v := args.get(k), str)), None)


def path_of(arguments: str | Mapping[str, object] | None) -> str | None:
    """The file an editor call names (``path``, ``file_path``, ``filename`` ...)."""
    args = parse_arguments(arguments)
    return next((v for k in PATH_KEYS if isinstance(v := args.get(k), str) and v), None)


def is_write_tool(name: str) -> bool:
    """Whether a tool's name says it changes files (``write_file``, ``str_replace`` ...)."""
    return bool(_WRITE_NAME.search(name))


def is_backup(path: str) -> bool:
    return bool(_BACKUP.search(path))


def python_writes(code: str) -> list[str]:
    """Files a Python snippet opens for writing (string literals or simple variables)."""
    names = {m.group(1): m.group(3) for m in _ASSIGN.finditer(code)}
    out: list[str] = []
    for m in _OPEN_W.finditer(code):
        path = m.group("lit") or names.get(m.group("var") or "")
        if path and path not in out:
            out.append(path)
    return out


def split_heredocs(cmd: str) -> tuple[str, list[str]]:
    """The command without heredoc bodies, and the bodies in order."""
    lines, out, bodies = cmd.split("\n"), [], []
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        for m in _HEREDOC.finditer(line):
            body: list[str] = []
            while i < len(lines) and (lines[i].strip() if m.group(1) else lines[i]) != m.group(3):
                body.append(lines[i])
                i += 1
            i += 1
            bodies.append("\n".join(body))
    return "\n".join(out), bodies


#: Parsed command lines (each is read at ingest, by the evidence index, by the summarizer)
_PARSED: dict[str, tuple[tuple[tuple[str, ...], str | None], ...]] = {}
_PARSED_MAX = 32_768


def simple_commands(cmd: str) -> list[tuple[list[str], str | None]]:
    """Simple commands (tokens, heredoc body) of a shell command line."""
    parsed = _PARSED.get(cmd)
    if parsed is None:
        parsed = tuple((tuple(tokens), body) for tokens, body in _simple_commands(cmd))
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[cmd] = parsed
    return [(list(tokens), body) for tokens, body in parsed]


_PLAIN_TOKEN = re.compile(r"[;&|<>()\n]+|[^ \t\r;&|<>()\n]+")


def _tokens(text: str) -> list[str]:
    """The words and operators of a command line, as a POSIX shell splits them."""
    if "'" not in text and '"' not in text and "\\" not in text:
        return _PLAIN_TOKEN.findall(text)  # nothing to unquote: shlex's tokens, all in C
    lex = shlex.shlex(text, posix=True, punctuation_chars=";&|<>()\n")
    lex.whitespace, lex.whitespace_split, lex.commenters = " \t\r", True, ""
    try:
        return list(lex)
    except ValueError:  # unbalanced quotes
        return re.findall(r"[;&|<>()\n]+|[^\s;&|<>()]+", text)


def _simple_commands(cmd: str) -> list[tuple[list[str], str | None]]:
    text, bodies = split_heredocs(cmd.replace("\\\n", " "))
    tokens = _tokens(text)
    segs: list[tuple[list[str], str | None]] = []
    cur: list[str] = []
    body: str | None = None
    for tok in tokens:
        if tok and not tok.strip(";&|()\n"):  # only operators
            if cur:
                segs.append((cur, body))
            cur, body = [], None
        else:
            if tok in ("<<", "<<-") and bodies:
                body = bodies.pop(0)
            cur.append(tok)
    if cur:
        segs.append((cur, body))
    return segs


def _positional(prog: str, args: list[str]) -> list[str]:
    pos: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a.startswith("-"):
            skip = a in _OPT_ARGS.get("grep" if prog in ("egrep", "rg") else prog, ())
        else:
            pos.append(a)
    return pos


class ShellReader:
    """Reads shell commands: which files they read and write. Keeps scripts written by heredoc
    so that running them later can be attributed (``python fix.py`` writing ``open(x, 'w')``),
    the working directory (paths under it are made relative) and SWE-agent's open file."""

    def __init__(self) -> None:
        self.root: str | None = None
        self.scripts: dict[str, str] = {}
        self.open_file: str | None = None

    def norm(self, path: str) -> str | None:
        """A path as compared: relative to the working directory, no ``./``; None for
        ``-``, devices, globs, variables and other text that is not a plain path."""
        p = path.strip().strip("'\"")
        if (
            not p
            or p == "-"
            or any(c in p for c in "*$?{}`()<>|;'\" \t\n")
            or p.startswith(("/dev/", "/proc/"))
        ):
            return None
        if self.root and p.startswith(self.root.rstrip("/") + "/"):
            p = p[len(self.root.rstrip("/")) + 1 :]
        while p.startswith("./"):
            p = p[2:]
        return p if p not in ("", ".", "..", "/") else None

    def observe_output(self, text: str) -> None:
        """Learn the working directory and SWE-agent's open file from a tool result."""
        cwd = re.search(r"\(Current directory: (/[^)\s]+)\)", text)
        if cwd and self.root is None:
            self.root = cwd.group(1)
        m = re.search(r"\[File: (/\S+) \(\d+ lines total\)\]", text)
        if m:
            self.open_file = self.norm(m.group(1))

    def analyze(self, cmd: str) -> list[Segment]:
        """The simple commands of ``cmd`` with the files each writes and reads."""
        m = re.match(r"\s*cd\s+(/[^\s;&|]+)", cmd)
        if m and self.root is None:
            self.root = m.group(1)
        return [self._segment(tokens, body) for tokens, body in simple_commands(cmd)]

    def written(self, cmd: str, *, scripts: bool = False) -> list[str]:
        """Files ``cmd`` writes, normalized, in order, without duplicates or backups.

        ``scripts``: also the files the Python scripts that ``cmd`` writes by heredoc would
        write when run (for reading one command on its own, when the later run is not seen).
        """
        return self.read_call("", {"command": cmd}, scripts=scripts).writes

    def read_call(
        self, name: str, arguments: str | Mapping[str, object] | None, *, scripts: bool = False
    ) -> CallEffects:
        """What one tool call does to files (an editor call on a path, or a command line)."""
        args = parse_arguments(arguments)
        cmd = command_of(args)
        path = path_of(args)
        sub = str(args.get("command", "")) if path else ""
        if path is not None and (sub or cmd is None):
            write = sub in WRITE_SUBCOMMANDS if sub else is_write_tool(name)
            eff = CallEffects(kind="file", path=path, subcommand=sub)
            if write:
                eff.ops.append(
                    FileOp(path=path, op="create" if sub == "create" else "edit", via=name)
                )
            p = self.norm(path)
            if p:
                (eff.writes if write else eff.reads).append(p)
            return eff
        if cmd is None:
            return CallEffects(kind="other")
        known = set(self.scripts.values()) if scripts else set()
        eff = CallEffects(kind="shell", command=cmd, segments=self.analyze(cmd))
        for seg in eff.segments:
            eff.ops += seg.ops
            eff.writes += [w for w in seg.writes if w not in eff.writes]
            eff.reads += [r for r in seg.reads if r not in eff.reads]
        for body in self.scripts.values() if scripts else ():
            for path in python_writes(body) if body not in known else ():
                self._add(eff.writes, path)
        return eff

    # -- one simple command ---------------------------------------------------------------

    def _segment(self, tokens: list[str], body: str | None) -> Segment:
        while tokens and (
            re.match(r"^\w+=", tokens[0]) or tokens[0] in ("sudo", "time", "env", "command")
        ):
            tokens = tokens[1:]
        if tokens and tokens[0] == "timeout":
            tokens = tokens[2:]
        if not tokens:
            return Segment(prog="", tokens=[], args=[])
        prog = tokens[0].rsplit("/", 1)[-1]
        if prog == "git" and len(tokens) > 1:
            prog = "git-" + tokens[1]
        args: list[str] = []
        redirects: list[tuple[str, str]] = []
        stdin_file: str | None = None
        i = 1
        while i < len(tokens):
            tok = tokens[i]
            if tok in (">", ">>", ">|", "&>", "&>>") and i + 1 < len(tokens):
                redirects.append((tok, tokens[i + 1]))
                i += 2
                continue
            if tok in ("<", "<<", "<<-", "<<<", ">&", "<&") and i + 1 < len(tokens):
                if tok == "<":
                    stdin_file = tokens[i + 1]
                i += 2
                continue
            if not (tok == "2" and i + 1 < len(tokens) and tokens[i + 1] in (">", ">&")):
                args.append(tok)
            i += 1
        seg = Segment(prog=prog, tokens=tokens, args=args)
        self._file_ops(seg, _positional(prog, args), redirects, stdin_file, body)
        for op in seg.ops:
            if op.writes:
                self._add(seg.writes, op.path)
        return seg

    def _add(self, target: list[str], path: str) -> None:
        p = self.norm(path)
        if p and not _BACKUP.search(p) and p not in target:
            target.append(p)

    def _keep_script(self, path: str, body: str | None) -> None:
        if body is not None and (p := self.norm(path)) is not None:
            self.scripts[p] = body

    def _file_ops(
        self,
        seg: Segment,
        pos: list[str],
        redirects: list[tuple[str, str]],
        stdin_file: str | None,
        body: str | None,
    ) -> None:
        prog = seg.prog
        if prog in ("cat", "echo", "printf") or (
            body is not None and prog not in ("python", "python3")
        ):
            for tok, target in redirects:
                op = "append" if ">>" in tok else "write"
                seg.ops.append(FileOp(path=target, op=op, via=prog))
                self._keep_script(target, body)
        reads = self._program_ops(seg, pos, stdin_file, body)
        if prog == "create" and pos:
            self.open_file = self.norm(pos[0])
        for r in reads:
            self._add(seg.reads, r)

    def _program_ops(
        self, seg: Segment, pos: list[str], stdin_file: str | None, body: str | None
    ) -> list[str]:
        """The file operations of the segment's program (appended to ``seg.ops``); the files
        it reads."""
        prog, args, ops = seg.prog, seg.args, seg.ops
        if prog == "tee":
            append = any(a in ("-a", "--append") for a in args)
            for p0 in pos:
                ops.append(FileOp(path=p0, op="append" if append else "write", via="tee"))
                self._keep_script(p0, body)
        elif prog == "sed":
            return _sed_ops(seg, pos)
        elif prog == "perl" and any(re.match(r"^-\w*i", a) for a in args):
            ops += [FileOp(path=f, op="edit", via="perl") for f in pos[1:]]
        elif prog in ("cp", "mv", "install", "ln") and len(pos) >= 2:
            kind = {"cp": "copy", "mv": "move"}.get(prog, "write")
            ops.append(FileOp(path=pos[-1], op=kind, via=prog, detail=", ".join(pos[:-1])))
        elif prog in ("touch", "create", "rm"):
            op = "delete" if prog == "rm" else "create"
            ops += [FileOp(path=p0, op=op, via=prog) for p0 in pos]
        elif prog in ("patch", "git-apply", "git-am"):
            self._patch_ops(seg, pos, stdin_file, body)
        elif prog.startswith("python"):
            self._python_ops(seg, pos, body)
        else:
            return self._read_ops(seg, pos)
        return []

    def _patch_ops(
        self, seg: Segment, pos: list[str], stdin_file: str | None, body: str | None
    ) -> None:
        prog = seg.prog
        text = body or ""
        src = stdin_file or (pos[-1] if prog != "patch" and len(pos) > 1 else None)
        if src and (s := self.norm(src)) is not None:
            text += "\n" + self.scripts.get(s, "")
        via = prog.replace("-", " ")
        seg.ops.extend(FileOp(path=f, op="patch", via=via) for f in _DIFF_TARGET.findall(text))
        if prog == "patch" and len(pos) >= 1 and not text.strip():
            seg.ops.append(FileOp(path=pos[0], op="patch", via=via))
        elif src and not text.strip():
            seg.ops.append(FileOp(path=src, op="apply", via=via))

    def _python_ops(self, seg: Segment, pos: list[str], body: str | None) -> None:
        args = seg.args
        code = body or ""
        if "-c" in args:
            j = args.index("-c")
            code += args[j + 1] if j + 1 < len(args) else ""
        elif pos and (s := self.norm(pos[0])) is not None:
            code += self.scripts.get(s, "")
        seg.ops.extend(FileOp(path=f, op="write", via="python") for f in python_writes(code))

    def _read_ops(self, seg: Segment, pos: list[str]) -> list[str]:
        """Viewers, search and the agent's ``edit`` of the open file; the files read."""
        prog = seg.prog
        if prog in _VIEW_PROGS:
            if prog == "open" and pos:
                self.open_file = self.norm(pos[0])
            return pos[-1:] if prog in ("head", "tail") else pos[:1] if prog == "open" else pos
        if prog in ("grep", "egrep", "rg") and len(pos) >= 2:
            return pos[1:]
        if prog == "edit" and self.open_file:
            rng = next((a for a in pos if re.fullmatch(r"\d+:\d+", a)), "")
            seg.ops.append(
                FileOp(path=self.open_file, op="edit", via="edit", detail=rng and f"lines {rng}")
            )
        return []


def _sed_ops(seg: Segment, pos: list[str]) -> list[str]:
    """``sed -i`` edits its files; another sed reads them."""
    args = seg.args
    inplace = any(
        a.startswith("-i")
        or a == "--in-place"
        or (a.startswith("-") and "i" in a[1:] and not a.startswith("--"))
        for a in args
    )
    has_e = any(a in ("-e", "-f", "--expression") for a in args)
    files = pos if has_e else pos[1:]
    if inplace:
        seg.ops.extend(FileOp(path=f, op="edit", via="sed") for f in files)
        return []
    return files


def files_written(
    tool_name: str, arguments: str | Mapping[str, object] | None, *, scripts: bool = True
) -> list[str]:
    """Files one tool call writes, read on its own (no earlier calls known). ``scripts``:
    count what the Python scripts it writes by heredoc would write when run later."""
    return ShellReader().read_call(tool_name, arguments, scripts=scripts).writes


def exit_code(text: str) -> int | None:
    """The exit code a tool output reports (``<returncode>1</returncode>``, "exit code 2")."""
    head = text[:2000]
    m = _RETURNCODE.search(head) or _EXIT.search(head) or _EXIT.search(text[-2000:])
    return int(m.group(1)) if m else None


__all__ = [
    "CallEffects",
    "FileOp",
    "Segment",
    "ShellReader",
    "command_of",
    "exit_code",
    "files_written",
    "is_write_tool",
    "parse_arguments",
    "path_of",
    "python_writes",
]
