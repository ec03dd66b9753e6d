"""The session of tests/evidence/test_evidence_semantic.py, and what it runs in a fresh interpreter:
index the session, ask, and say which heavy modules got imported."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from contextfold.core.messages import Message, ToolCall
from contextfold.evidence import semantic
from contextfold.evidence.search import EvidenceSearch
from contextfold.evidence.store import EvidenceStore
from contextfold.storage import open_store
from contextfold.storage.session import SessionStore
from tests.evidence.evidence_helpers import index_block

HEAVY = ("numpy", "tokenizers", "safetensors", "torch", "sentence_transformers")


LISTING = (
    "total 48\ndrwxr-xr-x 2 root root 4096 Jan 1 .\n-rw-r--r-- 1 root root 120 setup.py\n"
    "-rw-r--r-- 1 root root 80 README.rst\ndrwxr-xr-x 3 root root 4096 Jan 1 pkg"
)
LINT = (
    "pkg/config.py:3:1: E302 expected 2 blank lines, found 1\n"
    "pkg/config.py:9:80: E501 line too long (88 > 79 characters)"
)
COUNT = "  120 pkg/config.py\n  300 pkg/app.py\n  420 total"
SOURCE = "import os\n\ndef parse_config(path):\n    return open(path).read()\n"


def _turn(call_id: str, command: str, output: str) -> list[Message]:
    call = ToolCall(id=call_id, name="bash", arguments=json.dumps({"command": command}))
    return [
        Message(role="assistant", tool_calls=(call,)),
        Message(role="tool", tool_call_id=call_id, content=output),
    ]


def session_messages() -> list[Message]:
    msgs: list[Message] = []
    msgs += _turn("c1", "ls -la /testbed", LISTING)
    msgs += _turn("c2", "flake8 pkg/config.py", LINT)
    msgs += _turn("c3", "wc -l pkg/*.py", COUNT)
    msgs += _turn("c4", "python reproduce.py", "result: 42\nok")
    msgs += _turn("c5", "cat reproduce.py", "from pkg.config import parse_config\nprint(42)\n")
    msgs += _turn("c6", "python reproduce.py --again", "result: 43\nok")
    return msgs


def index_and_ask(ws: str) -> dict[str, object]:
    store = EvidenceStore(SessionStore(open_store(str(Path(ws))), "s", "a"))
    index_block(store, session_messages())
    hits = EvidenceSearch(store).search("What came out when you launched reproduce.py?", k=3)
    return {
        "hits": [h.pointer.tool_use_id for h in hits],
        "vectors": len(store.session.store.docs(semantic.NAMESPACE)),
        "imported": [m for m in HEAVY if m in sys.modules],
    }
