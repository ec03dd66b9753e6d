"""The wheel is complete: installed into a fresh virtual environment and run from a folder
outside the checkout, ``contextfold`` starts and ``contextfold bench`` finds its bundled traces."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"{cmd}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv holding only the wheel built from this checkout; its dependencies (the
    tokenizer the benchmark counts with) come from the running interpreter's site-packages."""
    tmp = tmp_path_factory.mktemp("wheel")
    # built from a copy of what the wheel is made of: nothing is written into the checkout
    # (and no stale build/ folder there can add files to it)
    source = tmp / "source"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "NOTICE"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(
        REPO / "src", source / "src", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__")
    )
    shutil.copytree(REPO / "benchmarks" / "traces", source / "benchmarks" / "traces")
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp), str(source)], tmp
    )
    wheel = next(tmp.glob("contextfold-*.whl"))
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp)
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q"]
    _run([*pip, "--no-deps", "--no-index", str(wheel)], tmp)
    site = Path(
        subprocess.check_output(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            text=True,
        ).strip()
    )
    # dependencies only: a plain path entry, so the host's editable contextfold is not added
    (site / "zz_host_deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return venv


def test_the_wheel_holds_every_module_of_the_package(installed: Path) -> None:
    """A folder of modules without ``__init__.py`` is not a package to setuptools and was left
    out of the wheel (``import contextfold`` then failed outside the checkout)."""
    site = next((installed / "lib").glob("python*/site-packages"))
    wanted = {
        p.relative_to(REPO / "src").as_posix()
        for p in (REPO / "src" / "contextfold").rglob("*.py")
        if "__pycache__" not in p.parts
    }
    have = {p.relative_to(site).as_posix() for p in (site / "contextfold").rglob("*.py")}
    assert wanted <= have, sorted(wanted - have)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CONTEXTFOLD_STORE")}
    code = "import contextfold.engine.manager, contextfold.cli; print(contextfold.engine.manager.__file__)"
    out = _run([str(installed / "bin" / "python"), "-I", "-c", code], site, env)
    assert str(installed) in out


def test_wheel_carries_the_traces_and_runs_outside_the_checkout(
    installed: Path, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CONTEXTFOLD_STORE")}
    exe = str(installed / "bin" / "contextfold")
    where = _run(
        [
            str(installed / "bin" / "python"),
            "-c",
            "import contextfold; print(contextfold.__file__)",
        ],
        tmp_path,
        env,
    )
    assert str(installed) in where  # the wheel's copy, not the checkout's
    assert "bundled" in _run([exe, "bench", "--help"], tmp_path, env)
    bench = [exe, "bench", "--limit", "1", "--strategies", "raw,progressive"]
    out = _run(
        [*bench, "--window", "16000", "--no-html", "--no-recall", "--out", str(tmp_path / "res")],
        tmp_path,
        env,
    )
    assert "1 trajectories" in out or "1 trajectory" in out
    assert (tmp_path / "res" / "results.json").is_file()
    assert not (tmp_path / "benchmarks").exists()


def test_every_install_line_in_the_docs_works_from_the_checkout() -> None:
    """``pip install 'contextfold[x]'`` finds nothing (the package is not on an index): the docs
    say ``pip install '.[x]'`` from the checkout, with extras that pyproject.toml defines."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    extras = set(
        tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    docs = [
        REPO / "README.md",
        *sorted((REPO / "docs").rglob("*.md")),
        *sorted((REPO / "examples").rglob("*")),
    ]
    seen = 0
    for path in docs:
        if not path.is_file() or path.suffix not in (".md", ".py", ".txt"):
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            for found in re.finditer(r"pip install\s+'?([^\s'`]+)", line):
                target = found.group(1)
                seen += 1
                assert not target.startswith("contextfold"), f"{path.name}: {line.strip()}"
                if target.startswith(".["):
                    wanted = set(target[2:].rstrip("]").split(","))
                    assert wanted <= extras, f"{path.name}: unknown extra in {line.strip()}"
    assert seen >= 5
