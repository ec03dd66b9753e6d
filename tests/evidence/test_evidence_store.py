"""EvidenceStore: archiving, indexing a compaction, sub-agent output, restore priority."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from contextfold.core.messages import Message, ToolCall
from contextfold.errors import ContextFoldError
from contextfold.evidence.store import EvidenceStore, command_of
from tests.support.store_helpers import blob_path, events, session_store

TRACEBACK = (
    "<returncode>1</returncode>\n<output>\nTraceback (most recent call last):\n"
    '  File "/repo/src/app/core.py", line 17, in run\n    value = int(raw)\n'
    "ValueError: invalid literal for int() with base 10: 'abc'\n</output>"
)


@dataclass(frozen=True)
class Offload:
    path: str
    sha256: str


def call(call_id: str, command: str, name: str = "bash") -> Message:
    return Message(
        role="assistant",
        content="Let me run it.",
        tool_calls=(ToolCall(id=call_id, name=name, arguments=json.dumps({"command": command})),),
    )


def result(call_id: str, text: str) -> Message:
    return Message(role="tool", tool_call_id=call_id, content=text)


def index(store: EvidenceStore, messages: list[Message], **kw: object) -> object:
    args: dict[str, object] = dict(
        messages=messages,
        offloaded={},
        summary_items_source=[],
        token_before=1000,
        token_after=100,
        boundary_uuid="b-1",
        natural_summary="s",
        tier="full",
        strategy="llm",
    )
    args.update(kw)
    return store.index_compaction(**args)  # type: ignore[arg-type]


def test_archive_is_content_addressed_byte_exact_and_deduplicated(tmp_path: Path) -> None:
    store = EvidenceStore(session_store(tmp_path))
    text = "héllo\r\nwörld 你好\x00\n  trailing  "
    rel, sha = store.archive(text)
    assert sha == hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert rel == f"evidence/{sha[:2]}/{sha}.txt"
    assert blob_path(tmp_path, sha).read_bytes() == text.encode("utf-8")
    rel2, sha2 = store.archive(text)
    assert (rel2, sha2) == (rel, sha)
    files = [p for p in (tmp_path / "blobs").rglob("*") if p.is_file()]
    assert files == [blob_path(tmp_path, sha)]  # one copy, no temp files left


def test_lone_surrogates_survive(tmp_path: Path) -> None:
    store = EvidenceStore(session_store(tmp_path))
    text = "bad \udcff byte"
    _rel, _ = store.archive(text)
    index(store, [Message(role="user", content=text)])
    p = store.pointers()[0]
    assert store.restore(p).text == text and store.restore(p).sha256_ok is True


def test_index_compaction_builds_pointers_and_links_summary(tmp_path: Path) -> None:
    store = EvidenceStore(session_store(tmp_path))
    msgs = [
        Message(role="user", content="Fix the int parsing bug in core.py"),
        call("c1", "cd /repo && python -m pytest tests/test_core.py"),
        result("c1", TRACEBACK),
        call("c2", "ls"),
        result("c2", "<returncode>0</returncode>\n<output>\nsrc\ntests\n</output>"),
        Message(role="assistant", content="ok"),  # too short to be evidence
        Message(role="assistant", content="The ValueError comes from int(raw) on empty input."),
    ]
    block = index(
        store,
        msgs,
        summary_items_source=[
            ("tried_solution", "`python -m pytest tests/test_core.py` fails with ValueError"),
            ("user_intent", "make the docs nicer"),
        ],
    )
    kinds = [(p.role, p.command) for p in block.evidence]  # type: ignore[attr-defined]
    assert kinds == [
        ("user", None),
        ("tool", "cd /repo && python -m pytest tests/test_core.py"),
        ("tool", "ls"),
        ("assistant", None),
    ]
    tb = block.evidence[1]  # type: ignore[attr-defined]
    assert tb.tool_use_id == "c1" and tb.tool_name == "bash" and tb.message_uuid == msgs[2].uuid
    assert {"stack_trace", "error"} <= set(tb.content_types)
    assert "exception:ValueError" in tb.anchors and "exit_code:1" in tb.anchors
    assert tb.sha256 == hashlib.sha256(TRACEBACK.encode()).hexdigest()
    assert tb.chars == len(TRACEBACK)
    item, other = block.summary_items  # type: ignore[attr-defined]
    assert item.evidence_ids[0] == tb.id and item.confidence == 1.0
    assert "cmd:python -m pytest tests/test_core.py" in item.query_hints
    assert other.evidence_ids == () and other.confidence == 0.3
    # created_at is a strictly increasing sequence, block after its evidence
    seqs = [p.created_at for p in block.evidence]  # type: ignore[attr-defined]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert block.created_at > seqs[-1]  # type: ignore[attr-defined]


def test_blocks_are_evidence_events_and_reload(tmp_path: Path) -> None:
    store = EvidenceStore(session_store(tmp_path))
    b1 = index(store, [call("c1", "make"), result("c1", "built")])
    b2 = index(store, [call("c2", "make test"), result("c2", "FAILED (failures=1)")])
    stored = events(tmp_path, "s", "evidence")
    assert len(stored) == 2 and stored[0]["block"]["id"] == "cb-1"
    fresh = EvidenceStore(session_store(tmp_path))
    assert fresh.blocks() == [b1, b2]
    # later evidence keeps increasing across a reopen
    b3 = index(fresh, [call("c3", "make lint"), result("c3", "clean")])
    assert b3.evidence[0].created_at > b2.evidence[-1].created_at  # type: ignore[attr-defined]
    assert b3.id == "cb-3"  # type: ignore[attr-defined]


def test_damaged_block_event_is_skipped_and_next_append_survives(tmp_path: Path) -> None:
    session = session_store(tmp_path)
    store = EvidenceStore(session)
    b1 = index(store, [call("c1", "make"), result("c1", "built")])
    session.emit("evidence", {"block": "cb-2 torn"})
    fresh = EvidenceStore(session_store(tmp_path))
    assert fresh.blocks() == [b1]
    b2 = index(fresh, [call("c2", "make test"), result("c2", "ok")])
    again = EvidenceStore(session_store(tmp_path))
    assert again.blocks() == [b1, b2]
    assert again.skipped_lines == 1


def test_offloaded_result_points_at_its_file_and_is_archived(tmp_path: Path) -> None:
    big = "line\n" * 5000 + TRACEBACK
    session = session_store(tmp_path)
    sha = session.store.blobs.put(big.encode())  # what the offload store wrote
    assert sha == hashlib.sha256(big.encode()).hexdigest()
    offloaded_files = {"tool_results/c1.txt": big.encode()}  # e.g. a custom offload root
    store = EvidenceStore(session, offload_lookup=offloaded_files.get)
    placeholder = result("c1", "[output offloaded to tool_results/c1.txt]")
    block = index(
        store,
        [call("c1", "python run.py"), placeholder],
        offloaded={"c1": Offload(path="tool_results/c1.txt", sha256=sha)},
    )
    p = block.evidence[-1]  # type: ignore[attr-defined]
    assert p.tool_result_path == "tool_results/c1.txt"
    assert p.sha256 == sha and p.chars == len(big)
    assert "exception:ValueError" in p.anchors
    got = store.restore(p)
    assert got.text == big and got.source == "archived" and got.sha256_ok is True
    # the archived copy gone: the offload file is next
    blob_path(tmp_path, p.sha256).unlink()
    got = store.restore(p)
    assert got.text == big and got.source == "tool_result" and got.sha256_ok is True
    assert got.problem and "archived" in got.problem


def test_restore_priority_and_sha_mismatch(tmp_path: Path) -> None:
    transcript: dict[str, str] = {}
    store = EvidenceStore(session_store(tmp_path), transcript_lookup=transcript.get)
    msgs = [call("c1", "pytest"), result("c1", TRACEBACK)]
    # (not in the transcript when indexed, e.g. a message the log lacks: its body is archived)
    p = index(store, msgs).evidence[-1]  # type: ignore[attr-defined]
    transcript[msgs[1].uuid] = TRACEBACK
    archived = blob_path(tmp_path, p.sha256)

    # tampered archive: reported, never returned; the next source (checked) is used
    archived.write_text(TRACEBACK.replace("abc", "xyz"))
    got = store.restore(p)
    assert got.source == "transcript" and got.sha256_ok is True and "xyz" not in got.text
    assert got.problem and "does not match its sha256" in got.problem

    # a transcript that changed since indexing is reported as a mismatch
    transcript[msgs[1].uuid] = TRACEBACK.replace("abc", "xyz")
    got = store.restore(p)
    assert got.source == "transcript" and got.sha256_ok is False
    assert got.problem and "sha256 mismatch" in got.problem
    transcript[msgs[1].uuid] = TRACEBACK

    # archive missing and no tool-result file: the message log, which holds the body byte
    # for byte (checked), stands for the archived copy
    archived.unlink()
    got = store.restore(p)
    assert got.source == "archived" and got.text == TRACEBACK and got.sha256_ok is True

    # transcript has lost it too: the preview, flagged
    transcript.clear()
    got = store.restore(p)
    assert got.source == "preview" and got.sha256_ok is None
    assert got.text == p.preview and got.problem and "preview" in got.problem


def test_a_body_the_message_log_holds_is_not_archived_again(tmp_path: Path) -> None:
    """The text of a logged message is evidence as it is: no second copy is stored, and it is
    restored from the log byte for byte (checked against the sha256), as the archived copy."""
    transcript: dict[str, str] = {}
    store = EvidenceStore(session_store(tmp_path), transcript_lookup=transcript.get)
    msgs = [call("c1", "pytest"), result("c1", TRACEBACK)]
    transcript[msgs[1].uuid] = TRACEBACK
    p = index(store, msgs).evidence[-1]  # type: ignore[attr-defined]
    assert p.sha256 == hashlib.sha256(TRACEBACK.encode()).hexdigest()
    assert not blob_path(tmp_path, p.sha256).exists(), "the body was stored a second time"
    got = store.restore(p)
    assert (got.text, got.source, got.sha256_ok, got.problem) == (TRACEBACK, "archived", True, None)
    # the log changed since (it never does; if it did): reported, never passed off as the body
    transcript[msgs[1].uuid] = TRACEBACK.replace("abc", "xyz")
    got = store.restore(p)
    assert got.source == "transcript" and got.sha256_ok is False
    assert got.problem and "unreadable" in got.problem and "sha256 mismatch" in got.problem


def test_restore_refuses_paths_outside_the_session(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    store = EvidenceStore(session_store(tmp_path / "ws"))
    p = index(store, [call("c1", "ls"), result("c1", "x")]).evidence[-1]  # type: ignore[attr-defined]
    from dataclasses import replace

    evil = replace(p, archived_tool_result_path="../secret.txt", tool_result_path=str(secret))
    got = store.restore(evil)
    assert "top secret" not in got.text and got.source == "preview"
    assert got.problem and "refused" in got.problem


def test_subagent_output_text_and_messages(tmp_path: Path) -> None:
    store = EvidenceStore(session_store(tmp_path))
    log = "worker log\n" + TRACEBACK
    pointers = store.add_subagent_output("run-42", log, parent_message_uuid="m-parent")
    (p,) = pointers
    assert p.source_scope == "sub_agent" and p.agent_run_id == "run-42"
    assert p.parent_message_uuid == "m-parent" and p.role == "text"
    assert store.restore(p).text == log
    block = store.blocks()[-1]
    assert block.strategy == "sub_agent" and block.evidence == (p,)

    msgs = [
        call("w1", "pytest -q"),
        result("w1", "1 failed, 3 passed in 0.1s\nFAILED t.py::test_a"),
    ]
    more = store.add_subagent_output("run-43", msgs, parent_message_uuid="m-parent")
    tool_ptr = next(q for q in more if q.role == "tool")
    assert tool_ptr.command == "pytest -q" and tool_ptr.source_scope == "sub_agent"
    assert "test:t.py::test_a" in tool_ptr.anchors
    with pytest.raises(ContextFoldError):
        store.add_subagent_output("", "x")


def test_same_message_indexed_twice_keeps_one_id(tmp_path: Path) -> None:
    store = EvidenceStore(session_store(tmp_path))
    msgs = [call("c1", "ls"), result("c1", "a\nb")]
    a = index(store, msgs).evidence[-1]  # type: ignore[attr-defined]
    b = index(store, msgs).evidence[-1]  # type: ignore[attr-defined]
    assert a.id == b.id and a.archived_tool_result_path == b.archived_tool_result_path
    assert store.find(a.id) == b


def test_command_of() -> None:
    assert command_of("bash", '{"command": "ls -la"}') == "ls -la"
    assert command_of("exec", '{"cmd": ["git", "status"]}') == "git status"
    assert command_of("read_file", '{"path": "a.py"}') == "read_file a.py"
    assert command_of("x", "not json") == "not json"


def test_known_calls_give_a_lone_result_its_command(tmp_path: Path) -> None:
    store = EvidenceStore(session_store(tmp_path))
    c = call("c9", "pytest -k slow")
    block = index(store, [result("c9", "1 failed")], known_calls=[c])
    (p,) = block.evidence  # type: ignore[attr-defined]
    assert p.command == "pytest -k slow" and p.tool_name == "bash"
    assert all(q.role == "tool" for q in block.evidence)  # type: ignore[attr-defined]
