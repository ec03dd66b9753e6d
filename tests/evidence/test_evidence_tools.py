"""The recall agent tool through the ToolBox dispatcher."""

from __future__ import annotations

import json
from pathlib import Path

from contextfold.core.messages import Message, ToolCall
from contextfold.core.tools import ToolBox
from contextfold.evidence.search import EvidenceSearch
from contextfold.evidence.store import EvidenceStore
from contextfold.evidence.tools import recall_tool
from tests.evidence.evidence_helpers import index_block
from tests.support.store_helpers import session_store

TB = (
    "<returncode>1</returncode>\nTraceback (most recent call last):\n"
    "  File \"app.py\", line 2, in <module>\nKeyError: 'token'\n"
)


def setup(tmp_path: Path) -> tuple[ToolBox, EvidenceStore, EvidenceSearch]:
    store = EvidenceStore(session_store(tmp_path))
    msgs = []
    for i, (cmd, text) in enumerate([("python app.py", TB), ("cat big.txt", "z" * 50_000)]):
        args = json.dumps({"command": cmd})
        msgs += [
            Message(
                role="assistant", tool_calls=(ToolCall(id=f"c{i}", name="bash", arguments=args),)
            ),
            Message(role="tool", tool_call_id=f"c{i}", content=text),
        ]
    index_block(store, msgs)
    search = EvidenceSearch(store)
    return ToolBox([recall_tool(search, store)]), store, search


def test_schema_in_both_formats(tmp_path: Path) -> None:
    box, _, _ = setup(tmp_path)
    (oa,) = box.schemas("openai")
    assert oa["function"]["name"] == "recall"
    # query or evidence_id, either alone: neither is required by the schema
    assert oa["function"]["parameters"]["required"] == []
    (an,) = box.schemas("anthropic")
    assert set(an["input_schema"]["properties"]) == {
        "query",
        "k",
        "evidence_id",
        "max_chars",
        "offset",
    }


def test_query_returns_ranked_hits_with_text(tmp_path: Path) -> None:
    box, _, _ = setup(tmp_path)
    text, is_error = box.run("recall", {"query": "full error output of `python app.py`", "k": 2})
    assert not is_error
    assert (
        text.index("python app.py") < text.index("cat big.txt") if "cat big.txt" in text else True
    )
    assert "KeyError: 'token'" in text and "sha256 verified" in text


def test_fetch_by_id_with_paging(tmp_path: Path) -> None:
    box, _, search = setup(tmp_path)
    big = next(p for p in search.pointers() if p.command == "cat big.txt")
    text, is_error = box.run("recall", {"query": "", "evidence_id": big.id, "max_chars": 1000})
    assert not is_error
    assert "characters 0-1000 of 50000" in text and "offset=1000" in text
    assert text.endswith("z" * 1000)
    text, _ = box.run("recall", {"query": "", "evidence_id": big.id, "offset": 49_500})
    assert "characters 49500-50000 of 50000" in text and "more:" not in text


def test_evidence_id_alone_fetches_one_item_and_neither_is_a_clear_error(tmp_path: Path) -> None:
    box, _, search = setup(tmp_path)
    big = next(p for p in search.pointers() if p.command == "cat big.txt")
    text, is_error = box.run("recall", {"evidence_id": big.id, "max_chars": 500})
    assert not is_error and f"evidence {big.id}" in text and "characters 0-500 of 50000" in text
    text, is_error = box.run("recall", {})
    assert is_error and "give query (what to look for) or evidence_id" in text
    text, is_error = box.run("recall", {"k": 2})
    assert is_error and "give query" in text


def test_bad_input_gives_clear_errors(tmp_path: Path) -> None:
    box, _, _ = setup(tmp_path)
    text, is_error = box.run("recall", {"query": "x", "evidence_id": "ev-nope"})
    assert is_error and "no evidence with id 'ev-nope'" in text and "Recent ids" in text
    text, is_error = box.run("recall", {"query": "x", "k": 50})
    assert is_error and "between 1 and 10" in text
    text, is_error = box.run("recall", {"query": "   "})
    assert is_error and "query is empty" in text
    text, is_error = box.run("recall", {"query": "x", "bogus": 1})
    assert is_error and "unknown argument" in text
    text, is_error = box.run("recall", '{"query": "nothing-like-this-anywhere"}')
    assert not is_error and text.startswith("No evidence matches")


def test_long_hits_are_truncated_with_a_pointer_to_the_full_text(tmp_path: Path) -> None:
    box, _, _ = setup(tmp_path)
    text, _ = box.run("recall", {"query": "cat big.txt", "k": 1, "max_chars": 2000})
    assert "truncated; recall with evidence_id=" in text and len(text) < 4000
