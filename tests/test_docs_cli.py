"""docs/cli.md is what the parsers say (regenerate: python -m contextfold.cli.reference)."""

from __future__ import annotations

import re
import sys

from contextfold.cli.reference import render
from tests.conftest import REPO_ROOT

DOC = REPO_ROOT / "docs" / "cli.md"


def test_the_cli_reference_matches_the_parsers() -> None:
    written, current = DOC.read_text(encoding="utf-8"), render()
    if sys.version_info[:2] in ((3, 11), (3, 12)):  # the argparse layout it was generated with
        assert written == current, "docs/cli.md is stale: python -m contextfold.cli.reference"
        return

    # other Pythons lay help out a little differently: the same commands and options
    def shape(text: str) -> tuple[list[str], set[str]]:
        return re.findall(r"^## `(.+)`$", text, re.M), set(re.findall(r"--[a-z][a-z-]+", text))

    assert shape(written) == shape(current)
