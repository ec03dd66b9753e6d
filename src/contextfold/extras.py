"""How to install an optional part, in words that work.

contextfold is installed from its checkout (it is not on a package index), so asking an index
for ``contextfold`` with an extra finds nothing. Every "needs the X extra" message says instead: ``pip install '.[postgres]'`` in the checkout, or the extra's own packages, which are on
PyPI (read from the installed package's metadata, so they are the ones ``pyproject.toml``
names).
"""

from __future__ import annotations

import re
import shlex
from importlib import metadata

_EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def extra_requirements(extra: str) -> list[str]:
    """The requirements the installed contextfold lists for ``extra`` (empty when contextfold
    runs from a source folder without metadata, or the extra is unknown)."""
    try:
        listed = metadata.requires("contextfold") or []
    except metadata.PackageNotFoundError:
        return []
    out: list[str] = []
    for line in listed:
        requirement, _, marker = line.partition(";")
        found = _EXTRA_MARKER.search(marker)
        if found and found.group(1) == extra and not requirement.startswith("contextfold"):
            out.append(requirement.strip().replace(" ", ""))
    return out


def install_hint(extra: str) -> str:
    """``pip install '.[EXTRA]' in the contextfold checkout`` plus, when known, the extra's
    packages as one ``pip install`` line that works from anywhere."""
    hint = f"pip install '.[{extra}]' in the contextfold checkout"
    packages = extra_requirements(extra)
    if packages:
        hint += ", or: pip install " + " ".join(shlex.quote(p) for p in packages)
    return hint


def needs_extra(what: str, extra: str, cause: BaseException | None = None) -> str:
    """One error line: ``WHAT needs the EXTRA extra (HINT)``, with the import error's text."""
    line = f"{what} needs the {extra!r} extra ({install_hint(extra)})"
    return f"{line}: {cause}" if cause is not None else line


__all__ = ["extra_requirements", "install_hint", "needs_extra"]
