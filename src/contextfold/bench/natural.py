"""Natural recall questions: an output asked for by what it is, not by its command.

For every tool output that left the view, :func:`natural_questions` asks the way a person or an
agent asks when the exact command is not at hand, from what the call was:

* ``read``: a file's content as read ("What was in views.py when you looked at it?"), the
  file named without its folder when that name is unique in the trajectory, else with it;
* ``run``: a program's output ("What did running reproduce.py print?");
* ``traceback``: the traceback a program or test run printed ("Show me the traceback from
  reproduce.py");
* ``tests``: test results ("What were the test results of tests/test_x.py?");
* ``search``: a search result ("What did the grep for `def foo` show?");
* ``diff``: a diff ("Show me the git diff").

Each question names one output only: where several outputs fit (one program run several times,
one file read twice), an ordinal counted over the whole trajectory picks one ("the second
time", "the first traceback", 第二次), and the newest is asked for without one. One question in
five is in Chinese. The subject of a question comes from the call's own arguments (the script
run, the file read, the pattern searched), never from the trajectory's content otherwise.
"""

from __future__ import annotations

import posixpath
import re
import shlex
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .recall import ORD_EN, ORD_ZH, Call, Question, _rel

NATURAL_KINDS = ("read", "run", "traceback", "tests", "search", "diff")

_TRACEBACK = "Traceback (most recent call last)"
_PY = re.compile(r"^python(?:\d(?:\.\d+)?)?$")
_TEST_SCRIPT = re.compile(r"(?:^|/)(?:runtests\.py|test|tests\.py)$")
_SEARCH = {"grep", "egrep", "rg", "ag", "find"}
#: Options of grep / rg / ag that take a value as the next word.
_VALUED = frozenset(
    {"-A", "-B", "-C", "-m", "-f", "-d", "-D", "-g", "-t", "-T", "--include", "--exclude"}
    | {"--exclude-dir", "--context", "--max-count", "--glob", "--type"}
)
#: Programs that prepare a run ("rm -f test.db && python x.py" is a run of x.py).
_SETUP = frozenset({"rm", "cd", "export", "mkdir", "cp", "touch", "source", "unset", "pip"})
_SEP = re.compile(r"\s*(?:&&|\|\||;|\|)\s*")


@dataclass(frozen=True, kw_only=True, slots=True)
class Subject:
    """What a call's output is (``kind``) and about what (``name``, as a user names it)."""

    kind: str
    name: str
    #: the phrasing: "find" for a search by file name
    via: str = ""


def _words(segment: str) -> list[str] | None:
    try:
        return shlex.split(segment)
    except ValueError:
        return None  # unbalanced quotes: no subject a user could name from it


def _segments(display: str) -> list[list[str]]:
    out = []
    for part in _SEP.split(display):
        words = _words(part)
        if words is None:
            return []
        while words and (re.match(r"^\w+=", words[0]) or words[0] in ("timeout", "time")):
            words = words[1:]
            if words and words[0].isdigit():
                words = words[1:]
        if words:
            out.append(words)
    return out


def _positional(words: Sequence[str], valued: frozenset[str] = frozenset()) -> list[str]:
    """The arguments that are not options (nor the values of the options in ``valued``)."""
    out: list[str] = []
    skip = False
    for w in words:
        if skip:
            skip = False
        elif w in valued:
            skip = True
        elif not w.startswith(("-", ">", "2>")):
            out.append(w)
    return out


def _test_target(words: Sequence[str]) -> str:
    """The first test file or id a test command names ("" for the whole suite)."""
    for w in _positional(words):
        named = "/" in w or "::" in w or "." in w
        if named and not w.endswith(("runtests.py", "bin/test")):
            return _rel(w)
    return ""


def _python_subject(words: Sequence[str]) -> Subject | None:
    rest = list(words[1:])
    if rest[:2] == ["-m", "pytest"] or rest[:2] == ["-m", "unittest"]:
        return Subject(kind="tests", name=_test_target(rest[2:]))
    if not rest or rest[0].startswith("-"):
        return None  # python -c "...": no name a user would use
    script = _rel(rest[0])
    if _TEST_SCRIPT.search(script):
        return Subject(kind="tests", name=_test_target(rest[1:]))
    return Subject(kind="run", name=script) if script.endswith(".py") else None


def _search_subject(words: Sequence[str]) -> Subject | None:
    prog = words[0]
    if prog == "find":
        for flag in ("-name", "-iname", "-path"):
            if flag in words and words.index(flag) + 1 < len(words):
                return Subject(kind="search", name=words[words.index(flag) + 1], via="find")
        return None
    args = _positional(words[1:], _VALUED)
    if "-e" in words and words.index("-e") + 1 < len(words):
        return Subject(kind="search", name=words[words.index("-e") + 1])
    return Subject(kind="search", name=args[0]) if args else None


def _program_subject(words: Sequence[str]) -> Subject | None:
    """A program run (python, pytest, a test runner), or None."""
    prog = posixpath.basename(words[0])
    if _PY.match(prog):
        return _python_subject(words)
    if prog in ("pytest", "tox") or words[0].endswith(("runtests.py", "bin/test")):
        return Subject(kind="tests", name=_test_target(words[1:]))
    return None


def _tool_subject(words: Sequence[str]) -> Subject | None:
    """A search (grep, find, git grep) or a git diff, or None."""
    prog = posixpath.basename(words[0])
    if prog in _SEARCH:
        return _search_subject(words)
    sub = words[1] if prog == "git" and len(words) > 1 else ""
    if sub == "grep":
        return _search_subject(words[1:])
    return Subject(kind="diff", name="") if sub == "diff" else None


