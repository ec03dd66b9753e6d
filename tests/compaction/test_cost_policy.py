"""The cost policy: stale outputs leave in batches, files written stay named, the working
window makes a large window cost like a smaller one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from contextfold import ContextManager
from contextfold.bench.metrics import is_extension
from contextfold.bench.strategies import check_pairs
from contextfold.core.config import TierConfig, progressive
from contextfold.core.records import Tier

TASK = "Fix the parser bug in src/parse.py; tests/test_parse.py fails."


class QuarterCounter:
    name = "quarter"

    def count_text(self, text: str) -> int:
        return len(text) // 4


def manager(tmp_path: Path, window: int = 100_000, **tiers: Any) -> ContextManager:
    cfg = progressive().with_(tiers=TierConfig(**tiers)) if tiers else progressive()
    return ContextManager(
        tmp_path, "s", window, config=cfg, token_counter=QuarterCounter(), fact_extractor=None
    )


def reopened(cm: ContextManager, path: Path, window: int) -> ContextManager:
    """The session of ``cm`` opened again from its store."""
    return ContextManager(
        path, "s", window, config=cm.config, token_counter=QuarterCounter(), fact_extractor=None
    )


def call(k: int, name: str, args: dict[str, Any], content: str | None = None) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {
                "id": f"c{k}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
        ],
    }


def result(k: int, chars: int) -> dict[str, Any]:
    lines = [f"line {k}.{j} " + "v" * 40 for j in range(chars // 50)]
    return {"role": "tool", "tool_call_id": f"c{k}", "content": "\n".join(lines)}


def test_stale_outputs_leave_in_few_batches_and_stay_recoverable(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    cm.add({"role": "system", "content": "agent"})
    cm.add({"role": "user", "content": TASK})
    views: list[list[dict[str, Any]]] = []
    originals: dict[str, str] = {}
    records = []
    for k in range(60):
        cm.add(call(k, "bash", {"command": f"pytest -k case_{k}"}, f"Step {k}."))
        msg = result(k, 3_000)
        originals[f"c{k}"] = msg["content"]
        cm.add(msg)
        views.append(cm.prepare(copy=True))
        records.append(cm.last_prepare)
    rewrites = [i for i in range(1, len(views)) if not is_extension(views[i - 1], views[i])]
    stale = [r for r in records if r is not None and "stale" in r.reason]
    assert stale, "stale outputs never left the view"
    assert all(r.tier is Tier.WARN for r in stale)
    # batches, not one rewrite per call: the view only grows between them
    assert len(rewrites) <= len(views) // 4
    last = views[-1]
    assert check_pairs(last) == []
    tool_msgs = [m for m in last if m["role"] == "tool"]
    # the newest five results are verbatim, older large ones are placeholders
    assert [m["content"] for m in tool_msgs[-5:]] == [
        originals[m["tool_call_id"]] for m in tool_msgs[-5:]
    ]
    shortened = [m for m in tool_msgs if m["content"].startswith("[offloaded:")]
    assert shortened
    for m in shortened:
        assert cm.recover_tool_result(m["tool_call_id"]) == originals[m["tool_call_id"]]
    assert last[1]["content"] == TASK


def test_older_previews_are_shortened_in_a_stale_batch(tmp_path: Path) -> None:
    """Outputs offloaded with a preview are shortened to a brief placeholder by a later stale
    batch once the agent moved past them: the stubs of a long session do not pile up in the
    view. Each output stays recoverable, byte-exact, and a reopened session shows the same
    view."""
    cm = manager(tmp_path)
    cm.add({"role": "user", "content": TASK})
    originals: dict[str, str] = {}
    views: list[list[dict[str, Any]]] = []
    for k in range(95):  # wide lines: a preview of them is long
        lines = [f"line {k}.{j} " + "w" * 190 for j in range((5_000 if k % 2 else 2_000) // 200)]
        msg = {"role": "tool", "tool_call_id": f"c{k}", "content": "\n".join(lines)}
        originals[f"c{k}"] = msg["content"]
        cm.add_many([call(k, "bash", {"command": f"pytest -k case_{k}"}), msg])
        views.append(cm.prepare(copy=True))
    last = views[-1]
    assert check_pairs(last) == []
    tool_msgs = [m for m in last if m["role"] == "tool"]
    brief = [m for m in tool_msgs if "Preview (first 2 lines)" in m["content"]]
    previews = [m for m in tool_msgs if "[offloaded:" in m["content"] and m not in brief]
    assert len(brief) > len(previews) > 0, [m["content"][:80] for m in tool_msgs]
    for m in brief:
        assert len(m["content"]) < 500
        assert cm.recover_tool_result(m["tool_call_id"]) == originals[m["tool_call_id"]]
    # the newest outputs are untouched
    assert [m["content"] for m in tool_msgs[-5:]] == [
        originals[m["tool_call_id"]] for m in tool_msgs[-5:]
    ]
    # batches, not one rewrite per call
    rewrites = [i for i in range(1, len(views)) if not is_extension(views[i - 1], views[i])]
    assert len(rewrites) <= len(views) // 10
    again = reopened(cm, tmp_path, 100_000)
    assert again.view_messages == cm.view_messages


def _wide(k: int, lines: int) -> dict[str, Any]:
    text = "\n".join(f"row {k}.{j} " + "w" * 290 for j in range(lines))
    return {"role": "tool", "tool_call_id": f"c{k}", "content": text}


def test_a_batch_that_only_shortens_previews_is_a_stored_warn_run(tmp_path: Path) -> None:
    """Outputs offloaded on arrival (their ten-line previews in the view) and nothing new to
    offload: the batch that shortens their previews is a Warn compaction like any other,
    stored, so a reopened session shows the same view."""
    cm = manager(tmp_path, window=40_000, warn_escalates=False)
    cm.add({"role": "user", "content": TASK})
    cm.add({"role": "assistant", "content": "x" * 74_000})
    for k in range(4):  # above the ingest threshold: offloaded with a preview at once
        cm.add_many([call(k, "bash", {"command": f"cat f{k}"}), _wide(k, 40)])
    for k in range(4, 10):
        cm.add_many([call(k, "bash", {"command": f"ls {k}"}), result(k, 100)])
    view = cm.prepare(copy=True)
    record = cm.last_prepare
    assert record is not None and record.changed and record.tier is Tier.WARN, record
    shown = [m for m in view if m["role"] == "tool" and "Preview (first 2 lines)" in m["content"]]
    assert [m["tool_call_id"] for m in shown] == ["c0", "c1", "c2", "c3"]
    assert reopened(cm, tmp_path, 40_000).view_messages == cm.view_messages


def test_a_retracted_output_is_never_offloaded_under_its_reused_call_id(tmp_path: Path) -> None:
    """A client's rewrite retracts an output and sends another one under the same call id:
    only the one in the view is offloaded, so its stub names its own bytes."""
    cm = manager(tmp_path, window=40_000, warn_escalates=False)
    cm.add({"role": "user", "content": TASK})
    cm.add({"role": "assistant", "content": "h" * 70_000})
    a = "\n".join(f"A {j} " + "a" * 90 for j in range(95))
    b = "\n".join(f"B {j} " + "b" * 90 for j in range(95))
    again_call = call(0, "bash", {"command": "cat f0"})
    cm.add_many([again_call, {"role": "tool", "tool_call_id": "c0", "content": a}])
    cm.add({"role": "assistant", "content": "m" * 16_000})
    cm.add({"role": "user", "content": "go on"})
    cm.rewrite(
        [2, 3],
        [again_call, {"role": "tool", "tool_call_id": "c0", "content": b}],
        note={"why": "t"},
    )
    for k in range(1, 7):
        cm.add_many([call(k, "bash", {"command": f"ls {k}"}), result(k, 100)])
    cm.prepare()
    assert cm.recover_tool_result("c0") == b
    stub = next(m for m in cm.view_messages if m.role == "tool" and m.tool_call_id == "c0")
    assert stub.text.startswith("[offloaded:") and "B 0" in stub.text


def test_a_later_part_of_the_candidates_pays_when_the_whole_does_not(tmp_path: Path) -> None:
    """The batch is the largest run of candidates, from some point to the newest, that pays
    for its cache miss: a few old, small candidates far back do not hold back a batch of
    large recent ones."""
    from contextfold.compaction.stale import _paying_batch

    cm = manager(tmp_path, stale_batch_ratio=0.5, stale_min_gain=100)
    cm.add({"role": "user", "content": TASK})
    for k in range(12):
        cm.add_many([call(k, "bash", {"command": f"ls {k}"}), result(k, 4_000)])
    comp = cm.context.compactor
    v = comp.view
    tools = [i for i in range(len(v)) if v.history[i].role == "tool"]
    old, recent = tools[0], tools[-4:-1]
    cands = [(old, 50)] + [(i, v.tokens_of(i)) for i in recent]
    batch = _paying_batch(comp, cands)
    assert batch == cands[1:]
    assert _paying_batch(comp, [(old, 50)]) == []


def test_no_batch_when_it_does_not_pay(tmp_path: Path) -> None:
    cm = manager(tmp_path, stale_batch_ratio=1.0)
    cm.add({"role": "user", "content": TASK})
    for k in range(30):
        cm.add_many([call(k, "bash", {"command": f"ls {k}"}), result(k, 3_000)])
        cm.prepare()
        assert cm.last_prepare is not None and "stale" not in cm.last_prepare.reason


def test_long_stale_arguments_are_shortened_naming_the_file(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    cm.add({"role": "user", "content": TASK})
    body = "\n".join(f"def f{j}(x):\n    return x + {j}" for j in range(200))
    create = {"command": "create", "path": "/testbed/src/parse_helpers.py", "file_text": body}
    cm.add_many([call(0, "str_replace_editor", create), result(0, 200)])
    for k in range(1, 60):  # the messages pass the Warn line: stale batches start
        cm.add_many([call(k, "bash", {"command": f"pytest -k t{k}"}), result(k, 3_000)])
        cm.prepare()
    view = cm.prepare()
    first_call = next(m for m in view if m.get("tool_calls") and m["tool_calls"][0]["id"] == "c0")
    args = first_call["tool_calls"][0]["function"]["arguments"]
    assert len(args) < len(json.dumps(create)) // 3
    assert "parse_helpers.py" in args and "writes /testbed/src/parse_helpers.py" in args
    json.loads(args)  # still valid JSON
    uuid = cm.history[1].uuid
    stored = json.loads(cm.recover_tool_result(f"args-{uuid}") or "[]")
    assert json.loads(stored[0]["arguments"]) == create
    # a reopened session shows the same view
    again = reopened(cm, tmp_path, 100_000)
    assert again.view_messages() == cm.view_messages()


def test_compaction_message_names_every_file_written(tmp_path: Path) -> None:
    cm = manager(tmp_path, window=6_000, working_window=0)
    cm.add({"role": "user", "content": TASK})
    written = []
    for k in range(40):
        path = f"src/module_{k}.py"
        if k % 3 == 0:
            cm.add(call(k, "bash", {"command": f"cat > {path} << 'EOF'\nx = {k}\nEOF"}))
            written.append(path)
        elif k % 3 == 1:
            cm.add(call(k, "bash", {"command": f"sed -i 's/a/b/' src/other_{k}.py"}))
            written.append(f"src/other_{k}.py")
        else:
            cm.add(call(k, "bash", {"command": f"python -m pytest tests/t{k}.py"}))
        cm.add(result(k, 800))
        cm.prepare()
    view = cm.prepare()
    assert cm.compactor.state.compactions > 0
    text = "\n".join(
        str(m.get("content") or "") + json.dumps(m.get("tool_calls") or []) for m in view
    )
    assert "## Files written so far" in text
    missing = [p for p in written if p not in text]
    assert missing == []
    assert cm.view_tokens <= 6_000


def test_working_window_compacts_a_large_window_early_but_never_in_emergency(
    tmp_path: Path,
) -> None:
    cm = manager(tmp_path, window=200_000, working_window=8_000, stale_after=0)
    cm.add({"role": "user", "content": TASK})
    tiers = []
    for k in range(80):
        cm.add_many([call(k, "bash", {"command": f"make t{k}"}), result(k, 1_500)])
        cm.prepare()
        assert cm.last_prepare is not None
        tiers.append(cm.last_prepare.tier)
        assert cm.view_tokens < 0.95 * 8_000 + 1_000  # about the working window, not 200K
    assert Tier.SOFT in tiers or Tier.FULL in tiers
    assert Tier.EMERGENCY not in tiers
