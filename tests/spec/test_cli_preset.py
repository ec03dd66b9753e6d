"""The command line takes the spec preset: `contextfold compact --preset spec` prints the
design notes' Chinese notice (ProgressiveCompactor note, section 5.4)."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr
from pathlib import Path

from contextfold.cli import main

from .helpers import NEWEST, SYSTEM, TASK, turns


def test_compact_preset_spec_prints_the_chinese_notice(tmp_path: Path) -> None:
    """Section 5.4 through the CLI: `--preset spec` compacts with the notes' preset."""
    src = tmp_path / "t.json"
    src.write_text(json.dumps([SYSTEM, TASK, *turns(30, chars=1_000), NEWEST]), encoding="utf-8")
    err = io.StringIO()
    with redirect_stderr(err):
        code = main(
            [
                "compact",
                str(src),
                "--window",
                "10000",
                "--preset",
                "spec",
                "-o",
                str(tmp_path / "v.json"),
            ]
        )
    assert code == 0
    assert "⚡ 上下文压缩 [" in err.getvalue()
