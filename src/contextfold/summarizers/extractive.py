"""The extractive summarizer: the default for users without an LLM.

No model, no randomness: it reads the messages and pulls out the task (first user request),
what the agent did (tool calls and their outcomes, files edited), the decisions it stated,
what failed (exit codes, tracebacks, pytest failures) and the plans it announced last. The
output follows the seed 000 anchors format (or seed 002's four sections) and is bounded.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..anchors import (
    NA,
    Anchor,
    AnchorType,
    is_section_header,
    merge_anchors,
    parse_summary,
    render_anchors,
    union_items,
)
from ..messages import Message
from .base import SummaryRequest
from .transcript import render_content

_SEARCH_PROGS = {"grep", "egrep", "rg", "ag", "find", "ls", "tree", "locate", "which", "git-grep"}
_VIEW_PROGS = {"cat", "nl", "head", "tail", "less", "more", "bat", "open", "view"}
_NOFAIL_RC1 = _SEARCH_PROGS | {"diff", "cmp", "test", "[", "git-diff"}
_TEST_RE = re.compile(
    r"\b(pytest|py\.test|runtests\.py|unittest|tox|nox|bin/test|manage\.py test)\b"
)
_SUBMIT_RE = re.compile(r"^\s*(submit\b|echo\s+COMPLETE_TASK|echo\s+MINI_SWE_AGENT_FINAL)")
_WRITE_TOOLS = re.compile(r"(write|create|edit|replace|patch|insert|apply|save)", re.I)
_READ_TOOLS = re.compile(r"(read|view|open|cat|show|get_file)", re.I)
_BACKUP = re.compile(r"\.(bak|backup|orig|old|save|swp)\d*$|~$")
_OPEN_W = re.compile(
    r"""(?:open|Path)\(\s*(?:[rbf]?(['"])(?P<lit>[^'"\n]+)\1|(?P<var>[A-Za-z_]\w*))\s*"""
    r"""(?:\)\s*\.\s*write_(?:text|bytes)|,\s*(?:mode\s*=\s*)?['"][^'"]*[wax+][^'"]*['"])"""
)
_ASSIGN = re.compile(r"""^\s*([A-Za-z_]\w*)\s*=\s*[rbf]?(['"])([^'"\n]+)\2\s*$""", re.M)
_RC_RE = re.compile(
    r"<returncode>\s*(-?\d+)\s*</returncode>|\b(?:exit code|exit status|returncode|return code)\s*[:=]?\s*(-?\d+)",
    re.I,
)
_EXC_LINE = re.compile(
    r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Failure)|E\d{3} \w+Error)\b:?.*"
)
_ERR_LINE = re.compile(
    r"^(?:error|fatal|ERROR|FAILED|FAIL:|E\s{2,}|\S+: error:|sed: -e|.*: No such file or directory$)"
)
_PYTEST_SUM = re.compile(
    r"^=+ (.*?\b(?:passed|failed|errors?|skipped|xfailed|xpassed|deselected)\b.*?) in [\d.]+s"
)
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
_NEXT_RE = re.compile(
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


@dataclass
class _Step:
    label: str
    kind: str  # edit | view | search | test | run | submit | other
    reads: list[str] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)
    answered: bool = False
    #: files a `git diff` (or submit) output showed as changed.
    diff_files: list[str] = field(default_factory=list)
    #: exit code 1 is not a failure (grep without matches, diff with differences).
    rc1_ok: bool = False
    failed: bool = False
    error: str = ""
    outcome: str = ""


def _clip(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: max(n - 3, 0)].rstrip() + "..."


def _label(cmd: str) -> str:
    first = cmd.strip().splitlines()[0] if cmd.strip() else ""
    first = re.sub(r"^cd \S+ && ", "", first)
    return _clip(first.replace("`", "'"), 90) or "(empty)"


# ----------------------------------------------------------------------------- shell parsing


def _split_heredocs(cmd: str) -> tuple[str, list[str]]:
    """The command without heredoc bodies, and the bodies in order."""
    lines, out, bodies = cmd.split("\n"), [], []
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        for m in re.finditer(r"<<(-?)\s*(['\"]?)([A-Za-z_]\w*)\2", line):
            body: list[str] = []
            while i < len(lines) and (lines[i].strip() if m.group(1) else lines[i]) != m.group(3):
                body.append(lines[i])
                i += 1
            i += 1
            bodies.append("\n".join(body))
    return "\n".join(out), bodies


def _segments(cmd: str) -> list[tuple[list[str], str | None]]:
    """Simple commands (tokens, heredoc body) of a shell command line."""
    text, bodies = _split_heredocs(cmd.replace("\\\n", " "))
    try:
        lex = shlex.shlex(text, posix=True, punctuation_chars=";&|<>()\n")
        lex.whitespace = " \t\r"
        lex.whitespace_split = True
        lex.commenters = ""
        tokens = list(lex)
    except ValueError:
        tokens = re.findall(r"[;&|<>()\n]+|[^\s;&|<>()]+", text)
    segs: list[tuple[list[str], str | None]] = []
    cur: list[str] = []
    body: str | None = None
    for tok in tokens:
        if tok and all(c in ";&|()\n" for c in tok):
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


def _python_writes(code: str) -> list[str]:
    """Files a Python snippet opens for writing (string literals or simple variables)."""
    names = {m.group(1): m.group(3) for m in _ASSIGN.finditer(code)}
    out = []
    for m in _OPEN_W.finditer(code):
        path = m.group("lit") or names.get(m.group("var") or "")
        if path and path not in out:
            out.append(path)
    return out


class _Shell:
    """Reads shell commands: which files they read and write. Keeps scripts written by heredoc
    so that running them later can be attributed (``python fix.py`` writing ``open(x, 'w')``)."""

    def __init__(self) -> None:
        self.root: str | None = None
        self.scripts: dict[str, str] = {}
        self.open_file: str | None = None

    def norm(self, path: str) -> str | None:
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
        return p or None

    def analyze(self, cmd: str, step: _Step) -> None:
        m = re.match(r"\s*cd\s+(/[^\s;&|]+)", cmd)
        if m and self.root is None:
            self.root = m.group(1)
        for tokens, body in _segments(cmd):
            self._segment(tokens, body, cmd, step)

    def _segment(self, tokens: list[str], body: str | None, cmd: str, step: _Step) -> None:
        while tokens and (
            re.match(r"^\w+=", tokens[0]) or tokens[0] in ("sudo", "time", "env", "command")
        ):
            tokens = tokens[1:]
        if tokens and tokens[0] == "timeout":
            tokens = tokens[2:]
        if not tokens:
            return
        prog = tokens[0].rsplit("/", 1)[-1]
        if prog == "git" and len(tokens) > 1:
            prog = "git-" + tokens[1]
        args: list[str] = []
        redirects: list[str] = []
        stdin_file: str | None = None
        i = 1
        while i < len(tokens):
            tok = tokens[i]
            if tok in (">", ">>", ">|", "&>", "&>>") and i + 1 < len(tokens):
                redirects.append(tokens[i + 1])
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
        pos = []
        skip = False
        for a in args:
            if skip:
                skip = False
            elif a.startswith("-"):
                skip = a in _OPT_ARGS.get("grep" if prog in ("egrep", "rg") else prog, ())
            else:
                pos.append(a)
        writes: list[str] = []
        reads: list[str] = []
        if prog in ("cat", "echo", "printf") or (
            body is not None and prog not in ("python", "python3")
        ):
            writes += redirects
            if body is not None:
                for r in redirects:
                    if (p := self.norm(r)) is not None:
                        self.scripts[p] = body
        if prog == "tee":
            writes += pos
            if body is not None:
                for p0 in pos:
                    if (p := self.norm(p0)) is not None:
                        self.scripts[p] = body
        elif prog == "sed":
            inplace = any(
                a.startswith("-i")
                or a == "--in-place"
                or (a.startswith("-") and "i" in a[1:] and not a.startswith("--"))
                for a in args
            )
            has_e = any(a in ("-e", "-f", "--expression") for a in args)
            files = pos if has_e else pos[1:]
            (writes if inplace else reads).extend(files)
        elif prog == "perl" and any(re.match(r"^-\w*i", a) for a in args):
            writes += pos[1:]
        elif prog in ("cp", "mv", "install", "ln") and len(pos) >= 2:
            writes.append(pos[-1])
        elif prog in ("touch", "create"):
            writes += pos
        elif prog in ("patch", "git-apply", "git-am"):
            text = body or ""
            src = stdin_file or (pos[-1] if prog != "patch" and len(pos) > 1 else None)
            if src and (s := self.norm(src)) is not None:
                text += "\n" + self.scripts.get(s, "")
            writes += re.findall(r"^\+\+\+ (?:b/)?(\S+)", text, re.M)
            if prog == "patch" and len(pos) >= 1 and not text.strip():
                writes.append(pos[0])
        elif prog.startswith("python"):
            code = body or ""
            if "-c" in args:
                j = args.index("-c")
                code += args[j + 1] if j + 1 < len(args) else ""
            elif pos and (s := self.norm(pos[0])) is not None:
                code += self.scripts.get(s, "")
            writes += _python_writes(code)
        elif prog in _VIEW_PROGS:
            reads += pos[-1:] if prog in ("head", "tail") else pos[:1] if prog == "open" else pos
            if prog == "open" and pos:
                self.open_file = self.norm(pos[0])
        elif prog in ("grep", "egrep", "rg") and len(pos) >= 2:
            reads += pos[1:]
        elif prog == "edit" and self.open_file:
            writes.append(self.open_file)
        if prog == "create" and pos:
            self.open_file = self.norm(pos[0])
        for group, target in ((writes, step.writes), (reads, step.reads)):
            for w in group:
                p = self.norm(w)
                if p and not _BACKUP.search(p) and p not in target:
                    target.append(p)
        if step.kind == "other":
            if _SUBMIT_RE.match(cmd):
                step.kind = "submit"
            elif _TEST_RE.search(" ".join(tokens)):
                step.kind = "test"
            elif prog in _SEARCH_PROGS or prog in (
                "git-grep",
                "git-log",
                "git-status",
                "git-show",
                "pwd",
            ):
                step.kind = "search"
            elif prog in _VIEW_PROGS or (prog == "sed" and not step.writes and "-n" in args):
                step.kind = "view"
            elif prog.startswith("python") or prog in (
                "pip",
                "make",
                "npm",
                "node",
                "cargo",
                "go",
                "bash",
                "sh",
            ):
                step.kind = "run"
        if prog in _NOFAIL_RC1:
            step.rc1_ok = True


# ----------------------------------------------------------------------------- outcomes


def _clean_output(text: str) -> str:
    text = re.sub(
        r"</?(?:returncode|output|stdout|stderr)>",
        "\n",
        re.sub(r"<returncode>\s*-?\d+\s*</returncode>", "", text),
    )
    text = re.sub(
        r"\(Open file: [^)]*\)|\(Current directory: [^)]*\)|^bash-\$\s*$", "", text, flags=re.M
    )
    return text.strip()


def _error_line(out: str) -> str:
    lines = [ln.rstrip() for ln in out.splitlines() if ln.strip()]
    tb = max(
        (i for i, ln in enumerate(lines) if ln.startswith("Traceback (most recent call last)")),
        default=-1,
    )
    if tb >= 0:
        for ln in lines[tb + 1 :]:
            if not ln.startswith((" ", "\t")) and _EXC_LINE.match(ln.strip()):
                return _clip(ln.strip(), 160)
    for ln in lines:
        s = ln.strip()
        if s.startswith("FAILED ") or s.startswith("- E999") or _EXC_LINE.match(s):
            return _clip(s.lstrip("- "), 160)
    for ln in lines:
        if _ERR_LINE.match(ln.strip()):
            return _clip(ln.strip(), 160)
    return ""


def _judge(step: _Step, result: str, cmd: str) -> None:
    step.answered = True
    m = _RC_RE.search(result)
    rc = int(m.group(1) or m.group(2)) if m else None
    out = _clean_output(result)
    summary = ""
    for ln in out.splitlines():
        if (sm := _PYTEST_SUM.match(ln.strip())) is not None:
            summary = sm.group(1)
    ran = re.search(r"^Ran (\d+) tests?", out, re.M)
    if not summary and ran:
        tail = re.search(r"^(OK.*|FAILED \(.*\))$", out, re.M)
        summary = f"{ran.group(1)} tests: {tail.group(1) if tail else '?'}"
    step.diff_files = re.findall(r"^diff --git a/(\S+) b/", out, re.M)
    syntax_rejected = "proposed edit has introduced new syntax error" in out
    if rc is not None:
        failed = rc != 0 and not (step.rc1_ok and rc == 1)
    else:
        tb_last = "Traceback (most recent call last)" in out[-3000:]
        failed = syntax_rejected or tb_last or bool(re.search(r"\b\d+ (failed|errors?)\b", summary))
    if summary and re.search(r"\b\d+ (failed|errors?)\b|FAILED", summary):
        failed = True
    step.failed = failed
    if failed:
        step.error = _error_line(out) or (f"exit code {rc}" if rc else "failed")
        if syntax_rejected:
            step.writes.clear()
        step.outcome = (
            f"{summary}; {step.error}" if summary and summary not in step.error else step.error
        )
    elif summary:
        step.outcome = summary
    else:
        last = [ln.strip() for ln in out.splitlines() if ln.strip()]
        step.outcome = _clip(last[-1], 80) if last else "no output"
    if step.kind in ("search", "view", "edit"):
        step.outcome = step.outcome if failed else ""


# ----------------------------------------------------------------------------- text mining


def _sentences(text: str) -> list[str]:
    text = re.sub(r"```.*?(```|$)", "\n", text, flags=re.S)
    out: list[str] = []
    for line in text.splitlines():
        line = re.sub(r"^\s*(?:THOUGHT:|DISCUSSION|[-*]|\d+[.)])\s*", "", line).strip()
        for s in re.split(r"(?<=[.!?])\s+(?=[A-Z`(])", line):
            s = s.strip()
            if len(s) >= 12:
                out.append(s)
    return out


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
_OPT_ARGS = {
    "grep": {"-A", "-B", "-C", "-m", "-e", "-f", "--include", "--exclude"},
    "head": {"-n", "-c"},
    "sed": {"-e", "-f", "--expression", "--file"},
    "tail": {"-n", "-c"},
}
_FIRST_PERSON = re.compile(r"\b(?:I|we|let's|should|will|use|using|need)\b", re.I)


def _decision_score(sent: str) -> int:
    """2 for a stated cause/fix/choice, 1 for an announced change, 0 otherwise."""
    if _NOT_DECISION.search(sent) or sent.endswith("?") or _TOOL_USE.search(sent):
        return 0
    m = _DECISION_STRONG.search(sent)
    if m and (
        not m.group(1).lower().startswith(("instead", "rather")) or _FIRST_PERSON.search(sent)
    ):
        return 2
    return 1 if _DECISION_ACTION.search(sent) else 0


def _intent(text: str, limit: int) -> str:
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
    return cut[: dot + 1] if dot > limit // 2 else _clip(joined, limit)


def _user_requests(messages: Sequence[Message]) -> list[str]:
    out = []
    for m in messages:
        if m.role == "user":
            t = render_content(m.content).strip()
            if len(t) >= 2 and not _NOISE_USER.search(t[:3000]):
                out.append(t)
    return out


# ----------------------------------------------------------------------------- summarizer


def _parse_args(raw: str) -> Mapping[str, Any]:
    try:
        val = json.loads(raw) if raw.strip() else {}
    except ValueError:
        return {"command": raw}
    return val if isinstance(val, Mapping) else {"value": val}


def _steps(messages: Sequence[Message]) -> list[_Step]:
    shell = _Shell()
    steps: dict[str, tuple[_Step, str]] = {}
    order: list[_Step] = []
    for msg in messages:
        if msg.role == "assistant":
            for call in msg.tool_calls:
                args = _parse_args(call.arguments)
                step = _Step(label=call.name, kind="other")
                cmd = (
                    args.get("command") if isinstance(args.get("command"), str) else args.get("cmd")
                )
                path = args.get("path") or args.get("file_path") or args.get("filename")
                sub = str(args.get("command", "")) if path else ""
                if isinstance(path, str) and (sub or not isinstance(cmd, str)):
                    p = shell.norm(path)
                    is_write = sub in ("create", "str_replace", "insert", "undo_edit", "write") or (
                        not sub and bool(_WRITE_TOOLS.search(call.name))
                    )
                    step.kind = "edit" if is_write else "view"
                    step.label = f"{call.name} {sub + ' ' if sub else ''}{path}"
                    if p:
                        (step.writes if is_write else step.reads).append(p)
                    cmd = ""
                elif isinstance(cmd, str):
                    step.label = _label(cmd)
                    shell.analyze(cmd, step)
                    if step.writes and step.kind in ("other", "view", "run", "search"):
                        step.kind = "edit" if step.kind != "run" else "run"
                elif _READ_TOOLS.search(call.name):
                    step.kind = "view"
                steps[call.id] = (step, cmd or "")
                order.append(step)
        elif msg.role == "tool" and msg.tool_call_id in steps:
            step, cmd = steps[msg.tool_call_id]
            _judge(step, render_content(msg.content), cmd)
            text = render_content(msg.content)
            cwd = re.search(r"\(Current directory: (/[^)\s]+)\)", text)
            if cwd and shell.root is None:
                shell.root = cwd.group(1)
            m = re.search(r"\[File: (/\S+) \(\d+ lines total\)\]", text)
            if m:
                shell.open_file = shell.norm(m.group(1))
    return order


_MARKER = re.compile(r"^\(\+(\d+) earlier actions?.*\)$")


def _cap(items: list[str], n: int, noun: str = "actions") -> list[str]:
    earlier = 0
    rest = []
    for it in items:
        m = _MARKER.match(it)
        if m:
            earlier += int(m.group(1))
        else:
            rest.append(it)
    if len(rest) > n:
        earlier += len(rest) - n
        rest = rest[len(rest) - n :]
    return ([f"(+{earlier} earlier {noun})"] if earlier else []) + rest


class ExtractiveSummarizer:
    """Deterministic, model-free :class:`~contextfold.summarizers.base.Summarizer`."""

    def __init__(
        self,
        *,
        max_progress: int = 12,
        max_decisions: int = 8,
        max_tried: int = 8,
        max_next: int = 5,
        intent_chars: int = 300,
    ) -> None:
        self.max_progress = max_progress
        self.max_decisions = max_decisions
        self.max_tried = max_tried
        self.max_next = max_next
        self.intent_chars = intent_chars

    def summarize(self, request: SummaryRequest) -> str:
        limit = max(request.max_summary_tokens, 50) * 3
        scale = 1.0
        text = ""
        for _ in range(8):
            text = self._render(request, scale)
            if len(text) <= limit:
                return text
            scale *= 0.6
        return _hard_bound(text, limit, request.style)

    # -- building blocks ------------------------------------------------------------------

    def _progress(self, steps: list[_Step], limit: int) -> list[str]:
        items: list[tuple[int, str]] = []
        reads: list[str] = []
        nreads = 0
        last_search = ""

        def flush() -> None:
            nonlocal nreads, last_search
            if nreads:
                shown = ", ".join(reads[:4]) + (
                    f" (+{len(reads) - 4} more)" if len(reads) > 4 else ""
                )
                if reads:
                    item = f"viewed {shown}" + (
                        f" ({nreads} reads/searches)" if nreads > len(reads) else ""
                    )
                else:
                    item = f"searched the code ({nreads}x), last: `{last_search}`"
                items.append((0, item))
            reads.clear()
            nreads, last_search = 0, ""

        prev = ""
        repeat = 1
        for s in steps:
            if s.kind in ("view", "search") and not s.writes:
                nreads += 1
                last_search = s.label if s.kind == "search" else last_search
                reads.extend(r for r in s.reads if r not in reads)
                continue
            flush()
            prio = 1
            if s.writes and not s.failed:
                item = "edited " + ", ".join(s.writes)
                if s.kind == "run":
                    item += f" via `{s.label}`"
                prio = 1 if all(_is_scratch(w) for w in s.writes) else 3
            elif s.kind == "submit":
                item, prio = "submitted the final output", 3
            elif s.kind == "edit" and s.failed:
                continue
            else:
                item = f"ran `{s.label}`" + (f" -> {s.outcome}" if s.outcome else "")
                prio = 2 if s.kind == "test" else 1
            if item == prev:
                repeat += 1
                items[-1] = (prio, f"{item} (x{repeat})")
                continue
            prev, repeat = item, 1
            items.append((prio, item))
        flush()
        if len(items) <= limit:
            return [it for _, it in items]
        recent = min(4, limit)
        head = list(enumerate(items[: len(items) - recent]))
        best = sorted(head, key=lambda x: (-x[1][0], -x[0]))[: limit - recent]
        kept = [it for _, (_, it) in sorted(best)] + [it for _, it in items[len(items) - recent :]]
        return [f"(+{len(items) - len(kept)} earlier actions)", *kept]

    def _tried(self, steps: list[_Step]) -> list[str]:
        out: list[str] = []
        for s in steps:
            if s.failed:
                what = f"`{s.label}`" if s.kind != "edit" else f"edit via `{s.label}` rejected"
                out.append(f"{what} -> {s.error}")
        return union_items([], out)

    def _decisions(self, messages: Sequence[Message], limit: int) -> list[str]:
        found: list[tuple[int, int, str]] = []
        idx = 0
        for m in messages:
            if m.role != "assistant":
                continue
            for sent in _sentences(render_content(m.content)):
                idx += 1
                score = _decision_score(sent)
                if score:
                    found.append((score, idx, _clip(sent, 220)))
        uniq: dict[str, tuple[int, int, str]] = {}
        for f in found:
            uniq.setdefault(f[2].casefold()[:70], f)
        best = sorted(uniq.values(), key=lambda f: (-f[0], -f[1]))[:limit]
        return [f[2] for f in sorted(best, key=lambda f: f[1])]

    def _next(self, messages: Sequence[Message], steps: list[_Step]) -> list[str]:
        plans: list[str] = []
        for m in reversed(messages):
            if m.role == "assistant" and render_content(m.content).strip():
                plans = [s for s in _sentences(render_content(m.content)) if _NEXT_RE.search(s)]
                if plans:
                    break
        out = [_clip(p, 200) for p in plans[-3:]]
        last: dict[str, _Step] = {}
        for s in steps:
            if s.answered and s.kind in ("test", "run"):
                last[s.label] = s
        out += [f"resolve: `{s.label}` still fails ({s.error})" for s in last.values() if s.failed]
        out += [f"awaiting result of `{s.label}`" for s in steps if not s.answered]
        if steps and steps[-1].kind == "submit" and steps[-1].answered:
            out = ["none pending: the final output was submitted"]
        return union_items([], out)

    def _render(self, request: SummaryRequest, scale: float) -> str:
        msgs = [m for m in request.messages if m.role != "system"]
        steps = _steps(msgs)

        def k(n: int) -> int:
            return max(1, int(n * scale))

        item_chars = max(60, int(220 * scale))

        prev_anchors: Sequence[Anchor] = request.previous_anchors
        prev_summary = request.previous_summary or ""
        if prev_summary and ("## " in prev_summary or "**" in prev_summary):
            parsed = parse_summary(prev_summary)
            prev_anchors = prev_anchors or parsed.anchors
            prev_summary = parsed.summary
        prev_intent = next(
            (a for a in prev_anchors if a.type == AnchorType.USER_INTENT and not a.is_empty), None
        )

        requests = _user_requests(msgs)
        intent_lines: list[str] = []
        if prev_intent is not None:
            intent_lines = [ln for ln in prev_intent.content.splitlines() if ln.strip()]
            later = requests
        else:
            if requests:
                intent_lines = [_intent(requests[0], max(80, int(self.intent_chars * scale)))]
            later = requests[1:]
        intent_lines += [
            f"Later request: {_intent(r, max(60, int(150 * scale)))}" for r in later[-3:]
        ]
        intent_lines = [_defuse(ln) for ln in intent_lines]

        written: list[str] = []
        for s in steps:
            written += [w for w in s.writes if not s.failed and w not in written]
            written += [w for w in s.diff_files if w not in written]
        new = {
            AnchorType.USER_INTENT: "\n".join(intent_lines),
            AnchorType.EXECUTION_PROGRESS: self._progress(steps, k(self.max_progress)),
            AnchorType.KEY_DECISION: self._decisions(msgs, self.max_decisions),
            AnchorType.TRIED_SOLUTION: self._tried(steps),
            AnchorType.NEXT_STEP: self._next(msgs, steps),
        }
        new_anchors = [
            Anchor(
                type=t,
                content=v
                if isinstance(v, str) and v
                else _bullets(v)
                if isinstance(v, list)
                else NA,
            )
            for t, v in new.items()
        ]
        merged = merge_anchors(prev_anchors, new_anchors)
        caps = {
            AnchorType.EXECUTION_PROGRESS: k(self.max_progress),
            AnchorType.KEY_DECISION: k(self.max_decisions),
            AnchorType.TRIED_SOLUTION: k(self.max_tried),
            AnchorType.NEXT_STEP: k(self.max_next),
        }
        final: list[Anchor] = []
        for a in merged:
            if a.type in caps:
                noun = "actions" if a.type == AnchorType.EXECUTION_PROGRESS else "items"
                items = [_clip(i, item_chars) for i in _cap(a.items(), caps[a.type], noun)]
                final.append(Anchor(type=a.type, content=_bullets(items)))
            else:
                final.append(a)

        # Summary text
        prev_files: list[str] = []
        earlier: list[str] = []
        for ln in prev_summary.splitlines():
            if ln.startswith(("Files modified:", "Scratch files written:")):
                prev_files += [
                    f.strip()
                    for f in ln.split(":", 1)[1].split(",")
                    if f.strip() and not f.strip().startswith("(+")
                ]
            elif ln.strip() and not ln.startswith("Earlier:"):
                earlier.append(ln.strip())
            elif ln.startswith("Earlier:"):
                earlier.insert(0, ln[len("Earlier:") :].strip())
        files = union_items(prev_files, written)
        n_user = sum(m.role == "user" for m in msgs)
        n_asst = sum(m.role == "assistant" for m in msgs)
        n_tool = sum(m.role == "tool" for m in msgs)
        fails = sum(s.failed for s in steps)
        lines = []
        if earlier:
            lines.append("Earlier: " + _clip(" ".join(earlier), max(100, int(600 * scale))))
        lines.append(
            f"Compacted {len(msgs)} messages ({n_user} user, {n_asst} assistant, {n_tool} tool results); "
            f"{len(steps)} tool calls, {fails} failed."
        )
        source = [f for f in files if not _is_scratch(f)]
        scratch = [f for f in files if _is_scratch(f)]
        if source:
            shown = source[: k(20)]
            lines.append(
                "Files modified: "
                + ", ".join(shown)
                + (f", (+{len(source) - len(shown)} more)" if len(source) > len(shown) else "")
            )
        if scratch:
            shown = scratch[: k(12)]
            lines.append(
                "Scratch files written: "
                + ", ".join(shown)
                + (f", (+{len(scratch) - len(shown)} more)" if len(scratch) > len(shown) else "")
            )
        ran = [s for s in steps if s.answered and s.kind in ("test", "run")]
        if ran:
            lines.append(f"Last run: `{ran[-1].label}` -> {ran[-1].outcome or 'ok'}")
        offl = re.findall(
            r"\[offloaded[^\]\n]{0,200}\]",
            "\n".join(render_content(m.content) for m in msgs if m.role == "tool"),
        )
        if offl:
            lines.append("Offloaded outputs: " + "; ".join(dict.fromkeys(offl[-k(5) :])))
        lines += [f"Note: {_clip(n, item_chars)}" for n in request.notes[: k(3)]]
        summary = "\n".join(_defuse(ln) for ln in lines)
        if request.style == "sections":
            return _render_sections(final, summary, files, offl)
        return render_anchors(final, summary)


_SCRATCH = re.compile(
    r"^(?:/tmp/|tmp/)|^[^/]*(?:\.txt|\.log|\.diff|\.patch|\.out)$|^(?:reproduc|repro|debug|scratch|temp|tmp"
    r"|check|trace|verify|test_|analy[sz]e|implement|apply|final|run_|simple|explore|update|modify"
    r"|inspect|edit_|setup_repro|better|actual|patch|fix|demo|try|quick|minimal)[^/]*\.(?:py|sh|sql)$"
    r"|^[^/]*_fix\w*\.py$",
    re.I,
)


def _is_scratch(path: str) -> bool:
    """A throwaway file at the top level (reproduce_issue.py, debug.py, patch.txt ...)."""
    return bool(_SCRATCH.search(path))


def _bullets(items: Sequence[str]) -> str:
    return "\n".join(f"- {i}" for i in items) if items else NA


def _defuse(line: str) -> str:
    """Keep a free-text line from being read back as a section header."""
    return f"> {line}" if is_section_header(line) else line


def _render_sections(
    anchors: Sequence[Anchor], summary: str, files: list[str], offloaded: list[str]
) -> str:
    by = {a.type: a for a in anchors}
    body = [summary]
    for atype, label in (
        (AnchorType.EXECUTION_PROGRESS, "Execution Progress:"),
        (AnchorType.KEY_DECISION, "Key Decisions:"),
        (AnchorType.TRIED_SOLUTION, "Tried Solutions:"),
    ):
        if not by[atype].is_empty:
            body += ["", label, by[atype].content]
    artifacts = [f"- {f} (modified)" for f in files] + [f"- {o}" for o in dict.fromkeys(offloaded)]
    parts = [
        "## SESSION INTENT",
        by[AnchorType.USER_INTENT].content,
        "",
        "## SUMMARY",
        "\n".join(body),
        "",
        "## ARTIFACTS",
        "\n".join(artifacts) or NA,
        "",
        "## NEXT STEPS",
        by[AnchorType.NEXT_STEP].content,
    ]
    return "\n".join(parts)


def _hard_bound(text: str, limit: int, style: str) -> str:
    """Last resort for tiny budgets: keep every header, cut each section body."""
    parts = re.split(r"(?m)^(#{2,3} .*)$", text)
    headers = [p for p in parts if p.startswith("##")]
    budget = max((limit - sum(len(h) + 2 for h in headers)) // max(len(headers), 1), 8)
    out = [parts[0][:budget]] if parts[0].strip() else []
    for p in parts[1:]:
        out.append(p if p.startswith("##") else "\n" + _clip(p.strip(), budget) + "\n")
    result = "".join(out).strip()
    return result[:limit] if len(result) > limit else result


__all__ = ["ExtractiveSummarizer"]
