"""docs/ARCHITECTURE.md's diagram is the code's import graph, and no module imports its caller
(the facade) back for type checking."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "contextfold"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "architecture_diagram", ROOT / "scripts" / "architecture_diagram.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_documented_diagram_is_the_code_import_graph() -> None:
    script = _script()
    block = script.render()
    assert block.startswith("```mermaid\nflowchart BT")
    assert "  engine --> compaction" in block  # the engine runs the compaction pipeline
    assert "  gateway --> engine" in block
    assert script.documented() == block, (
        "run python scripts/architecture_diagram.py and paste it into docs/ARCHITECTURE.md"
    )
    assert script.main(["--check"]) == 0


def test_the_diagram_marks_upward_imports() -> None:
    script = _script()
    ups = script.upward()
    rank = {name: i for i, name in enumerate(script.ORDER)}
    for module, target in ups:
        assert rank[script.layer(module)] < rank[script.layer(target)]
    block = script.render()
    for module, target in ups:
        assert f"  {script.layer(module)} -.-> {script.layer(target)}" in block


def _type_checking_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom) and inner.module:
                    out.append(inner.module)
    return out


def test_no_module_imports_the_manager_back_for_type_checking() -> None:
    offenders = [
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if path.name != "__init__.py"
        and any(m.split(".")[-1] == "manager" for m in _type_checking_imports(path))
    ]
    assert offenders == []
