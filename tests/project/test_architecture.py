"""The package's layers hold: no import cycle between folders (imports under ``TYPE_CHECKING``
counted too) and no module over 500 lines. ``make lint`` checks the layer order itself with
import-linter (``[tool.importlinter]`` in pyproject.toml)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "contextfold"
MAX_LINES = 500


def _modules() -> dict[str, tuple[Path, bool]]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return out


def _imported(path: Path, module: str, is_package: bool, known: set[str]) -> set[str]:
    """Every contextfold module ``path`` imports, at run time or under ``TYPE_CHECKING``."""
    package = (module if is_package else module.rpartition(".")[0]).split(".")
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join([*base, *([node.module] if node.module else [])])
            out.add(target)
            out.update(f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in known)
    return {m for m in out if m in known}


def _folder(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _folder_graph() -> dict[str, dict[str, list[str]]]:
    """folder -> folder it imports -> the imports (``a -> b``) that make the arrow."""
    modules = _modules()
    known = set(modules)
    graph: dict[str, dict[str, list[str]]] = {}
    for module, (path, is_package) in modules.items():
        if module == "contextfold":
            continue  # the package's lazy re-exports of the public names
        for target in _imported(path, module, is_package, known):
            src, dst = _folder(module), _folder(target)
            if target != "contextfold" and src != dst:
                graph.setdefault(src, {}).setdefault(dst, []).append(f"{module} -> {target}")
    return graph


def _cycles(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """The strongly connected components of more than one folder (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, {}):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_between_folders() -> None:
    graph = _folder_graph()
    assert graph, "no imports found: is PACKAGE right?"
    problems = []
    for group in _cycles(graph):
        members = set(group)
        for src in group:
            for dst, imports in sorted(graph.get(src, {}).items()):
                if dst in members:
                    problems.append(f"{src} -> {dst}: {', '.join(sorted(imports)[:3])}")
    assert not problems, "import cycles between folders:\n" + "\n".join(problems)


def test_no_module_over_500_lines() -> None:
    long = {
        str(path.relative_to(PACKAGE.parent)): n
        for path, _ in _modules().values()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines (split them): {sorted(long.items())}"
