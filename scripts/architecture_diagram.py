"""The package import graph of contextfold as a Mermaid diagram (docs/ARCHITECTURE.md).

Every module under ``src/contextfold`` is read with :mod:`ast` (imports at run time and under
``TYPE_CHECKING`` alike) and placed in its layer: its folder (:data:`LAYER_OF` groups the few modules at the top
of the package). An arrow ``A --> B`` means some
module of layer A imports one of layer B.

    python scripts/architecture_diagram.py          # print the Mermaid block
    python scripts/architecture_diagram.py --check  # exit 1 when the doc's block differs
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "contextfold"
DOC = ROOT / "docs" / "ARCHITECTURE.md"
BEGIN, END = "<!-- diagram:begin -->", "<!-- diagram:end -->"

#: folder (or module at the top of the package) -> layer: every folder is its own layer
LAYER_OF = {
    **{path.stem: "testing" for path in PACKAGE.glob("testing*.py")},
    "__main__": "cli",
}
#: layers from the bottom up (the order of the diagram; the import-linter contract's, reversed)
ORDER = [
    "jsontypes",
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


def layer(module: str) -> str | None:
    """The layer of ``contextfold.<module>`` (None for the package's own ``__init__``)."""
    head = module.split(".")[0]
    if head == "__init__":
        return None
    return LAYER_OF.get(head, head)


def _imports(path: Path, module: str) -> set[str]:
    """The contextfold modules ``path`` imports (relative to the package)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("contextfold."):
                    out.add(alias.name.split(".", 1)[1])
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                if node.module and node.module.startswith("contextfold."):
                    out.add(node.module.split(".", 1)[1])
                continue
            base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
            target = [*base, *(node.module.split(".") if node.module else [])]
            if target:
                out.add(".".join(target))
            else:  # "from . import x": the names that are modules of the package
                out.update(a.name for a in node.names if _is_module(a.name))
    return out


def _is_module(name: str) -> bool:
    return (PACKAGE / f"{name}.py").is_file() or (PACKAGE / name / "__init__.py").is_file()


def upward() -> list[tuple[str, str]]:
    """(module, imported module) of every import from a lower layer into a higher one."""
    rank = {name: i for i, name in enumerate(ORDER)}
    out = []
    for module, path in _modules():
        src = layer(module)
        for target in sorted(_imports(path, _as_importer(module, path))):
            dst = layer(target)
            if src and dst and rank.get(src, 99) < rank.get(dst, 99):
                out.append((module, target))
    return out


def _modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        if module.endswith(".__init__"):
            module = module[: -len(".__init__")]
        if module != "__init__":
            out.append((module, path))
    return out


def _as_importer(module: str, path: Path) -> str:
    """The name relative imports resolve against (a package's ``__init__`` is inside it)."""
    return module + ".__init__" if path.name == "__init__.py" else module


def edges() -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for module, path in _modules():
        src = layer(module)
        for target in _imports(path, _as_importer(module, path)):
            dst = layer(target)
            if src is not None and dst is not None and dst != src:
                found.add((src, dst))
    return found


def render() -> str:
    """The Mermaid block (fenced), layers bottom-up, arrows sorted."""
    rank = {name: i for i, name in enumerate(ORDER)}
    found = edges()
    names = sorted({n for e in found for n in e}, key=lambda n: (rank.get(n, 99), n))
    lines = ["```mermaid", "flowchart BT"]
    lines += [f"  {n}[{n}/]" for n in names]
    for src, dst in sorted(found, key=lambda e: (rank.get(e[0], 99), rank.get(e[1], 99), e)):
        style = "-.->" if rank.get(src, 99) < rank.get(dst, 99) else "-->"
        lines.append(f"  {src} {style} {dst}")
    lines.append("```")
    return "\n".join(lines)


def documented() -> str:
    text = DOC.read_text(encoding="utf-8")
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with docs/ARCHITECTURE.md")
    parser.add_argument("--upward", action="store_true", help="list the upward imports")
    args = parser.parse_args(argv)
    if args.upward:
        for module, target in upward():
            print(f"{module} ({layer(module)}) -> {target} ({layer(target)})")
        return 0
    block = render()
    if not args.check:
        print(block)
        return 0
    if documented() != block:
        print(
            "docs/ARCHITECTURE.md's diagram is not the code's: run "
            "python scripts/architecture_diagram.py and paste its output between the markers",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
