"""The steps after the move: the layers contract, the lint step, the architecture test, the
diagram's layer map and the docs' paragraphs on where a change goes."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: the layers, top to bottom ("|": siblings that must not import each other, ":": that may)
LAYERS = [
    "testing : testing_servers : testing_wire",
    "__main__",
    "cli",
    "gateway | bench | mcp",
    "inspector | integrations | metrics",
    "engine",
    "recovery",
    "evidence",
    "compaction",
    "providers",
    "core",
    "storage",
    "errors | extras",
]

CONTRACT = """
[tool.importlinter]
root_package = "contextfold"

[[tool.importlinter.contracts]]
# a folder imports only folders below it; imports under TYPE_CHECKING count too
name = "layers"
type = "layers"
containers = ["contextfold"]
layers = [
{layers}
]
"""

LAYER_OF = """#: folder (or module at the top of the package) -> layer: every folder is its own layer
LAYER_OF = {
    **{path.stem: "testing" for path in PACKAGE.glob("testing*.py")},
    "__main__": "cli",
}
#: layers from the bottom up (the order of the diagram; the import-linter contract's, reversed)
ORDER = [
    "errors",
    "extras",
    "storage",
    "core",
    "providers",
    "compaction",
    "evidence",
    "recovery",
    "engine",
    "metrics",
    "integrations",
    "inspector",
    "mcp",
    "bench",
    "gateway",
    "cli",
    "testing",
]
"""


def _section(text: str, heading: str, body: str) -> str:
    """``text`` with the section under ``heading`` (up to the next heading) replaced."""
    pattern = re.compile(rf"(^{re.escape(heading)}\n)(.*?)(?=^#{{1,3}} |\Z)", re.M | re.S)
    if not pattern.search(text):
        print(f"relayout: no section {heading!r}: left as it is", file=sys.stderr)
        return text
    return pattern.sub(lambda m: m.group(1) + "\n" + body.strip("\n") + "\n\n", text, count=1)


def pyproject(root: Path) -> None:
    path = root / "pyproject.toml"
    text = path.read_text(encoding="utf-8")
    if "[tool.importlinter]" not in text:
        testing = " : ".join(
            sorted(p.stem for p in (root / "src" / "contextfold").glob("testing*.py"))
        )
        layers = "\n".join(f'  "{testing if i == 0 else layer}",' for i, layer in enumerate(LAYERS))
        text = text.rstrip("\n") + "\n" + CONTRACT.format(layers=layers)
    # tests/mcp is a folder of tests, not the MCP SDK
    text = text.replace('known-third-party = ["agents"]', 'known-third-party = ["agents", "mcp"]')
    path.write_text(text, encoding="utf-8")


def makefile(root: Path) -> None:
    path = root / "Makefile"
    text = path.read_text(encoding="utf-8")
    if "lint-imports" not in text:
        text = text.replace(
            "\t$(PY) scripts/architecture_diagram.py --check\n",
            "\t$(PY) scripts/architecture_diagram.py --check\n\t$(BIN)/lint-imports\n",
            1,
        )
    path.write_text(text, encoding="utf-8")


def architecture_test(root: Path) -> None:
    target = root / "tests" / "project" / "test_architecture.py"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(HERE / "test_architecture.py", target)
    subprocess.run(["git", "add", str(target)], cwd=root, check=True)


def diagram(root: Path) -> None:
    script = root / "scripts" / "architecture_diagram.py"
    text = script.read_text(encoding="utf-8")
    start = text.index("#: folder (or top-level module)")
    end = text.index("\ndef layer(")
    text = text[:start] + LAYER_OF + "\n" + text[end:]
    text = text.replace(
        "placed in its layer: its folder, or for a module still at the top\nof the package the "
        "layer it belongs to (:data:`LAYER_OF`).",
        "placed in its layer: its folder (:data:`LAYER_OF` groups the few modules at the top\n"
        "of the package).",
    )
    script.write_text(text, encoding="utf-8")
    block = subprocess.run(
        [sys.executable, str(script)], cwd=root, check=True, capture_output=True, text=True
    ).stdout.strip()
    doc = root / "docs" / "ARCHITECTURE.md"
    text = doc.read_text(encoding="utf-8")
    text = _section(text, "## Layers (bottom up)", (HERE / "layers.md").read_text("utf-8"))
    text = _section(text, "## Where a change goes", (HERE / "changes.md").read_text("utf-8"))
    begin, end_marker = "<!-- diagram:begin -->", "<!-- diagram:end -->"
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end_marker, 1)
    text = f"{head}{begin}\n{block}\n{end_marker}{tail}"
    doc.write_text(text, encoding="utf-8")


def contributing(root: Path) -> None:
    doc = root / "docs" / "CONTRIBUTING.md"
    text = doc.read_text(encoding="utf-8")
    text = _section(text, "## Where things go", (HERE / "where.md").read_text("utf-8"))
    text = text.replace("`tests/test_gateway_*.py`", "in `tests/gateway/`")
    text = text.replace(
        "make lint        # ruff check + ruff format --check\n",
        "make lint        # ruff check, ruff format --check, the layers contract (lint-imports)\n",
    )
    doc.write_text(text, encoding="utf-8")


def run(root: Path) -> None:
    pyproject(root)
    makefile(root)
    architecture_test(root)
    diagram(root)
    contributing(root)
