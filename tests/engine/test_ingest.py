"""A batch of messages is appended as one-by-one appends would: the same view forms, token
counts and prefix sums (an assistant whose calls are answered in the batch gets its final
form at once), and a bad batch is refused whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contextfold import ContextManager
from contextfold.errors import InvalidMessageError


def _call(cid: str, cmd: str) -> dict[str, object]:
    args = json.dumps({"command": cmd})
    return {"id": cid, "type": "function", "function": {"name": "bash", "arguments": args}}


def _batch() -> list[dict[str, object]]:
    return [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the parser."},
        {"role": "assistant", "content": "", "tool_calls": [_call("a", "ls"), _call("b", "pwd")]},
        {"role": "tool", "tool_call_id": "a", "content": "parser.py\ntests"},
        {"role": "tool", "tool_call_id": "b", "content": "/repo"},
        {"role": "assistant", "content": "Two checks.", "tool_calls": [_call("c", "pytest")]},
        {"role": "tool", "tool_call_id": "c", "content": "1 failed"},
        # answered in part: the unanswered call leaves the view form
        {"role": "assistant", "content": "", "tool_calls": [_call("d", "cat a"), _call("e", "x")]},
        {"role": "tool", "tool_call_id": "d", "content": "contents"},
        {"role": "user", "content": "Go on."},
        # not answered yet: the newest call waits for its result
        {"role": "assistant", "content": "", "tool_calls": [_call("f", "make")]},
    ]


def _state(cm: ContextManager) -> tuple[object, ...]:
    v = cm.context.view
    return (list(v.forms), list(v._tokens), list(v._cum), cm.view.view_dicts())


def test_a_batch_is_appended_as_one_by_one(tmp_path: Path) -> None:
    whole = ContextManager(workspace=tmp_path / "a", session_id="s")
    whole.add_many(_batch())
    single = ContextManager(workspace=tmp_path / "b", session_id="s")
    for m in _batch():
        single.add(m)
    assert _state(whole) == _state(single)
    whole.add({"role": "tool", "tool_call_id": "f", "content": "built"})
    single.add({"role": "tool", "tool_call_id": "f", "content": "built"})
    assert _state(whole) == _state(single)
    again = ContextManager(workspace=tmp_path / "a", session_id="s")  # reopened from the log
    assert _state(again) == _state(whole)


@pytest.mark.parametrize(
    "bad",
    [
        {"role": "tool", "tool_call_id": "zz", "content": "no such call"},
        {"role": "assistant", "content": "", "tool_calls": [_call("g", "x")] * 2},
    ],
)
def test_a_bad_batch_is_refused_whole(tmp_path: Path, bad: dict[str, object]) -> None:
    cm = ContextManager(workspace=tmp_path, session_id="s")
    with pytest.raises(InvalidMessageError):
        cm.add_many([*_batch()[:5], bad])
    assert len(cm.context.view) == 0
    cm.add_many(_batch())  # nothing half written
    assert len(cm.context.view) == len(_batch())
