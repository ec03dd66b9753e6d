"""Messages that cannot be stored as JSON exactly get InvalidMessageError naming the message
and the field, before anything is written, on every backend (never a raw TypeError,
ValueError, RecursionError or UnicodeEncodeError)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contextfold import ContextManager
from contextfold.core.messages import MAX_NESTING, Message, check_encodable
from contextfold.errors import InvalidMessageError
from contextfold.storage import MemoryStore, SQLiteStore, Store
from tests.support import pg_support


class Opaque:
    pass


def _deep_list(depth: int) -> list[Any]:
    root: list[Any] = []
    cur = root
    for _ in range(depth):
        nxt: list[Any] = []
        cur.append(nxt)
        cur = nxt
    return root


def _deep_dict(depth: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    cur = root
    for _ in range(depth):
        nxt: dict[str, Any] = {}
        cur["k"] = nxt
        cur = nxt
    return root


def _circular() -> dict[str, Any]:
    loop: dict[str, Any] = {"a": 1}
    loop["self"] = loop
    return loop


def _call(arguments: Any) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
        ],
    }


def _block(**extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": "hi", **extra}]}


#: name -> (message, what the error names)
CASES: dict[str, tuple[dict[str, Any], str]] = {
    "object in a block": (_block(x=Opaque()), "content block 0 holds a Opaque object"),
    "object in an extra field": ({"role": "user", "content": "x", "meta": Opaque()}, "'meta'"),
    "set in a block": (_block(x={1, 2}), "content block 0 holds a set"),
    "circular block": (_block(x=_circular()), "content block 0 refers to itself"),
    "circular extra field": ({"role": "user", "content": "x", "loop": _circular()}, "'loop'"),
    "50k-deep block": (_block(x=_deep_dict(50_000)), "content block 0 is nested deeper"),
    "100k-deep extra field": (
        {"role": "user", "content": "x", "deep": _deep_list(100_000)},
        "field 'deep' is nested deeper",
    ),
    "100k-deep tool arguments": (
        _call("[" * 100_000 + "]" * 100_000),
        "arguments is nested deeper",
    ),
    "deep tool arguments": (
        _call(json.dumps(_deep_list(MAX_NESTING + 5))),
        "arguments is nested deeper",
    ),
    "NaN in a block": (_block(x=float("nan")), "content block 0 holds nan"),
    "non-text key": (_block(x={1: "a"}), "key 1 that is not text"),
    "lone surrogate in text": ({"role": "user", "content": "bad \udc80"}, "content text is not"),
    "lone surrogate in a block": (_block(x="b\ud800"), "content block 0 text is not valid"),
    "lone surrogate in a name": (
        {"role": "user", "content": "x", "name": "n\udc80"},
        "name text is not valid",
    ),
    "lone surrogate in arguments": (_call('{"a": "\ud800"}'), "tool call 0"),
    "lone surrogate in an extra field": (
        {"role": "assistant", "content": "x", "reasoning_content": "r\udcff"},
        "'reasoning_content' text",
    ),
}


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "memory":
        yield MemoryStore()
    elif request.param == "sqlite":
        opened = SQLiteStore(tmp_path / "ws")
        yield opened
        opened.close()
    else:
        yield from pg_support.schema_factory_store()


@pytest.mark.parametrize("case", sorted(CASES))
def test_unstorable_message_is_refused_before_anything_is_written(store: Store, case: str) -> None:
    message, named = CASES[case]
    cm = ContextManager(store=store, session_id="s", context_window=50_000)
    cm.add({"role": "user", "content": "first"})
    events = store.head("s")
    with pytest.raises(InvalidMessageError) as info:
        cm.add_many([{"role": "user", "content": "fine"}, message])
    assert info.value.index == 2, info.value
    assert named in str(info.value), info.value
    assert store.head("s") == events
    assert [m.text for m in cm.history] == ["first"]
    cm.add({"role": "user", "content": "next"})  # the manager and the store still work
    again = ContextManager(store=store, session_id="s", context_window=50_000)
    assert [m.text for m in again.history] == ["first", "next"]
    assert len(again.prepare()) == 2


def test_nesting_up_to_the_limit_is_kept_exactly() -> None:
    cm = ContextManager(store=MemoryStore(), session_id="s")
    deep = _deep_dict(MAX_NESTING - 2)
    cm.add_many([_block(x=deep), _call(json.dumps(_deep_list(MAX_NESTING - 1)))])
    assert cm.history[0].content is not None and cm.history[0].content[0]["x"] == deep


def test_shared_objects_are_not_cycles() -> None:
    shared = {"a": [1, 2]}
    check_encodable(
        Message(role="user", content=({"type": "text", "text": "t", "x": [shared, shared]},))
    )
