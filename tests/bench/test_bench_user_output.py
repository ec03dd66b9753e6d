"""``contextfold bench`` on a user's own traces: a table that reads, no development targets
judged on traces they were not defined on, progress in a log, HTML labels that fit."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from contextfold.bench.cli import main
from contextfold.bench.report_html import bars_svg
from contextfold.bench.strategies import ALL_STRATEGIES
from tests.conftest import trace_files


def _smallest_trace() -> Path:
    return min(trace_files(), key=lambda p: p.stat().st_size)


def test_own_traces_get_a_readable_table_and_no_targets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--traces", str(_smallest_trace()), "--strategies", "raw,mask,progressive"]
    argv += ["--window", "8000", "--no-recall", "--no-html", "--plain", "--out", str(tmp_path)]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "[MISSED]" not in out and "[met]" not in out and "targets" not in out
    header = next(line for line in out.splitlines() if line.startswith("strategy"))
    assert "cache-aware cost" in header and "recoverable %" in header
    assert max(len(line) for line in out.splitlines() if not line.startswith("input")) <= 140
    assert "cache-aware cost: the same, cached prefix tokens" in out  # the legend
    # stderr is not a terminal here: a first line at once, then lines as runs finish
    assert err.splitlines()[0].startswith("contextfold bench: replaying 1 trajectories x 3")
    assert re.search(r"^\[3/3\] ", err, re.M)


def test_targets_on_request_and_every_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--traces", str(_smallest_trace()), "--strategies", "raw,progressive", "--targets"]
    argv += ["--window", "8000", "--no-recall", "--no-html", "--plain", "--all-columns"]
    assert main([*argv, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "development targets" in out and "progressive: 0 overflows" in out
    assert "p95 ms" in out


def test_html_bar_labels_fit_left_of_the_bars() -> None:
    svg = bars_svg({s: 1000.0 * (i + 1) for i, s in enumerate(ALL_STRATEGIES)}, "t", ALL_STRATEGIES)
    labels = re.findall(r'<text x="([\d.]+)"[^>]*text-anchor="end">([^<]+)</text>', svg)
    assert sorted(name for _, name in labels) == sorted(ALL_STRATEGIES)
    for x, name in labels:
        assert float(x) - len(name) * 12 * 0.6 >= 0, name  # 12 px text, right-aligned at x


def test_without_the_tokenizer_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    from contextfold.bench import replay
    from contextfold.cli import main as cli_main

    monkeypatch.setitem(sys.modules, "bpe_openai", None)  # as if not installed
    monkeypatch.setattr(replay, "_COUNTER", None)
    argv = ["bench", "--traces", str(_smallest_trace()), "--strategies", "raw", "--no-recall"]
    code = cli_main([*argv, "--no-html", "--no-progress", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "pip install '.[tokenizers]'" in err and "Traceback" not in err
