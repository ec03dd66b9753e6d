"""The tool calls of a conversation as steps for the extractive summarizer.

Each call becomes a :class:`Step`: a label, a kind (edit, view, search, test, run, submit),
the files it read and wrote (see :mod:`contextfold.core.shell`) and, once its result is seen,
whether it failed, the error line and a short outcome (pytest / unittest summary, last line).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from ...core.messages import Message
from ...core.scaffolding import strip_scaffolding
from ...core.shell import Segment, ShellReader, exit_code, parse_arguments
from .transcript import render_content

SEARCH_PROGS = {"grep", "egrep", "rg", "ag", "find", "ls", "tree", "locate", "which", "git-grep"}
VIEW_PROGS = {"cat", "nl", "head", "tail", "less", "more", "bat", "open", "view"}
_NOFAIL_RC1 = SEARCH_PROGS | {"diff", "cmp", "test", "[", "git-diff"}
_LOOKUP_PROGS = {"git-grep", "git-log", "git-status", "git-show", "pwd"}
_RUN_PROGS = {"pip", "make", "npm", "node", "cargo", "go", "bash", "sh"}
_TEST_RE = re.compile(
    r"\b(pytest|py\.test|runtests\.py|unittest|tox|nox|bin/test|manage\.py test)\b"
)
_SUBMIT_RE = re.compile(r"^\s*(submit\b|echo\s+COMPLETE_TASK|echo\s+MINI_SWE_AGENT_FINAL)")
_READ_TOOLS = re.compile(r"(read|view|open|cat|show|get_file)", re.I)
_EXC_LINE = re.compile(
    r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Failure)|E\d{3} \w+Error)\b:?.*"
)
_ERR_LINE = re.compile(
    r"^(?:error|fatal|ERROR|FAILED|FAIL:|E\s{2,}|\S+: error:|sed: -e|.*: No such file or directory$)"
)
_PYTEST_SUM = re.compile(
    r"^=+ (.*?\b(?:passed|failed|errors?|skipped|xfailed|xpassed|deselected)\b.*?) in [\d.]+s"
)
_FAILED_SUM = re.compile(r"\b\d+ (failed|errors?)\b")
TRACEBACK = "Traceback (most recent call last)"


@dataclass
class Step:
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


def clip(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: max(n - 3, 0)].rstrip() + "..."


def label(cmd: str) -> str:
    first = cmd.strip().splitlines()[0] if cmd.strip() else ""
    first = re.sub(r"^cd \S+ && ", "", first)
    return clip(first.replace("`", "'"), 90) or "(empty)"


def _classify(step: Step, seg: Segment, cmd: str) -> None:
    """Set the kind of a step from its first telling simple command."""
    prog = seg.prog
    if step.kind == "other":
        if _SUBMIT_RE.match(cmd):
            step.kind = "submit"
        elif _TEST_RE.search(" ".join(seg.tokens)):
            step.kind = "test"
        elif prog in SEARCH_PROGS or prog in _LOOKUP_PROGS:
            step.kind = "search"
        elif prog in VIEW_PROGS or (prog == "sed" and not step.writes and "-n" in seg.args):
            step.kind = "view"
        elif prog.startswith("python") or prog in _RUN_PROGS:
            step.kind = "run"
    if prog in _NOFAIL_RC1:
        step.rc1_ok = True


def _shell_step(step: Step, segments: Sequence[Segment], cmd: str) -> None:
    for seg in segments:
        if not seg.prog:
            continue
        step.writes += [w for w in seg.writes if w not in step.writes]
        step.reads += [r for r in seg.reads if r not in step.reads]
        _classify(step, seg, cmd)


def read_steps(messages: Sequence[Message]) -> list[Step]:
    """The tool calls of ``messages`` in order, judged by their results when present."""
    shell = ShellReader()
    steps: dict[str, tuple[Step, str]] = {}
    order: list[Step] = []
    for msg in messages:
        if msg.role == "assistant":
            for call in msg.tool_calls:
                step = Step(label=call.name, kind="other")
                eff = shell.read_call(call.name, parse_arguments(call.arguments))
                cmd = ""
                if eff.kind == "file":
                    step.kind = "edit" if eff.ops else "view"
                    sub = eff.subcommand
                    step.label = f"{call.name} {sub + ' ' if sub else ''}{eff.path}"
                    step.writes, step.reads = eff.writes, eff.reads
                elif eff.kind == "shell":
                    cmd = eff.command
                    step.label = label(cmd)
                    _shell_step(step, eff.segments, cmd)
                    if step.writes and step.kind in ("other", "view", "run", "search"):
                        step.kind = "edit" if step.kind != "run" else "run"
                elif _READ_TOOLS.search(call.name):
                    step.kind = "view"
                steps[call.id] = (step, cmd)
                order.append(step)
        elif msg.role == "tool" and msg.tool_call_id in steps:
            step, cmd = steps[msg.tool_call_id]
            text = strip_scaffolding(render_content(msg.content))
            judge(step, text)
            shell.observe_output(text)
    return order


# ----------------------------------------------------------------------------- outcomes


def clean_output(text: str) -> str:
    text = re.sub(
        r"</?(?:returncode|output|stdout|stderr)>",
        "\n",
        re.sub(r"<returncode>\s*-?\d+\s*</returncode>", "", text),
    )
    text = re.sub(
        r"\(Open file: [^)]*\)|\(Current directory: [^)]*\)|^bash-\$\s*$", "", text, flags=re.M
    )
    return text.strip()


def error_line(out: str) -> str:
    """The line of a tool output that says what went wrong (the exception after a traceback,
    a ``FAILED`` test, an ``error:`` line), clipped; empty when there is none."""
    lines = [ln.rstrip() for ln in out.splitlines() if ln.strip()]
    tb = max((i for i, ln in enumerate(lines) if ln.startswith(TRACEBACK)), default=-1)
    if tb >= 0:
        for ln in lines[tb + 1 :]:
            if not ln.startswith((" ", "\t")) and _EXC_LINE.match(ln.strip()):
                return clip(ln.strip(), 160)
    for ln in lines:
        s = ln.strip()
        if s.startswith("FAILED ") or s.startswith("- E999") or _EXC_LINE.match(s):
            return clip(s.lstrip("- "), 160)
    for ln in lines:
        if _ERR_LINE.match(ln.strip()):
            return clip(ln.strip(), 160)
    return ""


def test_summary(out: str) -> str:
    """The pytest (last ``=== ... in Ns``) or unittest (``Ran N tests``) summary of an output."""
    summary = ""
    for ln in out.splitlines():
        if (sm := _PYTEST_SUM.match(ln.strip())) is not None:
            summary = sm.group(1)
    ran = re.search(r"^Ran (\d+) tests?", out, re.M)
    if not summary and ran:
        tail = re.search(r"^(OK.*|FAILED \(.*\))$", out, re.M)
        summary = f"{ran.group(1)} tests: {tail.group(1) if tail else '?'}"
    return summary


def judge(step: Step, result: str) -> None:
    """Fill in the outcome of ``step`` from its tool result."""
    step.answered = True
    rc = exit_code(result)
    out = clean_output(result)
    summary = test_summary(out)
    step.diff_files = re.findall(r"^diff --git a/(\S+) b/", out, re.M)
    syntax_rejected = "proposed edit has introduced new syntax error" in out
    if rc is not None:
        failed = rc != 0 and not (step.rc1_ok and rc == 1)
    else:
        tb_last = TRACEBACK in out[-3000:]
        failed = syntax_rejected or tb_last or bool(_FAILED_SUM.search(summary))
    if summary and (_FAILED_SUM.search(summary) or "FAILED" in summary):
        failed = True
    step.failed = failed
    if failed:
        step.error = error_line(out) or (f"exit code {rc}" if rc else "failed")
        if syntax_rejected:
            step.writes.clear()
        step.outcome = (
            f"{summary}; {step.error}" if summary and summary not in step.error else step.error
        )
    elif summary:
        step.outcome = summary
    else:
        last = [ln.strip() for ln in out.splitlines() if ln.strip()]
        step.outcome = clip(last[-1], 80) if last else "no output"
    if step.kind in ("search", "view", "edit"):
        step.outcome = step.outcome if failed else ""


__all__ = ["Step", "clip", "error_line", "judge", "label", "read_steps"]
