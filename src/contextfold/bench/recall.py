"""Recall of outputs that left the view, asked the way a user would (issue 11, part 6).

Each trajectory is replayed through :class:`contextfold.ContextManager` (``add`` then
``prepare`` before every assistant message, as in :mod:`.replay`). A tool output has *left the
view* when, after some ``prepare``, its exact text is no longer in the view. After the replay,
every output that left is asked for through ``cm.restore(query, k=5)`` in the ways a user
would name it, and a query counts as found at rank r when the r-th hit is that tool call's
output (or a byte-identical output of another call: the user cannot tell them apart):

* ``call``: the command (``show me the full output of `pytest -x` ``, or the words without
  backticks), or for a file tool, the tool and its arguments (``Read /testbed/x.py lines
  10-40``); when the same call ran several times, the run is named by an ordinal counted over
  the whole trajectory ("the first run", "the second time", "the run before last", 第二次),
  and the newest run is asked for without one.
* ``path``: a file the call read, as a path relative to the project ("show me pkg/x.py as you
  read it"), with an ordinal among the reads of that file when it was read several times.
* ``error``: the exception type the output ends with ("the full KeyError error"), with an
  ordinal among the outputs that show that exception type.
* ``ordinal``: the first and the last failing command ("What was the full error output of the
  first failing command?"), when that output left the view.

One query in five is asked in Chinese. Results are split by tool style: ``shell`` (a command
line tool) and ``file`` (Read / Write / Edit / Grep, ``str_replace_editor``). File-tool runs
are the same trajectories rewritten by :mod:`.toolstyles`; only their file-tool queries count
(their shell queries would repeat the shell runs). ``restore`` latency is measured per query.
"""

from __future__ import annotations

import json
import multiprocessing
import re
import shutil
import tempfile
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.shell import ShellReader, exit_code
from ..engine.manager import ContextManager
from ..errors import ContextFoldError
from ..evidence import semantic
from ..jsontypes import JSONObject, as_object
from .metrics import MsgDict, content_text, function_of, tool_calls
from .recall_summary import EXACT_KINDS, K, summarize
from .results import (
    RecallMeasure,
    RecallQuestion,
    RecallResults,
    RecallRun,
    RecallSummary,
    VectorCost,
)
from .toolstyles import DEFAULT_CWD, convert_trace

if TYPE_CHECKING:
    from ..storage.base import Store

STYLE_SETS = ("shell", "claude", "sweagent")

ORD_EN = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth")
ORD_ZH = ("第一次", "第二次", "第三次", "第四次", "第五次", "第六次", "第七次", "第八次", "第九次")
_EXC = re.compile(r"^\s*(?:E\s+)?(?:[A-Za-z_]\w*\.)*([A-Z]\w*(?:Error|Exception))(?::|\s*$)", re.M)
#: A shell call shows files when it only runs these, at least one viewer on a file.
_VIEW = {"cat", "nl", "head", "tail", "sed", "less", "more"}
_FILTER = {"grep", "head", "tail", "wc", "sort", "uniq", "cut"}
_CD = re.compile(r"^\s*cd\s+(?:\"[^\"]*\"|'[^']*'|[^\s;&|]+)\s*&&\s*")


@dataclass(frozen=True, kw_only=True, slots=True)
class Call:
    id: str
    name: str
    args: JSONObject
    style: str
    #: What identifies "the same call" for a user (the command, or the tool and arguments).
    key: str
    #: How a user names the call in a question.
    display: str
    #: Files the call read (relative to the project root), for path questions.
    reads: tuple[str, ...]


def _rel(path: str) -> str:
    root = DEFAULT_CWD.rstrip("/") + "/"
    p = path[len(root) :] if path.startswith(root) else path
    while p.startswith("./"):
        p = p[2:]
    return p


def _shell_display(command: str) -> str:
    cmd = command.strip()
    while (m := _CD.match(cmd)) is not None:
        cmd = cmd[m.end() :]
    first = cmd.split("\n", 1)[0].strip()
    return first if len(first) <= 200 else first[:200]


