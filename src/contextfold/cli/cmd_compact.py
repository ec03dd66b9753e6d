"""``contextfold compact`` and ``contextfold demo``: compaction of a transcript, and a replay."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, TextIO

from ..core.config import PRESETS, resolve_preset
from ..core.records import CompactionRecord, Tier
from ..errors import ConfigError, ContextFoldError, ContextOverflowError, StorageError
from .common import (
    add_workspace,
    folder_of,
    open_existing_store,
    positive_int,
    shown,
    store_spec,
)
from .transcript import anthropic_system, load_transcript

DEMO_ATTRIBUTION = (
    "Trace: deepseek-chat on SWE-bench Lite pydicom__pydicom-1413 via mini-swe-agent "
    "(MIT; see NOTICE)."
)


def _make_summarizer(args: argparse.Namespace) -> Any:
    if getattr(args, "summarizer", "extractive") != "openai":
        return None
    from ..compaction.summarizers.llm import OpenAICompatibleSummarizer

    if not args.model:
        raise ContextFoldError(
            "--summarizer openai needs --model (and --base-url for local servers)"
        )
    return OpenAICompatibleSummarizer(model=args.model, base_url=args.base_url)


def over_window_message(tokens: int, window: int) -> str:
    return (
        f"the view is {tokens} tokens, over the {window}-token window: compaction could not "
        "bring it under (the system prompt, the task and the newest messages are kept whole); "
        "use a larger --window"
    )


def _check_output(args: argparse.Namespace, source: Path) -> Path | None:
    """``-o`` must not name the input (inputs are never written) nor a folder."""
    if not args.out:
        return None
    target = Path(args.out)
    if target.exists() and (target.is_dir() or target.resolve() == source.resolve()):
        what = "the input file" if not target.is_dir() else "a folder"
        raise ConfigError(f"-o {target}: that is {what}; the view goes to a new file")
    return target


def _open_session(args: argparse.Namespace) -> tuple[Any, Callable[[], None] | None]:
    """The manager of the new session, built in memory, and the function that writes it
    into the store the user named (None when no store is named: nothing is kept). On an
    existing session it refuses before anything is written, unless ``--replace``."""
    from ..engine.manager import ContextManager
    from ..storage import open_store
    from ..storage.scratch import ScratchStore

    spec = store_spec(args)
    replace = False
    if spec:
        folder = folder_of(spec)
        if folder is None or folder.exists():
            store = open_existing_store(spec)
            try:
                info = store.session(args.session)
            finally:
                store.close()
            if info is not None and not args.replace:
                raise ConfigError(
                    f"session {args.session!r} already has {info.messages} messages in "
                    f"{shown(spec)}; nothing was written. Add --replace to compact the "
                    "file again in its place, or pick another --session"
                )
            replace = info is not None
    scratch = ScratchStore(args.session)
    cm = ContextManager(
        store=scratch,
        session_id=args.session,
        context_window=args.window,
        summarizer=_make_summarizer(args),
        preset=args.preset,
    )
    if not spec:
        return cm, None

    def keep() -> None:
        """The whole session in one transaction, the replaced one deleted in it."""
        from ..storage import ConcurrentWriteError

        target = open_store(spec)
        try:
            scratch.write_into(target, replace=replace)
        except ConcurrentWriteError:
            raise ConfigError(
                f"session {args.session!r} was created in {shown(spec)} meanwhile; nothing "
                "was written. Add --replace to compact the file again in its place"
            ) from None
        finally:
            target.close()

    return cm, keep


def cmd_compact(args: argparse.Namespace, out: TextIO) -> int:
    from ..core.wire import from_anthropic, to_openai

    path = Path(args.file)
    fmt, messages, system = load_transcript(path)
    if not messages:
        raise ConfigError(f"{path}: no messages to compact")
    if fmt == "anthropic":
        messages = [to_openai(m) for m in from_anthropic(messages, anthropic_system(system))]
    from ..core.wire import messages_from_openai

    messages_from_openai(messages)  # every message checked before anything is written
    target = _check_output(args, path)
    cm, keep = _open_session(args)
    try:
        return _compact(cm, args, out, fmt, messages, target, keep)
    finally:
        cm.close()


def _compact(
    cm: Any,
    args: argparse.Namespace,
    out: TextIO,
    fmt: str,
    messages: list[dict[str, Any]],
    target: Path | None,
    keep: Callable[[], None] | None,
) -> int:
    cm.add_many(messages)
    record = cm.compact(force=args.force)
    out_format: Any = args.format if args.format != "auto" else fmt
    try:
        view = cm.prepare(format=out_format)
    except ContextOverflowError as exc:
        if keep is not None:
            keep()  # the session is valid: kept, for `records` and `restore`
        print(
            f"contextfold compact: no view fits the {args.window}-token window: {exc}",
            file=sys.stderr,
        )
        return 1
    record = cm.last_record if cm.last_record and cm.last_record.tier is not Tier.NONE else record
    if keep is not None:
        keep()  # all or nothing; a failure leaves a replaced session as it was
    status = sys.stderr
    if record is not None and record.tier is not Tier.NONE:
        print(cm.notification(record), file=status)
    else:
        print(
            f"No compaction needed: {cm.view_tokens} tokens of a {args.window} window.", file=status
        )
    text = json.dumps(view, ensure_ascii=False, indent=1)
    if target is not None:
        try:
            target.write_text(text + "\n", encoding="utf-8")
        except OSError as exc:
            raise StorageError(f"cannot write the view to {target}: {exc}") from exc
        print(f"view written to {target}", file=status)
    else:
        print(text, file=out)
    if keep is None:
        print(
            "the session was not kept (no --store): add --store DIR to keep it for "
            "`contextfold records` and `restore`",
            file=status,
        )
    else:
        print(f"session {args.session!r} kept in {shown(store_spec(args) or '')}", file=status)
    tokens = cm.view_tokens
    if tokens > args.window:
        print(f"contextfold compact: {over_window_message(tokens, args.window)}", file=status)
        return 1
    return 0


def demo_trace_path() -> Path:
    return Path(str(resources.files("contextfold") / "data" / "demo_trace.json"))


def _offload_summary(cm: Any) -> list[str]:
    """What was offloaded, by kind, and how much of it reads back exactly."""
    by_uuid = {m.uuid: m for m in cm.history}
    by_call = {m.tool_call_id: m for m in cm.history if m.tool_call_id}
    kinds = {"tool output": 0, "long assistant message": 0, "tool-call argument list": 0}
    intact = identical = comparable = 0
    entries = cm.offloaded()
    for key, entry in entries.items():
        if key.startswith("args-"):
            kind, original = "tool-call argument list", None  # the calls, as JSON
        elif key.startswith("msg-"):
            msg = by_uuid.get(entry.message_uuid)
            kind, original = "long assistant message", msg.text if msg else None
        else:
            msg = by_call.get(key)
            kind, original = "tool output", msg.text if msg else None
        kinds[kind] += 1
        try:
            text = cm.offload.read(key)  # checks the sha256
        except StorageError:
            continue
        intact += 1
        if original is not None:
            comparable += 1
            identical += text == original
    parts = ", ".join(f"{n} {k}{'s' if n != 1 else ''}" for k, n in kinds.items() if n)
    lines = [f"  offloaded files:       {len(entries)}" + (f" ({parts})" if parts else "")]
    if entries:
        lines.append(
            f"  read back:             {intact} of {len(entries)} intact (sha256); "
            f"{identical} of {comparable} tool outputs and messages byte-identical to the history"
        )
    return lines


def _demo_trace(args: argparse.Namespace) -> tuple[Path, list[dict[str, Any]]]:
    trace = Path(args.trace) if args.trace else demo_trace_path()
    _, messages, _ = load_transcript(trace)
    if not messages:
        raise ConfigError(f"{trace}: no messages to replay")
    return trace, messages


def _demo_session(spec: str) -> tuple[str, str | None]:
    """The session a demo run replays into: ``demo``, or the first free ``demo-N`` when an
    earlier run left it (returned second, to say so), so a run never adds to another."""
    folder = folder_of(spec)
    if folder is not None and not folder.exists():
        return "demo", None
    store = open_existing_store(spec)
    try:
        if store.session("demo") is None:
            return "demo", None
        taken = {i.session_id for i in store.sessions()}
    finally:
        store.close()
    n = 2
    while f"demo-{n}" in taken:
        n += 1
    return f"demo-{n}", "demo" if n == 2 else f"demo-{n - 1}"


def cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
    import tempfile

    from ..core.messages import check_view
    from ..core.wire import from_openai
    from ..engine.manager import ContextManager

    trace, messages = _demo_trace(args)
    workspace = store_spec(args) or tempfile.mkdtemp(prefix="contextfold-demo-")
    session_id, earlier = _demo_session(workspace)
    window: int = args.window
    print(
        f"contextfold demo: replaying {trace.name} ({len(messages)} messages) at a "
        f"{window}-token window",
        file=out,
    )
    if not args.trace:
        print(DEMO_ATTRIBUTION, file=out)
    print(f"store: {shown(workspace)}  session: {session_id}", file=out)
    if earlier:
        print(
            f"(session {earlier} is already there from an earlier run; this run starts fresh "
            f"in {session_id} and leaves it as it is)",
            file=out,
        )
    print("", file=out)
    records: list[CompactionRecord] = []

    def show(record: CompactionRecord) -> None:
        records.append(record)
        print(record.notification(locale=resolve_preset(args.preset).locale), file=out)
        if record.reason:
            print(f"   why: {record.reason}", file=out)

    cm = ContextManager(
        store=workspace,
        session_id=session_id,
        context_window=window,
        on_compaction=show,
        preset=args.preset,
    )
    peak = calls = 0
    over: list[int] = []
    shortened = False
    first_user = next((m for m in messages if m.get("role") == "user"), None)
    for i, msg in enumerate(messages):
        if msg.get("role") == "assistant" and i > 0:
            calls += 1
            try:
                view = cm.prepare()
            except ContextOverflowError as exc:
                print(
                    f"contextfold demo: model call {calls}: no view fits the {window}-token "
                    f"window: {exc}",
                    file=sys.stderr,
                )
                return 1
            tokens = cm.view_tokens
            peak = max(peak, tokens)
            if tokens > window:
                over.append(tokens)
            check_view([from_openai(m, j) for j, m in enumerate(view)])
            if first_user is not None and first_user not in view:
                task = cm.history[cm.view.first_user or 0]
                if not any(f"msg-{task.uuid}" in str(m.get("content")) for m in view):
                    raise ContextFoldError("demo: the first user message left the view")
                if not shortened:  # too large for the window: head and tail, full text kept
                    shortened = True
                    print(
                        f"contextfold demo: the task message does not fit the {window}-token "
                        f"window: shown as head and tail; the whole text is kept (an agent reads it "
                        f'with its read_offloaded tool, id "msg-{task.uuid}")',
                        file=sys.stderr,
                    )
        cm.add(msg)
    _print_summary(cm, out, records=records, calls=calls, peak=peak, window=window)
    print(
        f"  records:               contextfold records {session_id} --store {shown(workspace)}",
        file=out,
    )
    if cm.compactor.state.last_anchors:
        print("\nLatest anchors:", file=out)
        for a in cm.compactor.state.last_anchors:
            first = a.content.splitlines()[0] if a.content else "N/A"
            print(f"  {a.type.value:<19} {first[:100]}", file=out)
    if over:
        print(
            f"contextfold demo: {len(over)} of {calls} views were over the {window}-token "
            f"window (largest {max(over)} tokens, {max(over) / window:.0%}); "
            f"{over_window_message(max(over), window).split(': ', 1)[1]}",
            file=sys.stderr,
        )
        return 1
    return 0


def _print_summary(
    cm: Any,
    out: TextIO,
    *,
    records: Sequence[CompactionRecord],
    calls: int,
    peak: int,
    window: int,
) -> None:
    tiers: dict[str, int] = {}
    for r in records:
        tiers[r.tier.label] = tiers.get(r.tier.label, 0) + 1
    history_tokens = cm.context.cache.count_many(cm.history)
    lines = [
        "\nSummary",
        f"  model calls replayed:  {calls}",
        f"  full history:          {len(cm.history)} messages, ~{history_tokens} tokens",
        f"  peak view:             {peak} tokens ({peak / window:.0%} of the window)",
        f"  compactions:           {len(records)} "
        f"({', '.join(f'{k} {v}' for k, v in tiers.items()) or 'none'})",
        *_offload_summary(cm),
        f"  final view:            {len(cm.view_messages)} messages, {cm.view_tokens} tokens",
    ]
    print("\n".join(lines), file=out)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "compact",
        help="compact a transcript file and print the view (JSON) or write it with -o",
        description="Add a transcript (OpenAI or Anthropic messages: JSON list, JSONL, or "
        '{"system": ..., "messages": [...]}) to a new session, compact it to fit --window and '
        "print the view to stdout (status lines go to stderr). Exits 1 if the view is still "
        "over the window. The session is kept only in a store you name (--store or "
        "$CONTEXTFOLD_STORE); running it again on the same session needs --replace.",
    )
    p.add_argument("file", help="the transcript file to read (never written to)")
    p.add_argument(
        "--window",
        type=positive_int,
        default=128_000,
        help="context window in tokens (default 128000)",
    )
    add_workspace(p, default=None, otherwise="a temporary folder removed at the end")
    p.add_argument(
        "--session", default="cli", help="session id to create in the store (default cli)"
    )
    p.add_argument(
        "--replace",
        action="store_true",
        help="if the session exists, replace it: the new session is built first and swapped "
        "in with one transaction, so a failure leaves the old one as it was (default: refuse, "
        "before writing anything)",
    )
    p.add_argument(
        "--summarizer",
        choices=["extractive", "openai"],
        default="extractive",
        help="extractive (default, no LLM) or openai (an OpenAI-compatible chat model)",
    )
    p.add_argument("--model", help="model name for --summarizer openai")
    p.add_argument("--base-url", help="endpoint for --summarizer openai (e.g. a local server)")
    p.add_argument(
        "--format",
        choices=["auto", "openai", "anthropic"],
        default="auto",
        help="format of the view (default auto: the format of the input)",
    )
    p.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default="progressive",
        help="compaction preset: progressive (default), harness, or spec (the design notes "
        "exactly: 60/70/80/95%% of the window, Chinese notices)",
    )
    p.add_argument("--force", action="store_true", help="summarize now whatever the ratio")
    p.add_argument(
        "-o",
        "--out",
        metavar="PATH",
        help="write the view to PATH instead of stdout",
    )
    p.set_defaults(fn=cmd_compact)

    p = sub.add_parser(
        "demo",
        help="replay a real trajectory and show each compaction",
        description="Replay an agent trajectory through ContextManager, call by call, and "
        "print each compaction and a summary. Exits 1 if any view was over the window.",
    )
    p.add_argument(
        "--trace", metavar="FILE", help="trajectory to replay (default: the bundled one)"
    )
    p.add_argument(
        "--window",
        type=positive_int,
        default=32_000,
        help="context window in tokens (default 32000)",
    )
    add_workspace(p, default=None, otherwise="a new temporary folder, kept")
    p.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default="progressive",
        help="compaction preset: progressive (default), harness, or spec (the design notes "
        "exactly: 60/70/80/95%% of the window, Chinese notices)",
    )
    p.set_defaults(fn=cmd_demo)
