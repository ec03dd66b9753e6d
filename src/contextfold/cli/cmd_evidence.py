"""``contextfold records``, ``restore`` and ``blocks``: what a session's compactions did and
the original text of what they removed."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Sequence
from typing import Any, TextIO

from ..core.records import CompactionRecord
from .common import add_workspace, existing_session, positive_int, shown, store_spec

EVIDENCE_ID = re.compile(r"^ev-[0-9a-f]{6,64}$")


def _records_table(records: Sequence[CompactionRecord]) -> str:
    head = (
        f"{'#':>3}  {'time':<23} {'tier':<9} {'strategy':<17} {'before':>8} {'after':>8} "
        f"{'ratio':>6} {'summ':>5} {'offl':>5} {'tail':>5}"
    )
    rows = [head, "-" * len(head)]
    for i, r in enumerate(records, 1):
        rows.append(
            f"{i:>3}  {r.timestamp[:23]:<23} {r.tier.label:<9} {r.strategy[:17]:<17} "
            f"{r.tokens_before:>8} {r.tokens_after:>8} {r.compression_ratio:>6.2f} "
            f"{r.summarized:>5} {len(r.offloaded):>5} {r.preserved_tail:>5}"
        )
        # errors and notes whole, under their row (a cause cut off helps no one)
        rows += [f"     error: {line}" for line in r.error.splitlines() if line.strip()]
        rows += [f"     note: {n}" for n in r.notes if n.startswith("LLM summarizer not used")]
    return "\n".join(rows)


def cmd_records(args: argparse.Namespace, out: TextIO) -> int:
    from ..engine.export import records_of

    spec = store_spec(args) or ""
    store = existing_session(spec, args.session)
    try:
        records = records_of(store, args.session)
    finally:
        store.close()
    if not records:
        print(f"no compaction records for session {args.session!r} in {shown(spec)}", file=out)
        return 1
    if args.json:
        for r in records:
            print(json.dumps(r.to_dict(), ensure_ascii=False), file=out)
    else:
        print(_records_table(records), file=out)
    return 0


def _print_hit(
    out: TextIO,
    rank: int,
    score: str,
    pointer_id: str,
    tool_call: str | None,
    types: Sequence[str],
    source: str,
    sha256_ok: bool | None,
) -> None:
    sha = {True: "sha256 ok", False: "SHA256 MISMATCH", None: "sha256 n/a"}[sha256_ok]
    print(
        f"#{rank} score={score} id={pointer_id} tool_call={tool_call} "
        f"types={','.join(types)} source={source} {sha}",
        file=out,
    )


def _print_body(out: TextIO, command: str | None, problem: str | None, text: str) -> None:
    if command:
        print(f"   command: {command}", file=out)
    if problem:
        print(f"   problem: {problem}", file=out)
    print("   " + text.replace("\n", "\n   "), file=out)
    print("", file=out)


def cmd_restore(args: argparse.Namespace, out: TextIO) -> int:
    from ..engine.manager import ContextManager

    store = existing_session(store_spec(args) or "", args.session)
    try:
        info = store.session(args.session)
        owner = info.agent_id if info is not None else "default"
        with ContextManager(store=store, session_id=args.session, agent_id=owner) as cm:
            return _restore(cm, args, out)
    finally:
        store.close()


def _restore(cm: Any, args: argparse.Namespace, out: TextIO) -> int:
    query = args.query.strip()
    if EVIDENCE_ID.match(query):
        # an id that `contextfold blocks` (or a compaction summary) lists: that one item
        pointer = cm.recovery.search.get(query)
        if pointer is None:
            print(f"no evidence with id {query!r} in session {args.session!r}", file=out)
            return 1
        restored = cm.recovery.store.restore(pointer)
        _print_hit(
            out,
            1,
            "-",
            pointer.id,
            pointer.tool_use_id,
            pointer.content_types,
            restored.source,
            restored.sha256_ok,
        )
        text = restored.text if args.full else restored.text[:2000]
        _print_body(out, pointer.command, restored.problem, text)
        return 0
    hits = cm.restore(query, k=args.k)
    if not hits:
        print("no evidence matched", file=out)
        return 1
    for rank, h in enumerate(hits, 1):
        p = h.pointer
        _print_hit(
            out, rank, f"{h.score:.3f}", p.id, p.tool_use_id, p.content_types, h.source, h.sha256_ok
        )
        _print_body(out, p.command, h.problem, h.text if args.full else h.text[:2000])
    return 0


def cmd_blocks(args: argparse.Namespace, out: TextIO) -> int:
    from ..engine.export import blocks_of
    from ..evidence.fields import describe

    store = existing_session(store_spec(args) or "", args.session)
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
                f"   {p.id} {','.join(p.content_types):<24} {describe(p)[:70]}",
                file=out,
            )
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("records", help="show a session's compaction records")
    p.add_argument("session", help="session id")
    add_workspace(p)
    p.add_argument("--json", action="store_true", help="one JSON record per line")
    p.set_defaults(fn=cmd_records)

    p = sub.add_parser(
        "restore",
        help="find and print evidence that left the view",
        description="Search a session's evidence (tool outputs that compaction removed) and "
        "print the original text; an evidence id (ev-..., as `contextfold blocks` lists) "
        "prints that item.",
    )
    p.add_argument("session", help="session id")
    p.add_argument("query", help="what to look for (command, file, test, error) or an evidence id")
    p.add_argument(
        "-k", type=positive_int, default=5, help="how many hits to print (default 5, at least 1)"
    )
    p.add_argument(
        "--full", action="store_true", help="print whole texts (default: first 2000 characters)"
    )
    add_workspace(p)
    p.set_defaults(fn=cmd_restore)

    p = sub.add_parser("blocks", help="list a session's compaction blocks and evidence ids")
    p.add_argument("session", help="session id")
    add_workspace(p)
    p.set_defaults(fn=cmd_blocks)
