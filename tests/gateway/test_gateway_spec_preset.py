"""`contextfold serve --preset spec`: the gateway compacts with the design notes' preset
(real HTTP through the gateway to a scripted upstream)."""

from __future__ import annotations

from pathlib import Path

from contextfold import ContextManager
from contextfold.cli import build_parser
from contextfold.core.records import Tier
from contextfold.gateway.cli import config_from_args
from tests.gateway.gateway_helpers import long_trace, running
from tests.gateway.test_gateway_openai import _check_upstream, _client, replay
from tests.support.store_helpers import session_ids


def test_serve_accepts_preset_spec(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        ["serve", "--upstream", "http://127.0.0.1:9", "--store", str(tmp_path), "--preset", "spec"]
    )
    assert config_from_args(args).preset == "spec"


def test_gateway_with_preset_spec_compacts_at_the_notes_thresholds(tmp_path: Path) -> None:
    trace = long_trace(40)
    limit = 12_000
    with running(tmp_path, limit=limit, context_window=10_000, preset="spec") as (fake, gw):
        replay(fake, _client(gw.url), trace, stream=False, script="trace")
    _check_upstream(fake, limit)
    (sid,) = session_ids(tmp_path / "ws")
    cm = ContextManager(tmp_path / "ws", session_id=sid, context_window=10_000, preset="spec")
    records = [r for r in cm.records() if r.tier is not Tier.NONE]
    assert records, "the session compacted"
    for r in records:
        assert r.window == 10_000
        assert r.tokens_before >= 0.60 * r.window  # no compaction below the Warn line
    assert cm.notification(records[0]).startswith("⚡ 上下文压缩 [")
