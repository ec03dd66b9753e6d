"""Outputs classified and anchored ahead: indexing them later scans nothing again and gives
the pointers that indexing from scratch gives."""

from __future__ import annotations

import importlib
import json
import uuid
from pathlib import Path

import pytest

from contextfold.core import textmemo
from contextfold.core.messages import Message, ToolCall, assistant, tool, user
from contextfold.evidence.store import EvidenceStore
from contextfold.evidence.warm import warm
from contextfold.storage import open_store
from contextfold.storage.session import SessionStore
from tests.evidence.evidence_helpers import index_block

classify_module = importlib.import_module("contextfold.evidence.classify")


def _messages() -> list[Message]:
    tag = uuid.uuid4().hex  # texts no earlier test has remembered
    trace = "\n".join(
        [f"run {tag}", "Traceback (most recent call last):", '  File "/repo/app.py", line 4']
        + [f"    step_{i}()" for i in range(60)]
        + ["ValueError: input too long: 10 > 8"]
    )
    call = ToolCall(id="c1", name="bash", arguments=json.dumps({"command": "python app.py"}))
    return [
        user("Fix the app."),
        assistant("Running it.", [call]),
        tool("c1", trace),
        assistant("", [ToolCall(id="c2", name="bash", arguments='{"command": "ls"}')]),
        tool("c2", f"{tag}\n" + "\n".join(f"file_{i}.py" for i in range(80))),
    ]


def _pointers(tmp: Path, msgs: list[Message]) -> list[tuple[object, ...]]:
    store = EvidenceStore(SessionStore(open_store(str(tmp)), "s", "a"))
    block = index_block(store, msgs)
    return [(p.content_types, p.anchors, p.command) for p in block.evidence]


def test_warm_outputs_are_indexed_without_scanning_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    msgs = _messages()
    fresh = _pointers(tmp_path / "fresh", msgs)
    textmemo.clear()
    assert warm(msgs) == 2
    scanned: list[str] = []
    real = classify_module._scan_text
    monkeypatch.setattr(
        classify_module, "_scan_text", lambda text: scanned.append(text) or real(text)
    )
    assert _pointers(tmp_path / "warm", msgs) == fresh
    assert not [t for t in scanned if "Traceback" in t or "file_79.py" in t]


def test_warm_stops_when_asked() -> None:
    textmemo.clear()
    assert warm(_messages(), stop=lambda: True) == 0
