"""Content types and anchors of evidence text (issue 4, section 3).

:func:`classify` names what a body of text is (a stack trace, test output, a diff ...);
:func:`extract_anchors` pulls out the handles a later question is likely to use: exception
types, ``file:line`` locations, failing test ids, the exit code and the command.
Both are pure functions of the text, bounded in time on very large inputs (only the head and
the tail of a huge output are scanned). A command's output sent as a JSON object with its exit
code (mini-swe-agent's ``{"returncode": 1, "output": "..."}``) is read as the text it holds.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Sequence

from ..core.shell import exit_code
from ..core.textmemo import by_text
from .model import CompactSummaryItem, EvidencePointer

CONTENT_TYPES: tuple[str, ...] = (
    "stack_trace",
    "error",
    "test_output",
    "diff",
    "file_content",
    "log",
    "command_output",
    "message",
)

#: Scan at most this many characters at each end of a text.
_SCAN = 120_000
MAX_ANCHORS = 48
_M = re.MULTILINE

_STACK = [
    # Python
    re.compile(r"^Traceback \(most recent call last\):", _M),
    re.compile(r'^\s*File "[^"\n]+", line \d+', _M),
    # Java / JVM
    re.compile(r'Exception in thread "[^"\n]*"'),
    re.compile(r"^\s+at [\w$.<>/]+\([\w$]+\.(?:java|kt|scala|groovy):\d+\)", _M),
    # JavaScript / TypeScript
    re.compile(r"^\s+at (?:[^\n()]+ \()?[^\s()]+\.(?:js|mjs|cjs|ts|jsx|tsx):\d+:\d+\)?\s*$", _M),
    # Go
    re.compile(r"^panic: ", _M),
    re.compile(r"^goroutine \d+ \[[\w ]+\]:", _M),
    # Rust
    re.compile(r"thread '[^'\n]*' panicked at"),
]

_ERROR = [
    re.compile(r"^\s*(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception)(?::|\s*$)", _M),
    re.compile(r"^\s*(?:error|fatal|ERROR|FATAL|Error)(?:\[\w+\])?:", _M),
    re.compile(
        r"\b(?:command not found|No such file or directory|Permission denied|"
        r"Segmentation fault|core dumped|Traceback)\b"
    ),
    re.compile(r"^npm ERR!", _M),
    re.compile(r"^E\s{2,}\w", _M),
    # a failing test run
    re.compile(r"^FAILED\b|^FAIL[:\s]|\b\d+ failed\b|^test result: FAILED", _M),
]

_TEST = [
    # pytest
    re.compile(r"^=+ test session starts =+", _M),
    re.compile(r"^=+ .*\b(?:passed|failed|errors?|skipped|xfailed)\b.* in [\d.]+s", _M),
    re.compile(r"^(?:FAILED|ERROR|PASSED) [\w/.\-]+\.py::", _M),
    re.compile(r"^[\w/.\-]+\.py::\S+ (?:PASSED|FAILED|ERROR|SKIPPED)", _M),
    re.compile(r"^[\w/.\-]+\.py [.FEsxX]+(?:\s+\[\s*\d+%\])?\s*$", _M),
    # unittest / Django
    re.compile(r"^Ran \d+ tests? in [\d.]+s", _M),
    re.compile(r"^FAILED \((?:failures|errors)=\d+", _M),
    # jest
    re.compile(r"^Tests:\s+(?:\d+ \w+, )*\d+ (?:failed|passed)", _M),
    re.compile(r"^Test Suites:\s+", _M),
    # go test
    re.compile(r"^--- (?:FAIL|PASS): \w+", _M),
    re.compile(r"^(?:FAIL|ok)\s+[\w./\-]+\s+(?:[\d.]+s|\[)", _M),
    # cargo test
    re.compile(r"^test result: (?:ok|FAILED)\.", _M),
    re.compile(r"^test [\w:]+ \.\.\. (?:ok|FAILED|ignored)$", _M),
]

_DIFF_GIT = re.compile(r"^diff --git ", _M)
_DIFF_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@", _M)
_DIFF_FILES = re.compile(r"^--- \S.*\n\+\+\+ \S", _M)

_NUMBERED = re.compile(r"^\s*\d+(?:\t|: |:\t| \| |  )")
_SOURCE = re.compile(
    r"^\s*(?:def |class |import |from \S+ import |return\b|if .*:$|elif |else:|for .*:$|"
    r"while .*:$|try:|except\b|with .*:$|@\w|#include|function\b|const |let |var |public |"
    r"private |protected |fn |pub |package |func |use |impl |struct |#)|[;{}]\s*$|^\s*[}\])]"
)
_SWE_FILE = re.compile(r"^\[File: [^\]\n]+ \(\d+ lines total\)\]", _M)
_LOG = re.compile(
    r"^\[?\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}|^\[?(?:INFO|DEBUG|WARN|WARNING|ERROR|TRACE|CRITICAL)\b"
    r"[\]:\s]|^\d{2}:\d{2}:\d{2}[.,]\d+|^[A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} "
)


#: keys of the exit code in a command output sent as a JSON object
_JSON_EXIT_KEYS = ("returncode", "exit_code", "exitCode", "returnCode", "exit_status")


def observation_text(text: str) -> str | None:
    """A command output sent as a JSON object holding its exit code (mini-swe-agent's
    ``{"returncode": 1, "output": "...Traceback..."}``) as plain text: the exit code as
    ``<returncode>N</returncode>``, then each field, its strings unescaped (so a traceback's
    lines are lines again). None for any other text."""
    head = text[:200].lstrip()
    if not head.startswith("{") or '"' not in head or len(text) > 2 * _SCAN:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    code = next((data[k] for k in _JSON_EXIT_KEYS if type(data.get(k)) is int), None)
    if code is None:
        return None
    lines = [f"<returncode>{code}</returncode>"]
    for key, value in data.items():
        if key in _JSON_EXIT_KEYS:
            continue
        if isinstance(value, str):
            lines += [f"{key}:", value] if "\n" in value else [f"{key}: {value}"]
        elif isinstance(value, (int, float, bool)):
            lines.append(f"{key}: {value}")
    return "\n".join(lines)


def _scan_text(text: str) -> str:
    decoded = observation_text(text)
    if decoded is not None:
        return decoded
    if len(text) <= 2 * _SCAN:
        return text
    return text[:_SCAN] + "\n" + text[-_SCAN:]


def _lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


def _ratio(lines: list[str], pattern: re.Pattern[str]) -> float:
    if not lines:
        return 0.0
    sample = lines[:400]
    return sum(1 for ln in sample if pattern.search(ln)) / len(sample)


@by_text()  # the same output recurs (a test rerun, a file read again): classified once
def classify(text: str, role: str = "tool") -> tuple[str, ...]:
    """The content types of ``text``, in :data:`CONTENT_TYPES` order; never empty.

    Only a tool result can be ``command_output``: prose from any other ``role`` (an assistant
    or user message, a sub-agent's text) that has no other type is a ``message``."""
    s = _scan_text(text)
    found: set[str] = set()
    if any(p.search(s) for p in _STACK):
        found.update(("stack_trace", "error"))
    if any(p.search(s) for p in _ERROR):
        found.add("error")
    code = exit_code(s)
    if code not in (None, 0):
        found.add("error")
    if any(p.search(s) for p in _TEST):
        found.add("test_output")
    if _DIFF_GIT.search(s) or (_DIFF_HUNK.search(s) and _DIFF_FILES.search(s)):
        found.add("diff")
    lines = _lines(s)
    if "diff" not in found and (
        _SWE_FILE.search(s)
        or (len(lines) >= 3 and _ratio(lines, _NUMBERED) >= 0.6)
        or (len(lines) >= 5 and _ratio(lines, _SOURCE) >= 0.45)
    ):
        found.add("file_content")
    if len(lines) >= 2 and _ratio(lines, _LOG) >= 0.3:
        found.add("log")
    if not found or found == {"error"}:
        found.add("command_output" if role == "tool" else "message")
    return tuple(t for t in CONTENT_TYPES if t in found)


# --------------------------------------------------------------------------- anchors

_PY_EXC = re.compile(
    r"^\s*(?:E\s+)?((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Warning|Exit|Interrupt|Failure))"
    r"(?::|\s*$)",
    _M,
)
#: The first unindented line after a Python traceback's frames names the exception.
_PY_TB_EXC = re.compile(
    r"^Traceback \(most recent call last\):[ \t]*\n(?:[ \t][^\n]*\n|\n)*"
    r"([A-Za-z_][\w.]*)(?=:|[ \t]*$)",
    _M,
)
_JAVA_EXC = re.compile(r'(?:Exception in thread "[^"\n]*"|Caused by:)\s+((?:[\w$]+\.)*[\w$]+)')
_GO_PANIC = re.compile(r"^panic: ", _M)
_RUST_PANIC = re.compile(r"thread '[^'\n]*' panicked at (?:'[^'\n]*', )?([\w./\-]+\.rs):(\d+)")

_PY_FRAME = re.compile(r'^\s*File "([^"\n]+)", line (\d+)', _M)
_JAVA_FRAME = re.compile(r"^\s+at [\w$.<>/]+\(([\w$]+\.(?:java|kt|scala|groovy)):(\d+)\)", _M)
_JS_FRAME = re.compile(
    r"^\s+at (?:[^\n()]+ \()?(?:file://)?([^\s()]+\.(?:js|mjs|cjs|ts|jsx|tsx)):(\d+):\d+\)?\s*$",
    _M,
)
_GO_FRAME = re.compile(r"^\t(/?[\w./\-]+\.go):(\d+)(?: \+0x[0-9a-f]+)?$", _M)
_PYTEST_LOC = re.compile(r"^([\w/.\-]+\.py):(\d+): (?:in \w+|\w+(?:Error|Exception))", _M)

_PYTEST_FAILED = re.compile(r"^(?:FAILED|ERROR) ([\w/.\-]+\.py::[^\s]+)", _M)
_PYTEST_FAILED2 = re.compile(r"^([\w/.\-]+\.py::\S+) (?:FAILED|ERROR)", _M)
_UNITTEST_FAIL = re.compile(r"^(?:FAIL|ERROR): (\w+) \(([\w.]+)\)", _M)
_GO_FAIL = re.compile(r"^\s*--- FAIL: (\w+(?:/[\w\-]+)*)", _M)
_CARGO_FAIL = re.compile(r"^test ([\w:]+) \.\.\. FAILED$", _M)
_JEST_FAIL = re.compile(r"^\s*● (.+?)\s*$", _M)

_PATH_IN_CMD = re.compile(
    r"(?<![\w/.\-])((?:[\w.\-]+/)*[\w\-]+\.(?:py|js|ts|tsx|jsx|go|rs|java|"
    r"c|cc|cpp|h|hpp|rb|php|cfg|toml|ini|json|ya?ml|txt|md|sh))\b"
)

_CD_PREFIX = re.compile(r"^\s*cd\s+(?:\"[^\"]*\"|'[^']*'|\S+)\s*(?:&&|;)\s*")


@functools.lru_cache(maxsize=4096)
def normalize_command(command: str) -> str:
    """A command as it is compared: leading ``cd DIR &&`` steps dropped, blanks collapsed."""
    cmd = command.strip()
    while True:
        stripped = _CD_PREFIX.sub("", cmd, count=1)
        if stripped == cmd:
            break
        cmd = stripped
    return " ".join(cmd.split())


def _short_exc(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _is_library_path(path: str) -> bool:
    return any(
        part in path
        for part in (
            "site-packages/",
            "dist-packages/",
            "/lib/python",
            "<frozen",
            "node_modules/",
            "/usr/lib/",
            "/rustc/",
            "/go/src/runtime/",
        )
    )


def _dedupe(items: Iterable[str]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for item in items:
        if item not in seen:
            seen[item] = None
        if len(seen) >= MAX_ANCHORS:
            break
    return tuple(seen)


@by_text()
def extract_anchors(text: str, command: str | None = None) -> tuple[str, ...]:
    """Handles to find ``text`` again: ``command:...``, ``exit_code:N``, ``exception:Name``,
    ``test:id`` (failing tests), ``file:path:line`` (frames and test locations, project frames
    first) and ``file:path`` for paths named in the command."""
    s = _scan_text(text)
    out: list[str] = []
    if command:
        norm = normalize_command(command)
        if norm:
            out.append("command:" + norm[:300])
    code = exit_code(s)
    if code is not None:
        out.append(f"exit_code:{code}")
    found = [(m.start(1), _short_exc(m.group(1))) for m in _PY_EXC.finditer(s)]
    found += [(m.start(1), _short_exc(m.group(1))) for m in _PY_TB_EXC.finditer(s)]
    found += [(m.start(1), _short_exc(m.group(1))) for m in _JAVA_EXC.finditer(s)]
    panic = _GO_PANIC.search(s) or _RUST_PANIC.search(s)
    if panic:
        found.append((panic.start(), "panic"))
    # the last exception in the text is usually the one that matters: list it first
    out.extend(f"exception:{e}" for _, e in sorted(found, reverse=True))
    tests: list[str] = [m.group(1) for m in _PYTEST_FAILED.finditer(s)]
    tests += [m.group(1) for m in _PYTEST_FAILED2.finditer(s)]
    tests += [f"{m.group(2)}.{m.group(1)}" for m in _UNITTEST_FAIL.finditer(s)]
    tests += [m.group(1) for m in _GO_FAIL.finditer(s)]
    tests += [m.group(1) for m in _CARGO_FAIL.finditer(s)]
    tests += [m.group(1) for m in _JEST_FAIL.finditer(s) if len(m.group(1)) < 200]
    out.extend(f"test:{t}" for t in tests)
    frames: list[tuple[str, str]] = []
    for pat in (_PY_FRAME, _JAVA_FRAME, _JS_FRAME, _GO_FRAME, _PYTEST_LOC):
        frames.extend((m.group(1), m.group(2)) for m in pat.finditer(s))
    frames.extend((m.group(1), m.group(2)) for m in _RUST_PANIC.finditer(s))
    project = [f for f in frames if not _is_library_path(f[0])]
    library = [f for f in frames if _is_library_path(f[0])]
    # innermost project frames are the most specific: last first
    out.extend(f"file:{p}:{n}" for p, n in reversed(project))
    out.extend(f"file:{p}:{n}" for p, n in reversed(library[-4:]))
    if command:
        out.extend(f"file:{m.group(1)}" for m in _PATH_IN_CMD.finditer(command))
    return _dedupe(out)


# --------------------------------------------------------------------------- summary hints

MAX_EVIDENCE_IDS = 8

_H_BACKTICK = re.compile(r"`([^`\n]{2,300})`")
_H_PATH = re.compile(r"(?<![\w/.\-])((?:[\w.\-]+/)*[\w\-]+\.[A-Za-z]{1,5})(?::(\d+))?\b")
_H_EXC = re.compile(r"\b((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Warning|Exit|Interrupt))\b")
_H_TEST = re.compile(r"([\w/.\-]+\.py::[\w\[\]\-.:]+)|\b(test_\w+|Test[A-Z]\w*)\b")


def summary_hints(text: str) -> tuple[str, ...]:
    """Query hints found in a summary line: commands in backticks, file paths (with line when
    given), exception types and test names."""
    hints: dict[str, None] = {}
    for m in _H_BACKTICK.finditer(text):
        hints["cmd:" + normalize_command(m.group(1))] = None
    for m in _H_TEST.finditer(text):
        hints["test:" + (m.group(1) or m.group(2))] = None
    for m in _H_EXC.finditer(text):
        hints["exception:" + m.group(1).rsplit(".", 1)[-1]] = None
    for m in _H_PATH.finditer(text):
        path = m.group(1)
        if "." in path and not path.replace(".", "").isdigit() and "::" not in path:
            hints["file:" + path + (f":{m.group(2)}" if m.group(2) else "")] = None
    return tuple(hints)


class _Linker:
    """The pointers of one compaction prepared for linking summary lines: how strongly a hint
    links to a pointer (1.0 specific, 0.5 loose), with what it compares computed once per
    pointer instead of once per line and pointer."""

    def __init__(self, pointers: Sequence[EvidencePointer]) -> None:
        self.pointers = pointers
        self.cmds = [
            (i, c) for i, p in enumerate(pointers) if (c := normalize_command(p.command or ""))
        ]
        self.anchors = [frozenset(p.anchors) for p in pointers]
        self.tests = [
            (i, a) for i, p in enumerate(pointers) for a in p.anchors if a.startswith("test:")
        ]
        #: last path component -> (pointer index, anchor path, anchor line)
        self.files: dict[str, list[tuple[int, str, str]]] = {}
        for i, p in enumerate(pointers):
            for a in p.anchors:
                if a.startswith("file:"):
                    apath, _, aline = a[5:].partition(":")
                    self.files.setdefault(apath.rsplit("/", 1)[-1], []).append((i, apath, aline))

    def strengths(self, hint: str) -> dict[int, float]:
        """Pointer index -> strength of ``hint`` (only the pointers it links to)."""
        kind, _, value = hint.partition(":")
        out: dict[int, float] = {}
        if not value:
            return out
        if kind == "cmd":
            for i, cmd in self.cmds:
                if cmd == value:
                    out[i] = 1.0
                elif value in cmd:
                    out[i] = 0.5
        elif kind in ("test", "exception"):
            for i, anchors in enumerate(self.anchors):
                if hint in anchors:
                    out[i] = 1.0
            if kind == "test":
                for i, a in self.tests:
                    if value in a:
                        out[i] = 1.0
        elif kind == "file":
            path, _, line = value.partition(":")
            for i, apath, aline in self.files.get(path.rsplit("/", 1)[-1], ()):
                if apath == path or apath.endswith("/" + path) or path.endswith("/" + apath):
                    out[i] = max(out.get(i, 0.0), 1.0 if line and aline == line else 0.5)
        return out

    def link(self, kind: str, text: str) -> CompactSummaryItem:
        hints = summary_hints(text)
        scores: dict[int, float] = {}
        strongest: dict[int, float] = {}
        for h in hints:
            for i, v in self.strengths(h).items():
                scores[i] = scores.get(i, 0.0) + v
                strongest[i] = max(strongest.get(i, 0.0), v)
        scored = [(score, i, self.pointers[i].id) for i, score in scores.items() if score > 0]
        best = max((strongest[i] for _, i, _ in scored), default=0.0)
        # strongest link first; among equals, the most recent evidence first
        scored.sort(key=lambda t: (-t[0], -t[1]))
        ids = tuple(dict.fromkeys(pid for _, _, pid in scored))[:MAX_EVIDENCE_IDS]
        confidence = 1.0 if best >= 1.0 else (0.7 if ids else 0.3)
        return CompactSummaryItem(
            kind=kind, text=text, confidence=confidence, evidence_ids=ids, query_hints=hints
        )


def link_summary_item(
    kind: str, text: str, pointers: Sequence[EvidencePointer]
) -> CompactSummaryItem:
    return _Linker(pointers).link(kind, text)


def link_summary_items(
    items: Iterable[tuple[str, str]], pointers: Sequence[EvidencePointer]
) -> tuple[CompactSummaryItem, ...]:
    """:func:`link_summary_item` of every (kind, text), the pointers prepared once."""
    linker = _Linker(pointers)
    return tuple(linker.link(kind, text) for kind, text in items)


__all__ = [
    "CONTENT_TYPES",
    "classify",
    "exit_code",
    "extract_anchors",
    "link_summary_item",
    "link_summary_items",
    "normalize_command",
    "summary_hints",
]
