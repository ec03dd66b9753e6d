"""Acceptance: replay every real trajectory turn by turn at a 32,000-token window."""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from contextfold import ContextManager
from contextfold.core.messages import check_view
from contextfold.core.tokens import BpeCounter, count_message
from contextfold.core.wire import from_anthropic, from_openai, to_anthropic
from tests.conftest import load_trace, trace_files
from tests.support.store_helpers import blob

WINDOW = 32_000
EXACT = BpeCounter("o200k_base")
_exact_cache: dict[str, int] = {}


def exact_tokens(view: list[dict[str, Any]]) -> int:
    total = 0
    for d in view:
        key = json.dumps(d, sort_keys=True, ensure_ascii=False)
        if key not in _exact_cache:
            _exact_cache[key] = count_message(EXACT, from_openai(d))
        total += _exact_cache[key]
    return total


def check_anthropic(view: list[dict[str, Any]]) -> None:
    msgs = [from_openai(d, i) for i, d in enumerate(view)]
    system, out = to_anthropic(msgs)
    roles = [m["role"] for m in out]
    assert all(a != b for a, b in itertools.pairwise(roles)), "Anthropic roles must alternate"
    assert roles and roles[0] == "user"
    check_view(from_anthropic(out, system))


@pytest.mark.slow
@pytest.mark.parametrize("path", trace_files(), ids=lambda p: p.name[:60])
def test_replay_trace_at_32k(path: Path, tmp_path: Path) -> None:
    data = load_trace(path)
    cm = ContextManager(workspace=tmp_path, session_id="replay", context_window=WINDOW)
    first_user = next(m for m in data if m["role"] == "user")
    newest_user: dict[str, Any] | None = None
    views = 0
    for i, msg in enumerate(data):
        if msg["role"] == "assistant" and i > 0:
            view = cm.prepare()
            views += 1
            check_view([from_openai(d, j) for j, d in enumerate(view)])
            check_anthropic(view)
            assert view[0] == data[0], "system prompt must stay verbatim"
            assert first_user in view, "first user message must stay verbatim"
            assert newest_user in view, "newest user message must stay verbatim"
            assert exact_tokens(view) <= WINDOW, f"view over the window at message {i}"
            again = cm.prepare()
            assert again == view, "prepare() must be deterministic when nothing changed"
        cm.add(msg)
        if msg["role"] == "user":
            newest_user = msg
    assert views > 0
    # the history is intact and every offloaded output is byte-exact on disk
    assert [m.uuid for m in cm.history] == [
        m.uuid
        for m in ContextManager(
            workspace=tmp_path, session_id="replay", context_window=WINDOW
        ).history
    ]
    originals = {m.tool_call_id: m.text for m in cm.history if m.tool_call_id}
    by_uuid = {m.uuid: m for m in cm.history}
    for call_id, entry in cm.offloaded().items():
        raw = blob(tmp_path, entry.sha256)
        assert hashlib.sha256(raw).hexdigest() == entry.sha256
        text = raw.decode("utf-8", "surrogatepass")
        if call_id.startswith("args-"):  # long arguments of a stale call, stored whole
            calls = by_uuid[call_id.removeprefix("args-")].tool_calls
            assert json.loads(text) == [
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls
            ]
        else:
            assert text == originals[call_id]