def _file_display(name: str, args: Mapping[str, object]) -> str:
    path = str(args.get("file_path") or args.get("path") or "")
    if name == "Read":
        offset, limit = args.get("offset"), args.get("limit")
        if isinstance(limit, int):
            first = offset if isinstance(offset, int) else 1
            return f"Read {path} lines {first}-{first + limit - 1}"
        return f"Read {path}"
    if name == "Grep":
        return f"Grep {args.get('pattern')!s} in {path}"
    if name == "str_replace_editor":
        sub = str(args.get("command") or "")
        rng = args.get("view_range")
        if isinstance(rng, list) and len(rng) == 2:
            return f"str_replace_editor {sub} {path} lines {rng[0]}-{rng[1]}"
        return f"str_replace_editor {sub} {path}"
    return f"{name} {path}"


def trace_calls(messages: Sequence[MsgDict]) -> list[Call]:
    """Every tool call of a trajectory, in order, with how a user would name it."""
    reader = ShellReader()
    reader.root = DEFAULT_CWD
    out: list[Call] = []
    for msg in messages:
        for call in tool_calls(msg):
            fn = function_of(call)
            name = str(fn.get("name") or "")
            raw = fn.get("arguments") or "{}"
            try:
                decoded = json.loads(raw) if isinstance(raw, str | bytes) else {}
            except ValueError:
                decoded = {}
            args = as_object(decoded)
            shell = isinstance(args.get("command"), str) and name not in ("str_replace_editor",)
            if shell:
                display = _shell_display(str(args["command"]))
                key = " ".join(display.split())
                reads: tuple[str, ...] = ()
                eff = reader.read_call(name, args)
                progs = [seg.prog for seg in eff.segments if seg.prog not in ("", "cd")]
                shows = all(p in _VIEW or p in _FILTER for p in progs) and any(
                    seg.prog in _VIEW and seg.reads for seg in eff.segments
                )
                if shows and not eff.writes:
                    reads = tuple(_rel(r) for r in eff.reads)
            else:
                display = _file_display(name, args)
                key = display
                path = str(args.get("file_path") or args.get("path") or "")
                viewing = name == "Read" or (
                    name == "str_replace_editor" and args.get("command") == "view"
                )
                reads = (_rel(path),) if viewing and path else ()
            out.append(
                Call(
                    id=str(call.get("id")),
                    name=name,
                    args=args,
                    style="shell" if shell else "file",
                    key=key,
                    display=display,
                    reads=reads,
                )
            )
    return out


def _ordinal(pos: int, n: int, zh: bool) -> str:
    """How a user names run ``pos`` (0-based) of ``n``; "" for the newest."""
    if n <= 1 or pos == n - 1:
        return ""
    if zh:
        if pos < len(ORD_ZH):
            return ORD_ZH[pos]
        return "倒数第二次" if pos == n - 2 else f"第{pos + 1}次"
    if pos < len(ORD_EN):
        return f"the {ORD_EN[pos]} time"
    return "the time before last" if pos == n - 2 else f"the {pos + 1}th time"


def _last_exception(text: str) -> str | None:
    found = _EXC.findall(text)
    return found[-1] if found else None


def _failed(text: str) -> bool:
    """A non-zero exit code; when the output reports none, a Python traceback."""
    code = exit_code(text)
    if code is not None:
        return code != 0
    return "Traceback (most recent call last)" in text


@dataclass(frozen=True, kw_only=True, slots=True)
class Question:
    tid: str
    style: str
    kind: str
    text: str


