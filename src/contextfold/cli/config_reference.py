"""The configuration reference (``docs/configuration.md``), generated from the config classes.

Each field with its type, its default and the ``#:`` comment above it in the source.
``python -m contextfold.cli.config_reference > docs/configuration.md`` writes it; a test checks
that the file in the repository is what the classes say.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from typing import Any

HEADER = """# Configuration reference

Generated from the config classes (`python -m contextfold.cli.config_reference >
docs/configuration.md`). `ContextManager(config=...)` takes a `ContextConfig` (presets:
`contextfold.progressive()`, `contextfold.harness()`, `contextfold.core.config.spec()`); `contextfold serve` takes a
`GatewayConfig` from its flags, a TOML file (`--config`) or `CONTEXTFOLD_GATEWAY_*` variables.
"""


def _comments(cls: type) -> dict[str, str]:
    """field name -> the ``#:`` comment lines right above it in the class body."""
    source = textwrap.dedent(inspect.getsource(cls))
    lines = source.splitlines()
    out: dict[str, str] = {}
    for node in ast.parse(source).body[0].body:  # type: ignore[attr-defined]
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        above: list[str] = []
        k = node.lineno - 2
        while k >= 0 and lines[k].strip().startswith("#:"):
            above.insert(0, lines[k].strip()[2:].strip())
            k -= 1
        out[node.target.id] = " ".join(above)
    return out


def _default(f: dataclasses.Field[Any]) -> str:
    if f.default is not dataclasses.MISSING:
        value: Any = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
        if dataclasses.is_dataclass(value):
            return f"`{type(value).__name__}()`"
    else:
        return "(required)"
    return f"`{value!r}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def section(cls: type) -> str:
    """One class: its docstring's first paragraph and a table of its fields."""
    doc = (inspect.getdoc(cls) or "").split("\n\n", 1)[0].replace("\n", " ")
    notes = _comments(cls)
    rows = []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        note = notes.get(f.name, "")
        nested = [w for w in str(f.type).replace("|", " ").split() if w.endswith("Config")]
        if not note and nested:
            note = f"see `{nested[0]}` below"
        rows.append(
            f"| `{f.name}` | `{_cell(str(f.type))}` | {_cell(_default(f))} | {_cell(note)} |"
        )
    table = "| field | type | default | what |\n| --- | --- | --- | --- |\n" + "\n".join(rows)
    return f"## `{cls.__name__}`\n\n{doc}\n\n{table}\n"


def render() -> str:
    from ..core import config
    from ..gateway.config import GatewayConfig

    classes: list[type] = [
        config.ContextConfig,
        config.TierConfig,
        config.SummaryTriggerConfig,
        config.EvictionConfig,
        config.TruncateArgsConfig,
        config.RecoveryConfig,
        GatewayConfig,
    ]
    return "\n".join([HEADER, *(section(c) for c in classes)])


if __name__ == "__main__":
    print(render(), end="")
