from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from contextfold.compaction.offload import (
    COMPACTION_POLICY,
    EVICTION_POLICY,
    OffloadStore,
    placeholder,
)
from contextfold.core.messages import Message, ToolCall, check_view
from contextfold.core.paths import check_session_id, safe_name
from contextfold.core.view import HistoryView
from contextfold.errors import InvalidMessageError, StorageError, UnsafeIdError
from tests.support.store_helpers import blob_path, session_store


def count(m: Message) -> int:
    return 4 + len(m.text) // 4 + sum(len(c.arguments) // 4 + 4 for c in m.tool_calls)


def call(cid: str, name: str = "bash", args: str = '{"command": "ls"}') -> ToolCall:
    return ToolCall(id=cid, name=name, arguments=args)


def build(*msgs: Message) -> HistoryView:
    v = HistoryView(count)
    for m in msgs:
        v.append(m)
    return v


def test_legal_cuts_never_split_tool_pairs() -> None:
    v = build(
        Message(role="system", content="s"),
        Message(role="user", content="task"),
        Message(role="assistant", tool_calls=(call("a"), call("b"))),
        Message(role="tool", tool_call_id="a", content="1"),
        Message(role="tool", tool_call_id="b", content="2"),
        Message(role="assistant", content="done"),
    )
    assert [i for i in range(len(v) + 1) if v.is_legal_cut(i)] == [1, 2, 5, 6]
    assert v.legal_cut_at_or_before(4, 1) == 2
    assert v.legal_cut_at_or_after(3) == 5


def test_the_kept_tail_counts_messages_of_the_view_only() -> None:
    """A client that rewrites its newest message every turn (aider stuffs a reminder into it
    and sends it without it the next turn) leaves retracted copies in the history's tail: the
    tail of ``min_tail`` messages is counted in the view, not in the history."""
    msgs = [Message(role="system", content="s"), Message(role="user", content="task")]
    for k in range(4):
        msgs += [
            Message(role="user", content=f"output {k}"),
            Message(role="assistant", content="Ok."),
            Message(role="user", content=f"note {k} + reminder"),
            Message(role="user", content=f"note {k}"),
            Message(role="assistant", content=f"noted {k}"),
        ]
    v = build(*msgs)
    assert v.tail_start(4) == len(v) - 4
    v.retract([i for i, m in enumerate(v.history) if m.text.endswith("+ reminder")])
    start = v.tail_start(4)
    visible = [v.history[i].text for i in range(start, len(v)) if i not in v.retracted]
    assert visible == ["output 3", "Ok.", "note 3", "noted 3"]


def test_pending_calls_are_stripped_from_view_until_answered() -> None:
    v = build(
        Message(role="user", content="go"),
        Message(role="assistant", content="x", tool_calls=(call("a"), call("b"))),
    )
    check_view(v.view_messages())
    assert v.view_messages()[-1].tool_calls == ()
    v.append(Message(role="tool", tool_call_id="a", content="1"))
    assert [c.id for c in v.view_messages()[1].tool_calls] == ["a"]
    check_view(v.view_messages())
    v.append(Message(role="tool", tool_call_id="b", content="2"))
    assert len(v.view_messages()[1].tool_calls) == 2
    assert v.view_tokens() == sum(count(m) for m in v.view_messages())


def test_result_after_conversation_moved_on_is_rejected() -> None:
    v = build(
        Message(role="user", content="go"),
        Message(role="assistant", tool_calls=(call("a"),)),
        Message(role="user", content="never mind"),
    )
    with pytest.raises(InvalidMessageError, match="moved on") as info:
        v.append(Message(role="tool", tool_call_id="a", content="late"))
    assert info.value.index == 3
    # the abandoned call is not in the view
    check_view(v.view_messages())


def test_check_batch_is_all_or_nothing() -> None:
    v = build(Message(role="user", content="go"))
    batch = [
        Message(role="assistant", tool_calls=(call("a"),)),
        Message(role="tool", tool_call_id="zzz", content="?"),
    ]
    with pytest.raises(InvalidMessageError) as info:
        v.check_batch(batch, len(v))
    assert info.value.index == 2
    assert len(v) == 1


def test_boundary_keeps_pinned_messages_and_counts_incrementally() -> None:
    v = build(Message(role="system", content="s"), Message(role="user", content="first task"))
    for i in range(10):
        v.append(Message(role="assistant", tool_calls=(call(f"c{i}"),)))
        v.append(Message(role="tool", tool_call_id=f"c{i}", content="x" * 100))
    v.append(Message(role="user", content="newest request"))
    for i in range(10, 14):
        v.append(Message(role="assistant", tool_calls=(call(f"c{i}"),)))
        v.append(Message(role="tool", tool_call_id=f"c{i}", content="y" * 100))
    b = v.legal_cut_at_or_before(len(v) - 4, v.boundary)
    v.set_boundary(b, Message(role="user", content="[Context Compaction] summary"))
    msgs = v.view_messages()
    check_view(msgs)
    texts = [m.text for m in msgs]
    assert texts[0] == "s" and texts[1] == "first task"
    assert texts[2].startswith("[Context Compaction]")
    assert "newest request" in texts
    assert v.view_tokens() == sum(count(m) for m in msgs)
    assert [d["content"] for d in v.view_dicts()] == [m.content for m in msgs]


