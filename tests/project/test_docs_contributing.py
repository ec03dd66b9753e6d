"""docs/CONTRIBUTING.md speaks to outside contributors and names only what exists."""

from __future__ import annotations

import re

from tests.conftest import REPO_ROOT

TEXT = (REPO_ROOT / "docs" / "CONTRIBUTING.md").read_text(encoding="utf-8")


def test_every_make_target_and_path_it_names_exists() -> None:
    makefile = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z-]+):", makefile, re.M))
    named = set(re.findall(r"make ([a-z-]+)", TEXT))
    assert named and named <= targets, named - targets
    paths = set(re.findall(r"`((?:src|tests|benchmarks|examples|docs|\.ci)/[^`* ]*)`", TEXT))
    assert len(paths) >= 8
    for path in paths:
        clean = path.split(" ")[0].rstrip("/")
        if "<" in clean or "*" in clean:
            continue
        assert (REPO_ROOT / clean).exists(), path


def test_no_rules_for_a_shared_checkout() -> None:
    for phrase in ("the lead", "../shared", "only edit the files you own", "git add"):
        assert phrase not in TEXT