def questions(
    calls: Sequence[Call], outputs: Mapping[str, str], left: Sequence[str], styles: Sequence[str]
) -> list[Question]:
    """The questions for the outputs in ``left`` whose call style is in ``styles``."""
    by_key: dict[str, list[str]] = {}
    by_read: dict[str, list[str]] = {}
    by_exc: dict[str, list[str]] = {}
    failing: list[str] = []
    for c in calls:
        if c.id not in outputs:
            continue
        by_key.setdefault(c.key, []).append(c.id)
        for r in c.reads:
            by_read.setdefault(r, []).append(c.id)
        for exc in dict.fromkeys(_EXC.findall(outputs[c.id])):
            by_exc.setdefault(exc, []).append(c.id)
        if _failed(outputs[c.id]):
            failing.append(c.id)
    index = {c.id: c for c in calls}
    out: list[Question] = []
    for tid in left:
        found = index.get(tid)
        if found is None or found.style not in styles:
            continue
        c = found
        zh = zlib.crc32(tid.encode()) % 5 == 0
        runs = by_key[c.key]
        ordinal = _ordinal(runs.index(tid), len(runs), zh)
        if c.style == "shell":
            if zh:
                text = f"把 `{c.display}` {ordinal}的完整输出给我"
            elif len(out) % 2:
                text = f"What did {c.display} print {ordinal}?"
            else:
                text = f"Show me the full output of `{c.display}` {ordinal}"
        else:
            text = (
                f"把 {c.display} {ordinal}的完整结果给我"
                if zh
                else f"Show me the full output of {c.display} {ordinal}"
            )
        out.append(Question(tid=tid, style=c.style, kind="call", text=" ".join(text.split())))
        for path in c.reads:
            reads = by_read[path]
            ordinal = _ordinal(reads.index(tid), len(reads), zh)
            text = (
                f"{ordinal}读到的 {path} 内容是什么"
                if zh
                else f"Show me {path} as you read it {ordinal}"
            )
            out.append(Question(tid=tid, style=c.style, kind="path", text=" ".join(text.split())))
        exc = _last_exception(outputs[tid])
        if exc:
            seen = by_exc[exc]
            ordinal = _ordinal(seen.index(tid), len(seen), zh)
            text = (
                f"{ordinal}的 {exc} 完整报错" if zh else f"What was the full {exc} error {ordinal}?"
            )
            out.append(Question(tid=tid, style=c.style, kind="error", text=" ".join(text.split())))
        if failing and tid == failing[0]:
            text = (
                "第一次失败的命令的完整报错是什么？"
                if zh
                else "What was the full error output of the first failing command?"
            )
            out.append(Question(tid=tid, style=c.style, kind="ordinal", text=text))
        elif failing and tid == failing[-1]:
            text = (
                "最后一次失败的命令的完整报错是什么？"
                if zh
                else "What was the full error output of the last failing command?"
            )
            out.append(Question(tid=tid, style=c.style, kind="ordinal", text=text))
    return out


def _make_manager(workdir: str, window: int, preset: str) -> ContextManager:
    return ContextManager(
        workspace=workdir, session_id="bench", context_window=window, preset=preset
    )


