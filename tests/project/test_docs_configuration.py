"""docs/configuration.md is what the config classes say (regenerate:
python -m contextfold.cli.config_reference > docs/configuration.md)."""

from __future__ import annotations

import dataclasses

from contextfold.cli.config_reference import render
from contextfold.core import config
from tests.conftest import REPO_ROOT


def test_the_configuration_reference_matches_the_classes() -> None:
    written = (REPO_ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert written == render(), (
        "docs/configuration.md is stale: python -m contextfold.cli.config_reference > "
        "docs/configuration.md"
    )


def test_every_field_and_its_default_is_listed() -> None:
    text = render()
    for f in dataclasses.fields(config.TierConfig):
        assert f"| `{f.name}` |" in text and f"`{f.default!r}`" in text
