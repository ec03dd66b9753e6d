"""Command line: compact, records, demo, restore, blocks, bench."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any, TextIO

from .errors import ContextFoldError
from .records import CompactionRecord, Tier

DEMO_ATTRIBUTION = (
    "Trace: deepseek-chat on SWE-bench Lite pydicom__pydicom-1413 via mini-swe-agent "
    "(MIT; see NOTICE)."
)


def load_transcript(path: Path) -> tuple[str, list[dict[str, Any]], Any]:
    """Read a transcript file: JSON list, JSONL, or an object with "messages" (and "system").

    Returns (format, messages, system). Anthropic format is recognised by its content blocks
    (tool_use / tool_result) or by a top-level "system" beside "messages".
    """
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ContextFoldError(f"cannot read {path}: {exc}") from exc
    system: Any = None
    try:
        data = json.loads(raw)
    except ValueError:
        data = []
        for lineno, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            try:
                data.append(json.loads(line))
            except ValueError as exc:
                raise ContextFoldError(f"{path}:{lineno}: not JSON ({exc})") from None
    if isinstance(data, dict):
        system = data.get("system")
        data = data.get("messages")
    if not isinstance(data, list):
        raise ContextFoldError(f"{path}: expected a list of messages or {{'messages': [...]}}")
    fmt = "anthropic" if system is not None else "openai"
    for m in data:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") in ("tool_use", "tool_result") for b in content
        ):
            fmt = "anthropic"
            break
    return fmt, data, system


def _make_summarizer(args: argparse.Namespace) -> Any:
    if getattr(args, "summarizer", "extractive") != "openai":
        return None
    from .summarizers.llm import OpenAICompatibleSummarizer

    if not args.model:
        raise ContextFoldError(
            "--summarizer openai needs --model (and --base-url for local servers)"
        )
    return OpenAICompatibleSummarizer(model=args.model, base_url=args.base_url)


def cmd_compact(args: argparse.Namespace, out: TextIO) -> int:
    from .manager import ContextManager
    from .wire import from_anthropic, to_openai

    path = Path(args.file)
    fmt, messages, system = load_transcript(path)
    if fmt == "anthropic":
        messages = [to_openai(m) for m in from_anthropic(messages, system)]
    cm = ContextManager(
        workspace=args.workspace,
        session_id=args.session,
        context_window=args.window,
        summarizer=_make_summarizer(args),
    )
    if cm.history:
        raise ContextFoldError(
            f"session {args.session!r} already has {len(cm.history)} messages in "
            f"{args.workspace}; pick another --session or delete it first"
        )
    cm.add_many(messages)
    record = cm.compact(force=False) if not args.force else cm.compact(force=True)
    out_format: Any = args.format if args.format != "auto" else fmt
    view = cm.prepare(format=out_format)
    record = cm.last_record if cm.last_record and cm.last_record.tier is not Tier.NONE else record
    if record is not None and record.tier is not Tier.NONE:
        print(record.notification(), file=out)
    else:
        print(f"No compaction needed: {cm.view_tokens} tokens of a {args.window} window.", file=out)
    target = Path(args.out) if args.out else path.with_suffix(".view.json")
    target.write_text(json.dumps(view, ensure_ascii=False, indent=1), encoding="utf-8")
    print(f"view written to {target}", file=out)
    return 0


def _records_table(records: Sequence[CompactionRecord]) -> str:
    head = (
        f"{'#':>3}  {'time':<23} {'tier':<9} {'strategy':<17} {'before':>8} {'after':>8} "
        f"{'ratio':>6} {'summ':>5} {'offl':>5} {'tail':>5}  error"
    )
    rows = [head, "-" * len(head)]
    for i, r in enumerate(records, 1):
        rows.append(
            f"{i:>3}  {r.timestamp[:23]:<23} {r.tier.label:<9} {r.strategy[:17]:<17} "
            f"{r.tokens_before:>8} {r.tokens_after:>8} {r.compression_ratio:>6.2f} "
            f"{r.summarized:>5} {len(r.offloaded):>5} {r.preserved_tail:>5}  {r.error[:60]}"
        )
    return "\n".join(rows)


def cmd_records(args: argparse.Namespace, out: TextIO) -> int:
    from .export import open_cli_store, records_of

    store = open_cli_store(args.workspace, None)
    try:
        records = records_of(store, args.session)
    finally:
        store.close()
    if not records:
        print(f"no compaction records for session {args.session!r} in {args.workspace}", file=out)
        return 1
    if args.json:
        for r in records:
            print(json.dumps(r.to_dict(), ensure_ascii=False), file=out)
    else:
        print(_records_table(records), file=out)
    return 0


def demo_trace_path() -> Path:
    return Path(str(resources.files("contextfold") / "data" / "demo_trace.json"))


def cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
    import tempfile

    from .manager import ContextManager
    from .messages import check_view
    from .wire import from_openai

    trace = Path(args.trace) if args.trace else demo_trace_path()
    _, messages, _ = load_transcript(trace)
    workspace = args.workspace or tempfile.mkdtemp(prefix="contextfold-demo-")
    print(
        f"contextfold demo: replaying {trace.name} ({len(messages)} messages) at a "
        f"{args.window}-token window",
        file=out,
    )
    if not args.trace:
        print(DEMO_ATTRIBUTION, file=out)
    print(f"workspace: {workspace}\n", file=out)
    records: list[CompactionRecord] = []

    def show(record: CompactionRecord) -> None:
        records.append(record)
        print(record.notification(), file=out)
        if record.reason:
            print(f"   why: {record.reason}", file=out)

    cm = ContextManager(
        workspace=workspace, session_id="demo", context_window=args.window, on_compaction=show
    )
    peak = 0
    calls = 0
    first_user = next((m for m in messages if m.get("role") == "user"), None)
    for i, msg in enumerate(messages):
        if msg.get("role") == "assistant" and i > 0:
            view = cm.prepare()
            calls += 1
            tokens = cm.view_tokens
            peak = max(peak, tokens)
            check_view([from_openai(m, j) for j, m in enumerate(view)])
            if first_user is not None and first_user not in view:
                raise ContextFoldError("demo: the first user message left the view")
        cm.add(msg)
    tiers: dict[str, int] = {}
    for r in records:
        tiers[r.tier.label] = tiers.get(r.tier.label, 0) + 1
    history_tokens = sum(cm._cache.count(m) for m in cm.history)
    originals = {m.tool_call_id: m.text for m in cm.history if m.tool_call_id}
    verified = sum(
        1 for call_id in cm.offloaded() if cm.offload.read(call_id) == originals.get(call_id)
    )
    print("\nSummary", file=out)
    print(f"  model calls replayed:  {calls}", file=out)
    print(
        f"  full history:          {len(cm.history)} messages, ~{history_tokens} tokens", file=out
    )
    print(
        f"  peak view:             {peak} tokens ({peak / args.window:.0%} of the window)", file=out
    )
    print(
        f"  compactions:           {len(records)} "
        f"({', '.join(f'{k} {v}' for k, v in tiers.items()) or 'none'})",
        file=out,
    )
    print(
        f"  offloaded files:       {len(cm.offloaded())} ({verified} byte-exact, sha256-checked)",
        file=out,
    )
    print(
        f"  final view:            {len(cm.view_messages())} messages, {cm.view_tokens} tokens",
        file=out,
    )
    print(f"  records:               contextfold records demo --workspace {workspace}", file=out)
    if cm.compactor.state.last_anchors:
        print("\nLatest anchors:", file=out)
        for a in cm.compactor.state.last_anchors:
            first = a.content.splitlines()[0] if a.content else "N/A"
            print(f"  {a.type.value:<19} {first[:100]}", file=out)
    return 0


def cmd_restore(args: argparse.Namespace, out: TextIO) -> int:
    from .manager import ContextManager

    cm = ContextManager(workspace=args.workspace, session_id=args.session)
    hits = cm.restore(args.query, k=args.k)
    if not hits:
        print("no evidence matched", file=out)
        return 1
    for rank, h in enumerate(hits, 1):
        p = h.pointer
        sha = {True: "sha256 ok", False: "SHA256 MISMATCH", None: "sha256 n/a"}[h.sha256_ok]
        print(
            f"#{rank} score={h.score:.3f} id={p.id} tool_call={p.tool_use_id} "
            f"types={','.join(p.content_types)} source={h.source} {sha}",
            file=out,
        )
        if p.command:
            print(f"   command: {p.command}", file=out)
        if h.problem:
            print(f"   problem: {h.problem}", file=out)
        text = h.text if args.full else h.text[:2000]
        print("   " + text.replace("\n", "\n   "), file=out)
        print("", file=out)
    return 0


def cmd_blocks(args: argparse.Namespace, out: TextIO) -> int:
    from .export import blocks_of, open_cli_store

    store = open_cli_store(args.workspace, None)
    try:
        blocks = blocks_of(store, args.session)
    finally:
        store.close()
    if not blocks:
        print(f"no compaction blocks for session {args.session!r}", file=out)
        return 1
    for b in blocks:
        print(
            f"{b.id} tier={b.tier} strategy={b.strategy} evidence={len(b.evidence)} "
            f"items={len(b.summary_items)}",
            file=out,
        )
        for p in b.evidence:
            print(
                f"   {p.id} {','.join(p.content_types):<24} {(p.command or p.tool_name or '')[:70]}",
                file=out,
            )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="contextfold", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser, session: bool = True) -> None:
        p.add_argument("--workspace", default="./.contextfold")
        if session:
            p.add_argument("--session", default="cli")

    p = sub.add_parser("compact", help="compact a transcript file and write the view")
    p.add_argument("file")
    p.add_argument("--window", type=int, default=128_000)
    common(p)
    p.add_argument("--summarizer", choices=["extractive", "openai"], default="extractive")
    p.add_argument("--model")
    p.add_argument("--base-url")
    p.add_argument("--format", choices=["auto", "openai", "anthropic"], default="auto")
    p.add_argument("--force", action="store_true", help="summarize now whatever the ratio")
    p.add_argument("--out")
    p.set_defaults(fn=cmd_compact)

    p = sub.add_parser("records", help="show a session's compaction records")
    p.add_argument("session")
    common(p, session=False)
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_records)

    p = sub.add_parser("demo", help="replay a real trajectory and show each compaction")
    p.add_argument("--trace")
    p.add_argument("--window", type=int, default=32_000)
    p.add_argument("--workspace")
    p.set_defaults(fn=cmd_demo)

    p = sub.add_parser("restore", help="find and print evidence that left the view")
    p.add_argument("session")
    p.add_argument("query")
    p.add_argument("-k", type=int, default=5)
    p.add_argument("--full", action="store_true")
    common(p, session=False)
    p.set_defaults(fn=cmd_restore)

    p = sub.add_parser("blocks", help="list a session's compaction blocks and evidence")
    p.add_argument("session")
    common(p, session=False)
    p.set_defaults(fn=cmd_blocks)

    from .export import register

    register(sub)
    sub.add_parser("bench", help="replay benchmark (see contextfold bench --help)", add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["bench"]:
        from .bench.cli import main as bench_main

        return bench_main(args_list[1:])
    parser = build_parser()
    args = parser.parse_args(args_list)
    try:
        code: int = args.fn(args, sys.stdout)
        return code
    except ContextFoldError as exc:
        print(f"contextfold: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