def measure(
    messages: Sequence[MsgDict],
    *,
    window: int = 32_000,
    preset: str = "progressive",
    styles: Sequence[str] = ("shell", "file"),
) -> RecallMeasure:
    """Replay one trajectory and ask for every output that left the view."""
    workdir = tempfile.mkdtemp(prefix="cf-bench-recall-")
    try:
        cm = _make_manager(workdir, window, preset)
        index_before = dict(semantic.STATS)
        outputs: dict[str, str] = {}
        left: dict[str, None] = {}
        prev = 0
        for i, msg in enumerate(messages):
            if msg.get("role") != "assistant" or i == 0:
                continue
            for m in messages[prev:i]:
                if m.get("role") == "tool" and m.get("tool_call_id"):
                    text = content_text(m.get("content"))
                    if text:
                        outputs[str(m["tool_call_id"])] = text
                cm.add(dict(m))
            prev = i
            view = cm.prepare()
            contents = [content_text(m.get("content")) for m in view]
            in_view = {
                str(m.get("tool_call_id")): t
                for m, t in zip(view, contents, strict=False)
                if m.get("role") == "tool"
            }
            joined: str | None = None
            for tid, orig in outputs.items():
                if tid in left or in_view.get(tid) == orig:
                    continue
                joined = "\n".join(contents) if joined is None else joined
                if orig not in joined:
                    left[tid] = None
        calls = trace_calls(messages)
        from .natural import natural_questions
        from .paraphrase import paraphrase_questions

        asked = questions(calls, outputs, list(left), styles)
        asked += natural_questions(calls, outputs, list(left), styles)
        asked += paraphrase_questions(calls, outputs, list(left), styles)
        results: list[RecallQuestion] = []
        for q in asked:
            sem0 = semantic.STATS["query_seconds"]
            t0 = time.perf_counter()
            hits = cm.restore(q.text, k=K)
            ms = (time.perf_counter() - t0) * 1000
            sem_ms = (semantic.STATS["query_seconds"] - sem0) * 1000
            rank = next(
                (
                    r
                    for r, h in enumerate(hits, 1)
                    if h.pointer.tool_use_id == q.tid or h.text == outputs[q.tid]
                ),
                None,
            )
            results.append(
                {
                    "style": q.style,
                    "kind": q.kind,
                    "query": q.text,
                    "rank": rank,
                    "ms": round(ms, 3),
                    "sem_ms": round(sem_ms, 3),
                    "got": [h.pointer.tool_use_id for h in hits[:3]],
                    "why": [h.why for h in hits[:2]],
                    "want": q.tid,
                }
            )
        cost = vector_cost(cm.session.store, cm.session.session_id, index_before)
        close = getattr(cm, "close", None)
        if callable(close):
            close()
        return {"outputs": len(outputs), "left": len(left), "questions": results, **cost}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def vector_cost(store: Store, session_id: str, before: Mapping[str, float]) -> VectorCost:
    """What the semantic vectors of the replay cost: how many, the seconds computing them,
    and the bytes of their documents in the store (all 0 without the ``semantic`` extra)."""
    n = semantic.STATS["vectors"] - before["vectors"]
    secs = semantic.STATS["seconds"] - before["seconds"]
    docs = store.docs(semantic.NAMESPACE, prefix=f"{session_id}/")
    size = sum(len(json.dumps(v, separators=(",", ":"))) for v in docs.values())
    return {"vectors": n, "vector_seconds": round(secs, 4), "vector_bytes": size}


def _task(args: tuple[str, str, int, str]) -> RecallRun:
    path, style_set, window, preset = args
    base: RecallRun = {"trace": Path(path).name, "set": style_set}
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if style_set == "shell":
            run = measure(data, window=window, preset=preset, styles=("shell",))
        else:
            converted = convert_trace(data, style_set)
            run = measure(converted, window=window, preset=preset, styles=("file",))
    except Exception as exc:  # one broken run must not kill the benchmark
        return {**base, "error": f"{type(exc).__name__}: {exc}"}
    return {**base, **run}


def run_recall(
    traces: Sequence[Path],
    *,
    window: int = 32_000,
    preset: str = "progressive",
    style_sets: Sequence[str] = STYLE_SETS,
    jobs: int = 1,
    progress: Callable[[int, int, str], None] | None = None,
) -> RecallResults:
    """Measure recall over ``traces`` (each as is, and rewritten into each file-tool style)."""
    unknown = [s for s in style_sets if s not in STYLE_SETS]
    if unknown:
        raise ContextFoldError(f"unknown tool styles {unknown}; choose from {STYLE_SETS}")
    order = sorted(traces, key=lambda p: -p.stat().st_size)
    tasks = [(str(p), s, window, preset) for p in order for s in style_sets]
    runs: list[RecallRun] = []
    t0 = time.perf_counter()
    if jobs <= 1:
        for task in tasks:
            runs.append(_task(task))
            if progress is not None:
                progress(len(runs), len(tasks), f"recall {task[1]} {Path(task[0]).name[:48]}")
    else:
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(processes=min(jobs, len(tasks))) as pool:
            for run in pool.imap_unordered(_task, tasks):
                runs.append(run)
                if progress is not None:
                    progress(len(runs), len(tasks), f"recall {run['set']} {run['trace'][:48]}")
    runs.sort(key=lambda r: (r["set"], r["trace"]))
    summary: RecallSummary = {
        **summarize(runs),
        "window": window,
        "preset": preset,
        "style_sets": list(style_sets),
        "k": K,
        "seconds": round(time.perf_counter() - t0, 2),
    }
    return {"summary": summary, "runs": runs}


__all__ = [
    "EXACT_KINDS",
    "Call",
    "Question",
    "measure",
    "questions",
    "run_recall",
    "summarize",
    "trace_calls",
]
