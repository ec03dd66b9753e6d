"""The CLI reference (``docs/cli.md``), generated from the argparse parsers.

``python -m contextfold.cli.reference > docs/cli.md`` writes it; a test checks that the file in
the repository is what the parsers say.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

HEADER = """# Command line reference

Generated from the parsers (`python -m contextfold.cli.reference > docs/cli.md`); every
command's `--help` prints the same.
"""


def _children(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def _walk(
    parser: argparse.ArgumentParser, name: str
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield name, parser
    for child_name, child in _children(parser):
        yield from _walk(child, f"{name} {child_name}")


def _help_text(parser: argparse.ArgumentParser, prog: str) -> str:
    # a fixed width, so the file does not depend on the terminal that generated it
    parser.prog = prog
    kind = parser.formatter_class
    parser.formatter_class = lambda prog: kind(prog, width=100)  # type: ignore[call-arg]
    return parser.format_help().rstrip()


def render() -> str:
    """The whole reference, as Markdown."""
    from ..bench.cli import build_parser as bench_parser
    from . import build_parser

    parts = [HEADER]
    for name, parser in _walk(build_parser(), "contextfold"):
        if not parser.add_help:  # the `bench` stub: its own parser follows
            continue
        parts.append(f"## `{name}`\n\n```text\n{_help_text(parser, name)}\n```\n")
    parts.append(
        f"## `contextfold bench`\n\n```text\n{_help_text(bench_parser(), 'contextfold bench')}\n```\n"
    )
    return "\n".join(parts)


if __name__ == "__main__":
    print(render(), end="")
