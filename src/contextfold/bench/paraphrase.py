"""Paraphrased recall questions: an output asked for in other words than its own.

:mod:`.natural` asks the way the question rules know ("what did running x.py print?");
people and agents also say it otherwise: "what came out when you launched x.py?", "the listing
of the folder", "what did the linter complain about?", "where did x.py crash?", 启动 x.py 之后
屏幕上出现了什么. For every tool output that left the view, :func:`paraphrase_questions` asks
one such question (English, or one in three in Chinese) of its kind, from what the call was:

* the six kinds of :mod:`.natural` (a file as read, a program's output, a traceback, test
  results, a search, a diff), named by their subject (the file, the script, the pattern);
* four more that name no subject at all: a directory listing (``ls``), an install log
  (``pip install``), a web request (``curl``, ``wget``), a linter's report (flake8, pylint,
  ruff, mypy, ``sqlfluff lint``), a count of lines (``wc``).

A question shares none of its words with the output it wants (its command and text), other
than its subject and its ordinal: each kind has two phrasings, and an output whose text has a
word of both is not asked. Each question names one output only (ordinals as in
:mod:`.natural`).
"""

from __future__ import annotations

import posixpath
import zlib
from collections.abc import Mapping, Sequence

from ..evidence.text import STOPWORDS, tokenize
from .natural import Subject, _ord_word, _segments, _unique_names, subject_of
from .recall import Call, Question

PARAPHRASE_KINDS = (
    "read",
    "run",
    "traceback",
    "tests",
    "search",
    "diff",
    "list",
    "install",
    "fetch",
    "lint",
    "count",
)

_TRACEBACK = "Traceback (most recent call last)"
_LINTERS = frozenset({"flake8", "pylint", "ruff", "mypy", "pycodestyle", "pyflakes", "black"})

#: Two phrasings per kind and language; {name}: the subject, {when}/{ord}: the ordinal.
_EN: dict[str, tuple[str, str]] = {
    "read": (
        "Remind me of the source of {name} you had open{when}",
        "How did {name} look back when you displayed it{when}?",
    ),
    "run": (
        "What came out when you launched {name}{when}?",
        "What appeared on screen after starting {name}{when}?",
    ),
    "traceback": (
        "Where did {name} crash{when}? Give me the crash report",
        "What blew up in {name}{when}, with the call chain?",
    ),
    "tests": (
        "Did the checks in {name} go green{when}?",
        "Which cases of {name} passed or broke{when}?",
    ),
    "search": (
        "Where in the code does `{name}` occur{when}?",
        "Which places mention `{name}`{when}?",
    ),
    "diff": (
        "What had you changed in the code{when}?",
        "Which edits to the sources were pending{when}?",
    ),
    "list": (
        "Show me the listing of the folder {name}{when}",
        "Which entries did the directory {name} have{when}?",
    ),
    "install": (
        "What did setting up the dependencies report{when}?",
        "How did fetching the packages go{when}?",
    ),
    "fetch": (
        "What did the web request return{when}?",
        "What came back from the HTTP call{when}?",
    ),
    "lint": (
        "What did the linter complain about{when}?",
        "Which style problems were reported{when}?",
    ),
    "count": (
        "Show me the output where it counted the lines{when}",
        "How long were those sources, line by line{when}?",
    ),
}
_ZH: dict[str, tuple[str, str]] = {
    "read": ("你{ord}打开 {name} 时看到的源码是什么样的？", "{ord}显示 {name} 的时候它长什么样？"),
    "run": ("{ord}启动 {name} 之后屏幕上出现了什么？", "{ord}跑 {name} 之后打印了哪些东西？"),
    "traceback": ("{name} {ord}崩溃时的报错信息是什么？", "{name} {ord}出错时的调用链是什么？"),
    "tests": ("{name} 的用例{ord}过了没有？", "{name} 里哪些用例{ord}挂了？"),
    "search": ("代码里哪些地方{ord}出现了 `{name}`？", "{ord}哪些文件提到了 `{name}`？"),
    "diff": ("{ord}代码改了哪些地方？", "{ord}源码有哪些修改？"),
    "list": ("{ord}{name} 文件夹下有哪些东西？", "{ord}{name} 目录里列出了什么？"),
    "install": ("{ord}装依赖的时候输出了什么？", "{ord}安装包的过程顺利吗？"),
    "fetch": ("{ord}网络请求返回了什么？", "{ord}那次 HTTP 请求拿到了什么？"),
    "lint": ("{ord}代码检查工具报了哪些问题？", "{ord}静态检查发现了什么？"),
    "count": ("{ord}数行数的那次输出是什么？", "{ord}统计行数得到了什么？"),
}


