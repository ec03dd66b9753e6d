"""A client's current-state messages (aider's files block) are pinned in the view like the
system prompt, and its few-shot example is never taken for the task."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from contextfold.core.scaffolding import is_pinned_state, is_scaffolding, parse_rules
from tests.compaction.test_compactor_tiers import manager

SYSTEM = "Act as an expert software developer.\nTake requests for changes to the code."
EXAMPLE = [
    {"role": "user", "content": "Change the greeting to be more casual"},
    {"role": "assistant", "content": 'Ok, I will:\n\n1. Switch the greeting text from "Hello".'},
]
FILES = [
    {
        "role": "user",
        "content": "I have *added these files to the chat* so you can go ahead and edit them.\n"
        "\napp.py\n```\ndef total(values):\n    return sum(values) + 1\n```\n",
    },
    {"role": "assistant", "content": "Ok, any changes I propose will be to those files."},
]
TASK = "Fix the off-by-one in app.py."


def _turn(k: int) -> list[dict[str, Any]]:
    out = "\n".join(f"run {k} step {s:05d}: compiled module ok" for s in range(120))
    return [
        {"role": "user", "content": f"I ran this command:\n\npython3 run.py {k}\n\n{out}"},
        {"role": "assistant", "content": "Ok."},
        {"role": "user", "content": f"Note the result of run {k}."},
        {"role": "assistant", "content": f"Noted the result of run {k}."},
    ]


def test_pin_rules_are_data() -> None:
    assert is_pinned_state(str(FILES[0]["content"]))
    assert is_pinned_state(str(FILES[1]["content"]))
    assert is_scaffolding(str(FILES[0]["content"]))  # pinned, and never the task
    assert not is_pinned_state(EXAMPLE[0]["content"])
    assert is_scaffolding(EXAMPLE[0]["content"], "aider")
    assert not is_pinned_state(TASK)
    rules = parse_rules({"agents": [{"name": "x", "pin": ["STATE:"]}]})
    assert rules[0].pin[0].match("STATE: files")


def test_files_block_is_pinned_and_the_example_is_not_the_task(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    msgs: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, *EXAMPLE]
    msgs.append({"role": "user", "content": TASK})
    msgs.append({"role": "assistant", "content": "Removing the +1."})
    for k in range(4):
        msgs += _turn(k)
    msgs += FILES  # aider's files block, after the conversation
    for k in range(4, 12):
        msgs += _turn(k)
    cm.add_many(msgs)
    view = cm.prepare()
    texts = [str(m.get("content")) for m in view]
    assert len(view) < len(msgs), "the session must have been compacted"
    files_at = next(i for i, m in enumerate(cm.view.history) if m.text == FILES[0]["content"])
    assert cm.view.boundary > files_at + 1, "the boundary must be past the files block"
    assert cm.view.history[cm.view.first_user or 0].text == TASK
    assert any("def total(values):" in t for t in texts), "the files block left the view"
    assert any(t.startswith("Ok, any changes I propose") for t in texts)
    assert TASK in texts
    assert "Note the result of run 11." in texts
