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


def test_the_readme_command_lines_parse() -> None:
    """Every line of the README's "Command line" block is a valid invocation."""
    import shlex

    from contextfold.cli import build_parser

    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Command line\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    lines = [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]
    assert len(lines) >= 6
    for line in lines:
        argv = shlex.split(line)
        assert argv[0] == "contextfold", line
        parsed = build_parser().parse_args(argv[1:])
        assert parsed.command == argv[1], line
