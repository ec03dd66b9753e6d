from __future__ import annotations

import json
from pathlib import Path

from contextfold import ContextManager
from contextfold.core.anchors import ALL_ANCHOR_TYPES, Anchor
from contextfold.core.records import CompactionRecord, OffloadEntry, StoreRecordStore, Tier
from contextfold.core.wire import from_anthropic
from contextfold.storage import NewEvent, SQLiteStore
from contextfold.storage.session import SessionStore


def record(i: int, tier: Tier = Tier.FULL) -> CompactionRecord:
    return CompactionRecord(
        id=f"r{i}",
        session_id="s",
        timestamp="2026-01-01T00:00:00+00:00",
        tier=tier,
        tokens_before=45_200,
        tokens_after=8_100,
        msgs_before=40,
        msgs_after=8,
        anchors=tuple(Anchor(type=t, content="- x") for t in ALL_ANCHOR_TYPES),
        offloaded=(
            OffloadEntry(
                tool_call_id="c",
                message_uuid="u",
                path="p",
                sha256="0" * 64,
                chars=42_000,
                bytes=43_008,
                lines=10,
                policy="compaction",
            ),
        ),
        summarized=28,
        preserved_tail=6,
        summary_text="s",
        compression_ratio=8_100 / 45_200,
    )


def test_record_store_round_trip_and_damaged_event(tmp_path: Path) -> None:
    db = SQLiteStore(tmp_path)
    session = SessionStore(db, "s", "a")
    store = StoreRecordStore(session)
    store.append(record(1))
    store.append(record(2, Tier.WARN))
    with db.transaction() as txn:  # a record that does not parse is skipped, not fatal
        txn.append(
            "s",
            [NewEvent(kind="compaction", data={"record": {"tier": "bogus"}})],
            expected_seq=2,
            agent_id="a",
        )
    session.refresh()
    store.append(record(4))
    got = store.list("s")
    assert [r.id for r in got] == ["r1", "r2", "r4"]
    assert got[0] == record(1)
    assert store.problems and "event 2" in store.problems[0]
    assert [
        r.id for r in StoreRecordStore(SessionStore(SQLiteStore(tmp_path), "s", "a")).list("s")
    ] == ["r1", "r2", "r4"]
    db.close()


def test_every_seed_field_is_persisted() -> None:
    data = record(1).to_dict()
    for key in (
        "id",
        "session_id",
        "timestamp",
        "tier",
        "tokens_before",
        "tokens_after",
        "msgs_before",
        "msgs_after",
        "anchors",
        "offloaded",
        "summarized",
        "preserved_tail",
        "summary_text",
        "compression_ratio",
        "duration_ms",
        "error",
    ):
        assert key in data
    json.dumps(data)


def test_notification_matches_seed_layout() -> None:
    lines = record(1).notification().splitlines()
    assert lines[0] == "⚡ Context compacted [Full] 45.2K→8.1K tokens (82% saved)"
    assert (
        lines[1].strip() == "5 anchors | 1 offloaded(42KB) | 28 messages summarized | tail kept 6"
    )
    emergency = CompactionRecord(
        id="e",
        session_id="s",
        timestamp="t",
        tier=Tier.EMERGENCY,
        tokens_before=98_500,
        tokens_after=12_000,
        msgs_before=90,
        msgs_after=2,
        preserved_tail=1,
        error="emergency fallback: forced truncation",
    ).notification()
    assert "⚠ emergency truncation fallback" in emergency and "tail kept 1" in emergency


def test_read_offloaded_tool_pages_and_refuses_escapes(tmp_path: Path) -> None:
    cm = ContextManager(workspace=tmp_path, session_id="ro", context_window=32_000)
    cm.add({"role": "user", "content": "go"})
    big = "\n".join(f"row {i}" for i in range(3_000))
    cm.add_many(
        [
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "bash", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": big},
        ]
    )
    view = cm.prepare()
    assert view[-1]["content"].startswith("[offloaded: ")  # > 10,000 chars: offloaded on arrival
    schema = next(t for t in cm.tool_schemas() if t["function"]["name"] == "read_offloaded")
    assert schema["function"]["parameters"]["properties"]["offset"]["type"] == "integer"

    def call(args: dict[str, object]) -> str:
        msg = cm.handle_tool_call(
            {
                "id": "x",
                "type": "function",
                "function": {"name": "read_offloaded", "arguments": json.dumps(args)},
            }
        )
        return str(msg["content"])

    page = call({"id": "c1", "offset": 10, "limit": 5})
    assert "row 10\nrow 11\nrow 12\nrow 13\nrow 14" in page and "offset=15" in page
    assert call({"path": "../../../etc/passwd"}).startswith("Error:")
    assert call({"id": "c1", "offset": -1}).startswith("Error:")
    assert call({}).startswith("Error:")
    # the Anthropic dispatcher shape works too
    msg = cm.handle_tool_call(
        {
            "type": "tool_use",
            "id": "tu",
            "name": "read_offloaded",
            "input": {"id": "c1", "limit": 1},
        }
    )
    assert "row 0" in msg["content"]


def test_prepare_anthropic_format(tmp_path: Path) -> None:
    cm = ContextManager(workspace=tmp_path, session_id="an", context_window=32_000)
    cm.add({"role": "system", "content": "sys"})
    cm.add({"role": "user", "content": "go"})
    cm.add_many(
        [
            {
                "role": "assistant",
                "content": "running",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "bash", "arguments": '{"command": "ls"}'},
                    },
                    {
                        "id": "c2",
                        "type": "function",
                        "function": {"name": "bash", "arguments": '{"command": "pwd"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
            {"role": "tool", "tool_call_id": "c2", "content": "/repo"},
        ]
    )
    view = cm.prepare(format="anthropic")
    assert view["system"] == "sys"
    assert [m["role"] for m in view["messages"]] == ["user", "assistant", "user"]
    assert [b["type"] for b in view["messages"][1]["content"]] == ["text", "tool_use", "tool_use"]
    assert len(from_anthropic(view["messages"], view["system"])) == 5


def test_an_offload_entry_is_written_as_all_its_fields() -> None:
    from dataclasses import asdict, replace

    for entry in record(1).offloaded:
        for e in (entry, replace(entry, tool_name="bash")):
            assert e.to_dict() == asdict(e)
            assert OffloadEntry.from_dict(e.to_dict()) == e
