"""Views never exceed the window, even when a pinned message is larger than the window.

The system prompt, the first and the newest user message are pinned (never summarized away).
When one of them is oversized, its view form is head + tail + an exact pointer to the full
text (offloaded byte-exact under ``msg-<uuid>``); only when even the shortened pinned messages
cannot fit does ``prepare()`` raise ContextOverflowError.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contextfold import ContextManager
from contextfold.bench.strategies import check_pairs
from contextfold.core.messages import check_view
from contextfold.errors import ContextOverflowError

WINDOW = 32_000


def _log(chars: int, tag: str = "log") -> str:
    """A pasted log: distinct numbered lines, the request at the very end."""
    line = f"{tag} line {{:07d}}: worker pid=4242 state=ok latency_ms=17 path=/srv/app/x.py\n"
    n = chars // len(line.format(0)) + 1
    body = "".join(line.format(i) for i in range(n))
    return body + "\nPlease find why the worker stalls (END OF REQUEST)."


def _manager(tmp_path: Path, window: int = WINDOW, **kw: Any) -> ContextManager:
    return ContextManager(tmp_path / "ws", "s", window, **kw)


def _pointer_id(text: str) -> str:
    start = text.index('read_offloaded(id="') + len('read_offloaded(id="')
    return text[start : text.index('"', start)]


def _tool_turn(cm: ContextManager, k: int) -> None:
    cm.add(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{k}",
                    "type": "function",
                    "function": {"name": "bash", "arguments": json.dumps({"command": f"ls {k}"})},
                }
            ],
        }
    )
    cm.add({"role": "tool", "tool_call_id": f"call_{k}", "content": f"file_{k}.py\n" * 40})


def test_200kb_newest_user_message_fits_and_is_recoverable(tmp_path: Path) -> None:
    cm = _manager(tmp_path)
    cm.add({"role": "system", "content": "You are a careful engineer."})
    cm.add({"role": "user", "content": "Fix the worker."})
    for k in range(3):
        _tool_turn(cm, k)
    big = _log(200_000)
    cm.add({"role": "user", "content": big})
    view = cm.prepare()
    assert cm.view_tokens <= WINDOW
    assert check_pairs(view) == []
    check_view(cm.view_messages())
    last = view[-1]
    assert last["role"] == "user"  # same role, same position: the newest request is last
    text = last["content"]
    assert text.startswith("[message shortened: this user message has")
    assert "log line 0000000" in text  # head
    assert text.rstrip().endswith("(END OF REQUEST).")  # tail: the request itself is visible
    assert len(text) < 20_000
    key = _pointer_id(text)
    assert cm.recover_tool_result(key) == big  # byte-exact
    page = cm.handle_tool_call(
        {
            "id": "r1",
            "type": "function",
            "function": {
                "name": "read_offloaded",
                "arguments": json.dumps({"id": key, "offset": 2000, "limit": 2}),
            },
        }
    )
    assert "log line 0002000" in page["content"] and "sha256 ok" in page["content"]
    # the full history is untouched
    assert cm.history[-1].content == big
    # the first user message and the system prompt are kept verbatim
    assert view[0]["content"] == "You are a careful engineer."
    assert view[1]["content"] == "Fix the worker."


def test_first_user_message_alone_over_the_window(tmp_path: Path) -> None:
    cm = _manager(tmp_path)
    big = _log(400_000)
    cm.add({"role": "user", "content": big})
    view = cm.prepare()
    assert cm.view_tokens <= WINDOW
    assert [m["role"] for m in view] == ["user"]
    assert cm.recover_tool_result(_pointer_id(view[0]["content"])) == big
    # the conversation goes on: later turns keep the shortened task, views stay in the window
    for k in range(30):
        _tool_turn(cm, k)
        view = cm.prepare()
        assert cm.view_tokens <= WINDOW
        assert check_pairs(view) == []
        assert view[0]["content"].startswith("[message shortened:")


def test_50mb_message_is_shortened(tmp_path: Path) -> None:
    """Linear work only (one count of the big text, one sha256, one file write)."""
    cm = _manager(tmp_path)
    cm.add({"role": "system", "content": "sys"})
    big = _log(50_000_000)
    cm.add({"role": "user", "content": big})
    view = cm.prepare()
    assert cm.view_tokens <= WINDOW
    assert len(view[1]["content"]) < 20_000
    assert cm.recover_tool_result(_pointer_id(view[1]["content"])) == big


def test_huge_system_prompt_openai_and_anthropic(tmp_path: Path) -> None:
    cm = _manager(tmp_path)
    prompt = _log(300_000, tag="rule")
    cm.add({"role": "system", "content": prompt})
    cm.add({"role": "user", "content": "Hello"})
    view = cm.prepare()
    assert cm.view_tokens <= WINDOW
    assert view[0]["role"] == "system" and view[0]["content"].startswith("[message shortened:")
    assert view[1] == {"role": "user", "content": "Hello"}
    anth = cm.prepare(format="anthropic")
    assert isinstance(anth["system"], str) and anth["system"] == view[0]["content"]
    assert anth["messages"][0]["role"] == "user"
    assert cm.recover_tool_result(_pointer_id(anth["system"])) == prompt


def test_reopened_session_rebuilds_the_same_view(tmp_path: Path) -> None:
    cm = _manager(tmp_path)
    cm.add({"role": "system", "content": "sys"})
    cm.add({"role": "user", "content": _log(150_000)})
    first = cm.prepare(copy=True)
    again = _manager(tmp_path)
    assert again.view_tokens <= WINDOW
    assert again.prepare(copy=True) == first


def test_window_smaller_than_the_shortened_pinned_messages_raises(tmp_path: Path) -> None:
    cm = _manager(tmp_path, window=120)
    cm.add({"role": "system", "content": _log(5_000, tag="rule")})
    cm.add({"role": "user", "content": _log(5_000)})
    with pytest.raises(ContextOverflowError) as info:
        cm.prepare()
    message = str(info.value)
    assert "120-token window" in message and "pinned messages" in message
    assert info.value.record is not None
    # the history is intact and a larger window works
    assert len(cm.history) == 2
    bigger = _manager(tmp_path, window=2_000)
    bigger.prepare()
    assert bigger.view_tokens <= 2_000


def test_tool_schemas_larger_than_the_window_raise(tmp_path: Path) -> None:
    cm = _manager(tmp_path, window=1_000)
    cm.add({"role": "user", "content": "hi"})
    tools = [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "description": "does a thing " * 40,
                "parameters": {"type": "object", "properties": {}},
            },
        }
        for i in range(10)
    ]
    with pytest.raises(ContextOverflowError, match="tool schemas"):
        cm.prepare(tools=tools)


def test_small_pinned_messages_stay_verbatim(tmp_path: Path) -> None:
    cm = _manager(tmp_path)
    text = _log(40_000)  # about 11k tokens: a third of the window, under the 50% line
    cm.add({"role": "user", "content": text})
    view = cm.prepare()
    assert view[0]["content"] == text
    assert cm.last_prepare is not None and not cm.last_prepare.offloaded
