"""JSON round trips of the recoverable-compaction records, across schema versions."""

from __future__ import annotations

import json

import pytest

from contextfold.errors import ContextFoldError
from contextfold.evidence.model import (
    SCHEMA_VERSION,
    CompactBlock,
    CompactSummaryItem,
    EvidenceFormatError,
    EvidencePointer,
)

POINTER = EvidencePointer(
    id="ev-1",
    message_uuid="m-1",
    tool_use_id="call_1",
    tool_result_path="tool_results/call_1.txt",
    archived_tool_result_path="evidence/ab/" + "ab" * 32 + ".txt",
    source_scope="sub_agent",
    agent_run_id="run-7",
    parent_message_uuid="m-0",
    content_types=("stack_trace", "error"),
    anchors=("exception:ValueError", "exit_code:1"),
    sha256="ab" * 32,
    chars=123,
    preview="Traceback …",
    command="pytest -x",
    tool_name="bash",
    role="tool",
    created_at=5,
)
ITEM = CompactSummaryItem(
    kind="tried_solution",
    text="ran `pytest -x`",
    confidence=1.0,
    evidence_ids=("ev-1",),
    query_hints=("cmd:pytest -x",),
)
BLOCK = CompactBlock(
    id="cb-1",
    compact_boundary_uuid="m-9",
    token_before=30_000,
    token_after=4_000,
    natural_summary="summary",
    summary_items=(ITEM,),
    evidence=(POINTER,),
    tier="full",
    strategy="llm",
    created_at=6,
)


def test_pointer_uses_seed_keys() -> None:
    d = POINTER.to_dict()
    assert d["schema_version"] == SCHEMA_VERSION
    for key in (
        "messageUuid",
        "toolUseId",
        "toolResultPath",
        "archivedToolResultPath",
        "sourceScope",
        "agentRunId",
        "parentMessageUuid",
        "contentTypes",
        "anchors",
        "sha256",
        "chars",
        "preview",
        "command",
        "toolName",
        "createdAt",
    ):
        assert key in d, key
    assert d["contentTypes"] == ["stack_trace", "error"]


@pytest.mark.parametrize("record", [POINTER, ITEM, BLOCK], ids=["pointer", "item", "block"])
def test_round_trip_through_json(
    record: EvidencePointer | CompactSummaryItem | CompactBlock,
) -> None:
    text = json.dumps(record.to_dict(), ensure_ascii=False)
    again = type(record).from_dict(json.loads(text))
    assert again == record


def test_unknown_keys_are_ignored() -> None:
    d = BLOCK.to_dict()
    d["schema_version"] = 7
    d["futureField"] = {"x": 1}
    d["evidence"][0]["embedding"] = [0.1, 0.2]
    d["summaryItems"][0]["rationale"] = "later version"
    assert CompactBlock.from_dict(d) == BLOCK


def test_missing_keys_get_defaults() -> None:
    p = EvidencePointer.from_dict({"id": "ev-2"})
    assert p.source_scope == "main_agent" and p.content_types == () and p.sha256 is None
    assert p.created_at == 0 and p.role == "tool"
    item = CompactSummaryItem.from_dict({"kind": "next_step", "text": "x"})
    assert item.evidence_ids == () and item.confidence == 0.3
    block = CompactBlock.from_dict({"id": "cb-1"})
    assert block.evidence == () and block.summary_items == () and block.token_before == 0


@pytest.mark.parametrize(
    "bad",
    [
        [],
        {"id": 3},
        {"id": "x", "sourceScope": "elsewhere"},
        {"id": "x", "contentTypes": "error"},
        {"id": "x", "chars": "many"},
        {"id": "x", "chars": True},
    ],
)
def test_bad_pointer_dicts_raise_our_error(bad: object) -> None:
    with pytest.raises(EvidenceFormatError) as err:
        EvidencePointer.from_dict(bad)
    assert isinstance(err.value, ContextFoldError)


def test_records_are_frozen() -> None:
    with pytest.raises(AttributeError):
        POINTER.id = "other"  # type: ignore[misc]