def test_offload_store_is_byte_exact_and_idempotent(tmp_path: Path) -> None:
    store = OffloadStore(session_store(tmp_path, "s1"))
    text = "line one\nzwei 二\n\udcff tail\n" * 500
    e1 = store.write("call_1", text, message_uuid="u", policy="compaction", tool_name="bash")
    assert e1.path == "sessions/s1/tool_results/call_1.txt"
    path = blob_path(tmp_path, e1.sha256)
    assert path.read_bytes() == text.encode("utf-8", "surrogatepass")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == e1.sha256
    mtime = path.stat().st_mtime_ns
    e2 = store.write("call_1", text, message_uuid="u", policy="compaction")
    assert e2 == e1 and path.stat().st_mtime_ns == mtime
    assert store.read("call_1") == text
    # the entry survives a reopen (an offload event of the session)
    again = OffloadStore(session_store(tmp_path, "s1"))
    again.load(again.session.read(kinds=["offload"]))
    assert again.read("call_1") == text
    page = store.read_page("call_1", offset=2, limit=2)
    assert "lines 3-4 of" in page and "more lines" in page


def test_tampered_offload_is_reported(tmp_path: Path) -> None:
    store = OffloadStore(session_store(tmp_path, "s1"))
    e = store.write("c", "abc" * 2000, message_uuid="u", policy="ingest")
    blob_path(tmp_path, e.sha256).write_text("tampered")
    with pytest.raises(StorageError, match="sha256"):
        store.read("c")


@pytest.mark.parametrize(
    "hostile",
    [
        "../x",
        "../../etc/passwd",
        "/etc/passwd",
        "a/b",
        "nul\x00byte",
        "x" * 5000,
        ".",
        "..",
        "C:\\windows",
    ],
)
def test_hostile_tool_call_ids_stay_inside(tmp_path: Path, hostile: str) -> None:
    store = OffloadStore(session_store(tmp_path, "s1"))
    e = store.write(hostile, "data" * 1500, message_uuid="u", policy="compaction")
    # the name shown (and written by export) stays one file name inside the session's folder
    shown = Path(e.path)
    assert shown.parent == Path("sessions/s1/tool_results") and ".." not in shown.parts
    assert len(shown.name) < 120 and "\x00" not in e.path
    assert store.read(hostile) == "data" * 1500
    assert store.read_page(e.path).startswith(f"[{e.path} |")
    assert [p for p in tmp_path.rglob("*") if p.is_file() and "passwd" in p.name] == []


def test_safe_names_do_not_collide() -> None:
    assert safe_name("a/b") != safe_name("a_b")
    assert safe_name("call_123") == "call_123"


@pytest.mark.parametrize("bad", ["../../etc/passwd", "", "a/b", ".hidden", "x" * 200, "a\x00"])
def test_hostile_session_ids_are_rejected(bad: str) -> None:
    with pytest.raises(UnsafeIdError):
        check_session_id(bad)


def test_read_page_refuses_paths_outside(tmp_path: Path) -> None:
    store = OffloadStore(session_store(tmp_path, "s1"))
    store.write("c", "x\n" * 3000, message_uuid="u", policy="compaction")
    (tmp_path / "secret.txt").write_text("secret")
    refs = ["../../secret.txt", str(tmp_path / "secret.txt"), "../index.jsonl", "store.sqlite"]
    refs += ["sessions/s1/tool_results/../../../secret.txt", "/sessions/s1/tool_results/c.txt/.."]
    for ref in refs:
        with pytest.raises(StorageError):
            store.read_page(ref)


def test_placeholders_follow_the_seeds(tmp_path: Path) -> None:
    store = OffloadStore(session_store(tmp_path, "s1"))
    text = "\n".join(f"row {i}" for i in range(5000))
    e = store.write("tc_001", text, message_uuid="u", policy="compaction")
    ph = placeholder(e, text, COMPACTION_POLICY)
    assert ph.startswith("[offloaded: sessions/s1/tool_results/tc_001.txt | 5000 lines")
    assert "row 9" in ph and "row 10" not in ph
    big = "A" * 50_000 + "MIDDLE" + "Z" * 50_000
    e2 = store.write("tc_002", big, message_uuid="u2", policy="eviction")
    ph2 = placeholder(e2, big, EVICTION_POLICY)
    assert ph2.count("A") >= 2000 and ph2.count("Z") >= 2000 and "MIDDLE" not in ph2
    assert "read_offloaded" in ph2 and e2.path in ph2
    assert not EVICTION_POLICY.applies(big, "read_file")
    assert EVICTION_POLICY.applies(big, "bash")
    assert not EVICTION_POLICY.applies(big, "memory_search")
