"""What kind of output a recall question asks for, read from its words (English and Chinese).

A question names an output by what it is as often as by its command: "what was in views.py
when you looked at it?" (a file's content as read), "what did running reproduce.py print?" (a
program's output), "show me the traceback from reproduce.py", "what were the test results?",
"what did the grep for `foo` show?", "show me the git diff", 运行 / 搜索 / 测试结果 / 读到的.
:func:`asked_kind` returns that kind (or None) with the words that said so, and
:func:`kind_matches` says whether one stored output is of that kind, from what the call was
(its action, command and outcome), never from the text of the output. Both are deterministic
rules; ranking (:mod:`.rank`) takes a match as a strong signal next to what the question names.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from .model import EvidencePointer
from .understand_programs import command_kinds, kind_programs, listings

#: The kinds of output a question can ask for.
KINDS = ("report", "traceback", "tests", "diff", "search", "list", "install", "lint", "read", "run")
#: Kinds told by the program a call ran (:func:`command_kind`): asked for, a call of one of
#: their programs is as good a handle as a part of the command named.
PROGRAM_KINDS = ("list", "install", "lint")

_I = re.IGNORECASE

#: Words that say which kind of output is asked for, not which one (no extra evidence).
KIND_WORDS = frozenset(
    [
        "grep",
        "grepped",
        "search",
        "searched",
        "searching",
        "find",
        "found",
        "which",
        "files",
        "file",
        "running",
        "ran",
        "executing",
        "executed",
        "print",
        "printed",
        "looked",
        "look",
        "opened",
        "when",
        "diff",
        "patch",
        "git",
        "test",
        "tests",
        "results",
        "result",
        "traceback",
        "tracebacks",
        "stack",
        "trace",
        "show",
        "showed",
        "see",
        "saw",
        "搜索",
        "查找",
        "运行",
        "执行",
        "测试",
        "listing",
        "list",
        "listed",
        "directory",
        "folder",
        "dir",
        "entries",
        "install",
        "installing",
        "installation",
        "dependencies",
        "packages",
        "linter",
        "lint",
        "complain",
        "complained",
        "目录",
        "文件夹",
        "列表",
        "安装",
        "依赖",
        "检查",
    ]
)

#: The first match wins: a traceback of a test run is asked for as a traceback.
_KIND_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "report",
        re.compile(
            r"\bsub-?agents?(?:'s)?\b[^?\n]{0,40}?\b(?:report|found|said|say|return|answer|"
            r"summary|result|conclu)|\b(?:report|findings|answer|summary|result) (?:of|from) "
            r"the (?:sub-?agent|worker|helper)\b",
            _I,
        ),
    ),
    (
        "report",
        re.compile(r"(?:子代理|子智能体|子 agent|subagent).{0,20}?(?:报告|结论|结果|发现|说)", _I),
    ),
    ("traceback", re.compile(r"\btrace ?backs?\b|\bstack ?traces?\b|\bbacktraces?\b", _I)),
    ("traceback", re.compile(r"堆栈|调用栈|traceback", _I)),
    (
        "tests",
        re.compile(
            r"\btests? (?:results?|runs?|output|failures?|suite)\b|\bresults? of (?:the )?tests?\b"
            r"|\b(?:did|do|does) (?:the )?tests? pass\b|\b(?:unit ?)?tests? (?:passed|failed)\b",
            _I,
        ),
    ),
    ("tests", re.compile(r"测试结果|测试输出|跑.{0,40}?测试|测试.{0,6}(?:通过|失败)")),
    ("diff", re.compile(r"\b(?:git )?diffs?\b|\bthe patch\b", _I)),
    ("diff", re.compile(r"差异|改动了什么|的改动")),
    (
        "search",
        re.compile(
            r"\bgrep(?:ped|s)?\b|\b(?:search|searched|searching|look(?:ed)? up|ripgrep|rg)"
            r"\b[^?\n]{0,40}?\bfor\b|\bsearch (?:results?|output)\b|\bwhich files did\b",
            _I,
        ),
    ),
    ("search", re.compile(r"搜索|搜了|查找|检索")),
    (
        "list",
        re.compile(
            r"\b(?:directory|folder|dir) (?:listing|contents?|entries|tree)\b|\blisting\b"
            r"|\blist of (?:the )?(?:files|entries|directory|folder)\b|\b(?:contents?|entries|"
            r"files) (?:of|in|under) (?:the |that |this |your )?(?:directory|folder|dir)\b"
            r"|\bwhat (?:was|is|were) (?:in|inside|under) (?:the |that |this )?(?:directory|"
            r"folder|dir)\b|\b(?:directory|folder|dir)\b[^?\n]{0,40}?\b(?:have|had|has|"
            r"contain(?:ed|s)?|held|hold|list(?:ed)?)\b",
            _I,
        ),
    ),
    (
        "list",
        re.compile(
            r"(?:目录|文件夹)(?:列表|清单|结构|的内容)|文件列表|列出.{0,10}?(?:目录|文件夹|文件)"
            r"|(?:目录|文件夹)(?:里|下|中|内)面?.{0,4}?(?:有|列出|是|包含)"
        ),
    ),
    (
        "install",
        re.compile(
            r"\binstall(?:s|ing|ation)?\b|\bwhen (?:you|we|it) installed\b|\b(?:setting|set) "
            r"up (?:the )?(?:dependencies|deps|packages|requirements)\b|\b(?:fetching|"
            r"downloading|adding|getting|pulling) (?:the )?(?:packages|dependencies|deps|"
            r"requirements)\b",
            _I,
        ),
    ),
    ("install", re.compile(r"安装|装依赖|装包|装.{0,4}?(?:依赖|包)|下载.{0,4}?(?:依赖|包)")),
    (
        "lint",
        re.compile(
            r"\blint(?:er|ers|ing|ed)?\b|\b(?:type|style)[ -]?check(?:er|ers|ing|s)?\b"
            r"|\bstatic (?:analysis|check(?:s|er|ers|ing)?)\b|\bstyle (?:problems?|issues?|"
            r"warnings?|errors?|violations?|complaints?)\b|\b(?:flake8|pylint|ruff|mypy|pyright|"
            r"eslint|tsc|pycodestyle|pyflakes|shellcheck|rubocop|clippy)\b",
            _I,
        ),
    ),
    (
        "lint",
        re.compile(r"lint|代码检查|静态检查|静态分析|类型检查|风格检查|代码规范|检查工具", _I),
    ),
    (
        "read",
        re.compile(
            r"\bwhat (?:was|is) in\b|\bcontents? of\b|\bas (?:you|we|it) (?:read|saw|viewed|"
            r"opened)\b|\bwhen (?:you|we) (?:looked at|read|opened|viewed)\b",
            _I,
        ),
    ),
    ("read", re.compile(r"读到的|看.{0,40}?的时候里面|文件内容|里面是什么|里面有什么")),
    (
        "run",
        re.compile(
            r"\b(?:running|ran|executing|executed|run of|runs of)\b|\bwhat did \S+ (?:print|"
            r"output|say|show)\b|\boutput of running\b",
            _I,
        ),
    ),
    (
        "run",
        re.compile(
            r"\b(?:output|print(?:ed)?|stdout|stderr|result) (?:of|from) `?[\w./-]+\."
            r"(?:py|sh|js|mjs|ts|rb|pl|php)\b",
            _I,
        ),
    ),
    ("run", re.compile(r"运行|执行|[\w./-]+\.(?:py|sh|js|mjs|ts|rb|pl|php)`?\s*的输出")),
)

_TEST_COMMAND = re.compile(
    r"\bpytest\b|-m\s+unittest\b|runtests\.py|\bbin/test\b|\btox\b|\bmanage\.py\s+test\b|"
    r"\b(?:go|cargo|npm|yarn|pnpm)\s+test\b|\bnosetests\b",
    _I,
)
_DIFF_COMMAND = re.compile(r"(?:^|[;&|]\s*|\s)(?:git\s+diff|diff)\b")
_SEARCH_TOOLS = frozenset({"grep", "glob", "search", "find", "search_file", "search_dir"})
_LIST_TOOLS = frozenset({"ls", "list_dir", "list_directory", "list_files", "listdir", "tree"})
#: A listing of the folder the agent was in (``ls`` with no folder named), asked for.
_CURRENT = re.compile(
    r"\b(?:current|working|present|this) (?:directory|folder|dir)\b|\b(?:directory|folder|dir)"
    r" (?:you|we|it) (?:were|was|are|is) in\b|\bcwd\b|当前\s*(?:目录|文件夹)|工作目录",
    _I,
)

_NAMED = r"(?:`(?P<q1>[^`\n]+)`|\"(?P<q2>[^\"\n]+)\"|'(?P<q3>[^'\n]+)'|(?P<bare>[^\s?？，。`]+))"
#: Where a question names the subject of a kind of output ("the grep for X", 搜索 X 的结果).
_SUBJECT: dict[str, tuple[re.Pattern[str], ...]] = {
    "search": (
        re.compile(r"\b(?:grep|search|searched|look(?:ed)? up)\s+for\s+" + _NAMED, _I),
        re.compile(
            r"(?:搜索|查找文件|查找|检索)\s*(?:`(?P<q1>[^`\n]+)`|\"(?P<q2>[^\"\n]+)\"|"
            r"'(?P<q3>[^'\n]+)'|(?P<bare>[^\n？?]+?))\s*(?:的(?:结果|输出)|找到|时|$)"
        ),
    ),
    "tests": (
        re.compile(r"\btests? (?:results?|runs?|output) (?:of|for)\s+" + _NAMED, _I),
        re.compile(r"\btests? of\s+" + _NAMED, _I),
        re.compile(r"跑\s*" + _NAMED + r"\s*的测试"),
    ),
    "traceback": (
        re.compile(r"\b(?:trace ?back|stack ?trace)s? (?:from|of|in)\s+" + _NAMED, _I),
        re.compile(r"把\s*" + _NAMED + r"\s*.{0,12}?的\s*traceback", _I),
    ),
    "list": (
        re.compile(r"\b(?:directory|folder|dir)\s+" + _NAMED, _I),
        re.compile(
            r"(?:`(?P<q1>[^`\n]+)`|\"(?P<q2>[^\"\n]+)\"|'(?P<q3>[^'\n]+)'|"
            r"(?P<bare>[A-Za-z0-9_./~-]+))\s*(?:文件夹|目录)"
        ),
    ),
}
_NOT_SUBJECT = frozenset(
    {"the", "a", "an", "that", "this", "it", "all", "every", "of", "for", "you", "we", "i"}
    | {"listing", "contents", "content", "entries", "tree", "have", "had", "has", "list"}
    | {"contained", "contains", "held", "where", "with", "and", "when"}
)


@dataclass(frozen=True, kw_only=True, slots=True)
class AskedKind:
    """The kind of output asked for, the words of the question that said so, and what it is
    about when the question names it with the kind ("the grep for X": X)."""

    kind: str
    because: str
    subject: str = ""


def _subject(kind: str, text: str) -> str:
    for pattern in _SUBJECT.get(kind, ()):
        m = pattern.search(text)
        if m is None:
            continue
        got = next((g for g in (m.group("q1"), m.group("q2"), m.group("q3")) if g), None)
        if got is None:
            got = m.group("bare")
            got = got if got in (".", "./") else got.rstrip(".,;:!")
            if got.lower() in _NOT_SUBJECT:
                continue
        return got.strip()
    return ""


def asked_kind(text: str) -> AskedKind | None:
    """The kind of output ``text`` asks for (see :data:`KINDS`), or None."""
    for kind, pattern in _KIND_PATTERNS:
        m = pattern.search(text)
        if m is not None:
            subject = _subject(kind, text)
            if kind == "list" and not subject and _CURRENT.search(text):
                subject = "."  # the folder it was in: a listing that names no other
            return AskedKind(kind=kind, because=m.group(0).strip(), subject=subject)
    return None


def _bare_path(word: str) -> str:
    """A path as named: ``./`` in front and ``/`` at the end left out (``./src/`` is ``src``)."""
    while word.startswith("./"):
        word = word[2:]
    return word.rstrip("/") or word


def _named_in(subject: str, command: str) -> bool:
    """``subject`` is one argument of ``command`` (a path also with a folder in front)."""
    want = _bare_path(subject)
    for word in command.replace("'", " ").replace('"', " ").split():
        word = _bare_path(word)
        if word == want or word.endswith("/" + want):
            return True
    return False


def subject_matches(kind: str | None, subject: str, p: EvidencePointer) -> bool:
    """True when the call of ``p`` is about ``subject`` in the sense of ``kind``: a search
    for that very pattern, a test run of that very target, a traceback of that program."""
    if not kind or not subject:
        return False
    if kind == "search":  # the pattern it searched for first (not one of a later filter)
        want = subject.strip("'\"")
        return bool(want) and any(pat.strip("'\"") == want for pat in p.patterns[:1])
    if kind == "list":
        return _lists(subject, p.command or "")
    return _named_in(subject, p.command or "")


def _lists(subject: str, command: str) -> bool:
    """``command`` lists the folder ``subject`` (``.``: the one it was in, no other named, no
    ``cd`` to another before); ``cd src && ls`` lists ``src``."""
    for operands, cwd in listings(command):
        if subject in (".", "./"):
            if all(_bare_path(o) in (".", "") for o in (*operands, cwd)):
                return True
        elif _named_in(subject, " ".join(operands) or cwd):
            return True
    return False


def is_test_command(command: str | None) -> bool:
    return bool(command) and _TEST_COMMAND.search(command or "") is not None


def _search(p: EvidencePointer) -> bool:
    return p.action == "search" or (p.tool_name or "").lower() in _SEARCH_TOOLS


def _ran(p: EvidencePointer) -> bool:
    return p.action == "run" or (p.action is None and bool(p.command) and p.shell)


def _diff(p: EvidencePointer, failed: bool) -> bool:
    return _DIFF_COMMAND.search(p.command or "") is not None


def _tests(p: EvidencePointer, failed: bool) -> bool:
    return is_test_command(p.command)


def _traceback(p: EvidencePointer, failed: bool) -> bool:
    return (failed or p.anchors != ()) and (_ran(p) or is_test_command(p.command))


def _program(p: EvidencePointer, failed: bool) -> bool:
    return _ran(p) and not is_test_command(p.command) and not _diff(p, failed)


def _listing(p: EvidencePointer, failed: bool) -> bool:
    if not p.shell:
        return (p.tool_name or "").lower() in _LIST_TOOLS
    return "list" in command_kinds(p.command)


_MATCHES: dict[str, Callable[[EvidencePointer, bool], bool]] = {
    "list": _listing,
    "install": lambda p, failed: p.shell and "install" in command_kinds(p.command),
    "lint": lambda p, failed: p.shell and "lint" in command_kinds(p.command),
    "read": lambda p, failed: p.action == "read",
    "search": lambda p, failed: _search(p),
    "diff": _diff,
    "tests": _tests,
    "traceback": _traceback,
    "run": _program,
    "report": lambda p, failed: p.source_scope == "sub_agent",
}


def kind_matches(kind: str | None, p: EvidencePointer, failed: bool) -> bool:
    """True when the output of ``p`` is of ``kind`` (False for no kind), judged from what
    the call was (its action, command, outcome), never from the words of the output."""
    match = _MATCHES.get(kind) if kind is not None else None
    if match is None:
        return False
    if kind != "report" and p.role not in ("tool", "user"):
        return False
    return match(p, failed)


def counts_runs(kind: str | None) -> bool:
    """Whether the session's call log can count the outputs of ``kind`` (a traceback depends
    on the outcome, which the log does not hold)."""
    return kind in ("read", "run", "tests", "search", "diff", *PROGRAM_KINDS)


__all__ = [
    "KINDS",
    "KIND_WORDS",
    "PROGRAM_KINDS",
    "AskedKind",
    "asked_kind",
    "command_kinds",
    "counts_runs",
    "is_test_command",
    "kind_matches",
    "kind_programs",
    "subject_matches",
]