def _other_subject(c: Call) -> Subject | None:
    """A listing, an install, a web request, a linter run or a line count, or None."""
    if c.style != "shell" or c.reads:
        return None
    segments = _segments(c.display)
    if not segments:
        return None
    words = segments[0]
    prog = posixpath.basename(words[0])
    args = [w for w in words[1:] if not w.startswith("-")]
    if prog == "ls":
        return Subject(kind="list", name=args[0].rstrip("/") if args else "")
    if prog in ("pip", "pip3") and args[:1] == ["install"]:
        return Subject(kind="install", name="")
    if prog in ("curl", "wget"):
        return Subject(kind="fetch", name="")
    if prog in _LINTERS or (prog == "sqlfluff" and args[:1] == ["lint"]):
        return Subject(kind="lint", name="")
    if prog == "wc":
        return Subject(kind="count", name="")
    return None


def _subjects(
    calls: Sequence[Call], outputs: Mapping[str, str]
) -> tuple[dict[str, Subject], dict[tuple[str, str], list[str]]]:
    subjects: dict[str, Subject] = {}
    groups: dict[tuple[str, str], list[str]] = {}
    for c in calls:
        if c.id not in outputs:
            continue
        s = subject_of(c) or _other_subject(c)
        if s is None:
            continue
        subjects[c.id] = s
        groups.setdefault((s.kind, s.name), []).append(c.id)
        if s.kind in ("run", "tests") and _TRACEBACK in outputs[c.id]:
            groups.setdefault(("traceback", s.name), []).append(c.id)
    return subjects, groups


def shares_words(question: str, keep: str, output: str, command: str) -> bool:
    """True when ``question`` has a word (not a stopword, nor one of ``keep``: its subject and
    ordinal) that is also a word of the output or of its command."""
    own = set(tokenize(f"{output}\n{command}"))
    allowed = set(tokenize(keep)) | STOPWORDS
    return any(t in own for t in tokenize(question) if t not in allowed)


def _phrased(kind: str, name: str, ord_: str, zh: bool, pick: int) -> list[str]:
    forms = _ZH[kind] if zh else _EN[kind]
    when = f" the {ord_} time" if ord_ and not zh else ""
    out = []
    for form in (forms[pick], forms[1 - pick]):
        text = form.format(name=name, when=when, ord=ord_ if zh else "")
        out.append(" ".join(text.replace("folder  ", "folder ").split()))
    return out


def _no_name(kind: str, name: str, zh: bool) -> str:
    """The subject as asked: a listing of no folder named is of the current one."""
    if kind == "list" and not name:
        return "当前" if zh else "you were in"
    return name


def paraphrase_questions(
    calls: Sequence[Call], outputs: Mapping[str, str], left: Sequence[str], styles: Sequence[str]
) -> list[Question]:
    """One paraphrased question per output in ``left`` (kinds ``para/<kind>``), when its
    call has a kind of :data:`PARAPHRASE_KINDS` and a phrasing shares none of its words."""
    subjects, groups = _subjects(calls, outputs)
    unique = _unique_names(subjects)
    index = {c.id: c for c in calls}
    out: list[Question] = []
    for tid in left:
        s, c = subjects.get(tid), index.get(tid)
        if s is None or c is None or c.style not in styles:
            continue
        kind = s.kind
        if s.name and tid in groups.get(("traceback", s.name), ()):
            kind = "traceback"  # a run that crashed is asked for by its crash
        members = groups[(kind, s.name)]
        pos = members.index(tid)
        zh = zlib.crc32(f"para/{tid}".encode()) % 3 == 0
        ord_ = _ord_word(pos, len(members), zh)
        if pos != len(members) - 1 and not ord_:
            continue
        name = s.name
        if kind in ("read", "run", "traceback", "tests") and name:
            base = posixpath.basename(name)
            name = base if unique.get(base, False) else name
        name = _no_name(kind, name, zh)
        pick = zlib.crc32(tid.encode()) % 2
        keep = f"{name} {ord_} {s.name}"
        for text in _phrased(kind, name, ord_, zh, pick):
            if not shares_words(text, keep, outputs[tid], c.display):
                out.append(Question(tid=tid, style=c.style, kind=f"para/{kind}", text=text))
                break
    return out


__all__ = ["PARAPHRASE_KINDS", "paraphrase_questions", "shares_words"]