def _shell_subject(c: Call) -> Subject | None:
    if c.reads:
        return Subject(kind="read", name=c.reads[0]) if len(c.reads) == 1 else None
    segments = _segments(c.display)
    while len(segments) > 1 and segments[0][0] in _SETUP:
        segments = segments[1:]  # "rm -f test.db && python x.py" runs x.py
    if not segments:
        return None
    return _program_subject(segments[0]) or _tool_subject(segments[0])


def subject_of(c: Call) -> Subject | None:
    """What the output of ``c`` is, for a natural question; None when nothing fits."""
    if c.style == "shell":
        return _shell_subject(c)
    if c.reads:
        return Subject(kind="read", name=c.reads[0])
    if c.name == "Grep" and isinstance(c.args.get("pattern"), str):
        return Subject(kind="search", name=str(c.args["pattern"]))
    return None


def _ord_word(pos: int, n: int, zh: bool) -> str:
    """Run ``pos`` (0-based) of ``n`` as an adjective ("second", 第二次); "" for the newest."""
    if n <= 1 or pos == n - 1:
        return ""
    if zh:
        return ORD_ZH[pos] if pos < len(ORD_ZH) else "倒数第二次" if pos == n - 2 else ""
    if pos < len(ORD_EN):
        return ORD_EN[pos]
    return "second-to-last" if pos == n - 2 else f"{pos + 1}th"


def _file_name(path: str, unique: Mapping[str, bool], alt: bool) -> str:
    base = posixpath.basename(path)
    return base if unique.get(base, False) and alt else path


def _phrase(kind: str, name: str, ord_: str, zh: bool) -> str:
    if zh:
        ord_zh = ord_ or ""
        return {
            "read": f"你{ord_zh}看 {name} 的时候里面是什么？",
            "run": f"{ord_zh}运行 {name} 输出了什么？",
            "traceback": f"把 {name} {ord_zh}的 traceback 给我看看",
            "tests": f"{ord_zh}跑 {name} 的测试结果是什么？"
            if name
            else f"{ord_zh}的测试结果是什么？",
            "search": f"{ord_zh}搜索 {name} 的结果是什么？",
            "find": f"{ord_zh}查找文件 {name} 找到了什么？",
            "diff": f"给我看{ord_zh}的 git diff",
        }[kind]
    when = f" the {ord_} time" if ord_ else ""
    the = f"the {ord_} " if ord_ else "the "
    return {
        "read": f"What was in {name} when you looked at it{when}?",
        "run": f"What did running {name} print{when}?",
        "traceback": f"Show me {the}traceback from {name}",
        "tests": f"What were {the}test results of {name}?"
        if name
        else f"What were {the}test results?",
        "search": f"What did {the}grep for `{name}` show?",
        "find": f"Which files did {the}search for `{name}` find?",
        "diff": f"Show me {the}git diff",
    }[kind]


def _groups(
    calls: Sequence[Call], outputs: Mapping[str, str]
) -> tuple[dict[str, Subject], dict[tuple[str, str], list[str]]]:
    subjects: dict[str, Subject] = {}
    groups: dict[tuple[str, str], list[str]] = {}
    for c in calls:
        if c.id not in outputs:
            continue
        s = subject_of(c)
        if s is None:
            continue
        subjects[c.id] = s
        groups.setdefault((s.kind, s.name), []).append(c.id)
        if s.kind in ("run", "tests") and _TRACEBACK in outputs[c.id]:
            groups.setdefault(("traceback", s.name), []).append(c.id)
    return subjects, groups


def _unique_names(subjects: Mapping[str, Subject]) -> dict[str, bool]:
    """File names (without folder) that name one file only in the trajectory."""
    bases: dict[str, set[str]] = {}
    for s in subjects.values():
        if s.kind in ("read", "run"):
            bases.setdefault(posixpath.basename(s.name), set()).add(s.name)
    return {b: len(ps) == 1 for b, ps in bases.items()}


def _question(
    tid: str, style: str, s: Subject, kind: str, members: Sequence[str], unique: Mapping[str, bool]
) -> Question | None:
    """The question for output ``tid`` as one of ``members`` (None: no plain ordinal names it)."""
    pos = members.index(tid)
    zh = zlib.crc32(f"{tid}/{kind}".encode()) % 5 == 0
    ord_ = _ord_word(pos, len(members), zh)
    if pos != len(members) - 1 and not ord_:
        return None
    alt = zlib.crc32(tid.encode()) % 2 == 0
    name = s.name if kind == "search" else _file_name(s.name, unique, alt)
    phrase = "find" if kind == "search" and s.via == "find" else kind
    text = " ".join(_phrase(phrase, name, ord_, zh).split())
    return Question(tid=tid, style=style, kind=kind, text=text)


def natural_questions(
    calls: Sequence[Call], outputs: Mapping[str, str], left: Sequence[str], styles: Sequence[str]
) -> list[Question]:
    """The natural questions for the outputs in ``left`` whose call style is in ``styles``."""
    subjects, groups = _groups(calls, outputs)
    unique = _unique_names(subjects)
    style_of = {c.id: c.style for c in calls}
    out: list[Question] = []
    for tid in left:
        s = subjects.get(tid)
        if s is None or style_of.get(tid) not in styles:
            continue
        kinds = [s.kind]
        if s.name and tid in groups.get(("traceback", s.name), ()):
            kinds.append("traceback")
        for kind in kinds:
            q = _question(tid, style_of[tid], s, kind, groups[(kind, s.name)], unique)
            if q is not None:
                out.append(q)
    return out


__all__ = ["NATURAL_KINDS", "Subject", "natural_questions", "subject_of"]
