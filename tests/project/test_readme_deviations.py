"""docs/design-notes-deviations.md ("Where the default differs from the design notes") matches the code:
each setting it names differs between the default and the spec preset and has the stated
value in the spec preset, and every difference between the two presets is in the table."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path
from typing import Any

from contextfold.core.config import ContextConfig, progressive, spec

DEVIATIONS = Path(__file__).resolve().parents[2] / "docs" / "design-notes-deviations.md"
SECTION = "# Where the default differs from the design notes"


def _rows() -> list[list[str]]:
    text = DEVIATIONS.read_text(encoding="utf-8")
    assert SECTION in text
    body = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in body.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| what | why | setting that restores the notes |")
    return [[c.strip() for c in r.strip("|").split(" | ")] for r in rows[2:]]


def _settings() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for row in _rows():
        assert len(row) == 3 and all(row), row
        found = re.findall(r"`([a-z_.]+)=([^`]+)`", row[2])
        assert found, f"row names no setting: {row[0]}"
        for path, value in found:
            out[path] = ast.literal_eval(value)
    return out


def _get(cfg: ContextConfig, path: str) -> Any:
    obj: Any = cfg
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _differences(a: Any, b: Any, prefix: str = "") -> set[str]:
    out: set[str] = set()
    for f in dataclasses.fields(a):
        if f.name == "preset":
            continue
        x, y = getattr(a, f.name), getattr(b, f.name)
        path = prefix + f.name
        if dataclasses.is_dataclass(x) and dataclasses.is_dataclass(y):
            out |= _differences(x, y, path + ".")
        elif x != y:
            out.add(path)
    return out


def test_each_setting_restores_the_notes_value_in_the_spec_preset() -> None:
    default, notes = progressive(), spec()
    for path, value in _settings().items():
        assert _get(notes, path) == value, f"{path}: spec has {_get(notes, path)!r}"
        assert _get(default, path) != value, f"{path}: the default already has {value!r}"


def test_every_difference_of_the_presets_is_in_the_table() -> None:
    assert _differences(progressive(), spec()) == set(_settings())


def test_each_row_alone_switches_its_behaviour() -> None:
    """The settings of one row, applied to the default, change only what that row names."""
    for row in _rows():
        found = {p: ast.literal_eval(v) for p, v in re.findall(r"`([a-z_.]+)=([^`]+)`", row[2])}
        cfg = progressive()
        tiers = {p.split(".", 1)[1]: v for p, v in found.items() if p.startswith("tiers.")}
        recovery = {p.split(".", 1)[1]: v for p, v in found.items() if p.startswith("recovery.")}
        top = {p: v for p, v in found.items() if "." not in p}
        changes: dict[str, Any] = dict(top)
        if tiers:
            changes["tiers"] = dataclasses.replace(cfg.tiers, **tiers)
        if recovery:
            changes["recovery"] = dataclasses.replace(cfg.recovery, **recovery)
        assert _differences(cfg, cfg.with_(**changes)) == set(found), row[0]
