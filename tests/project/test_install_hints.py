"""Every "needs the X extra" message says how to install it in a way that works (contextfold is
installed from its checkout, not from an index): ``pip install '.[X]'`` in the checkout, or the
extra's own packages. One helper (``contextfold.extras``) formats them all."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from contextfold.extras import extra_requirements, install_hint, needs_extra
from tests.conftest import REPO_ROOT

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

EXTRAS = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"][
    "optional-dependencies"
]

#: runs the CLI (or Python code) with some top-level packages made unimportable
BLOCKER = textwrap.dedent(
    """
    import sys
    class Block:
        def __init__(self, names):
            self.names = names
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in self.names:
                raise ImportError(f"No module named {name!r}")
            return None
    sys.meta_path.insert(0, Block(set(sys.argv[1].split(","))))
    if sys.argv[2] == "-c":
        exec(sys.argv[3])
    else:
        sys.argv = ["contextfold", *sys.argv[2:]]
        from contextfold.cli import main
        sys.exit(main())
    """
)


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower()


def _run(blocked: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "src"))
    env.pop("CONTEXTFOLD_STORE", None)
    return subprocess.run(
        [sys.executable, "-c", BLOCKER, blocked, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_no_message_in_the_package_asks_an_index_for_contextfold() -> None:
    pattern = re.compile(r"pip install\s+'?contextfold\[")
    for path in sorted((REPO_ROOT / "src" / "contextfold").rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            assert not pattern.search(line), f"{path.relative_to(REPO_ROOT)}:{number}: {line}"


@pytest.mark.parametrize("extra", sorted(set(EXTRAS) - {"all", "dev"}))
def test_the_hint_names_the_checkout_install_and_the_extras_packages(extra: str) -> None:
    hint = install_hint(extra)
    assert hint.startswith(f"pip install '.[{extra}]' in the contextfold checkout"), hint
    packages = extra_requirements(extra)
    assert {_name(p) for p in packages} == {_name(r) for r in EXTRAS[extra]}
    for package in packages:
        assert package in hint
    assert "contextfold[" not in hint


def test_needs_extra_is_one_line_with_the_cause() -> None:
    line = needs_extra("a PostgreSQL store", "postgres", ImportError("No module named 'psycopg'"))
    assert line.startswith(
        "a PostgreSQL store needs the 'postgres' extra (pip install '.[postgres]'"
    )
    assert line.endswith(": No module named 'psycopg'") and "\n" not in line


@pytest.mark.parametrize(
    ("blocked", "args", "extra"),
    [
        ("uvicorn,starlette", ["serve", "--upstream", "http://127.0.0.1:9"], "gateway"),
        ("uvicorn,starlette", ["ui", "--store", "{tmp}"], "gateway"),
        ("mcp", ["mcp", "--store", "{tmp}"], "mcp"),
        (
            "psycopg,psycopg_pool",
            ["sessions", "list", "--store", "postgresql://u@127.0.0.1/x"],
            "postgres",
        ),
    ],
)
def test_the_cli_says_how_to_install_a_missing_extra(
    blocked: str, args: list[str], extra: str, tmp_path: Path
) -> None:
    (tmp_path / "store").mkdir()
    done = _run(blocked, *(a.replace("{tmp}", str(tmp_path / "store")) for a in args))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"pip install '.[{extra}]' in the contextfold checkout" in lines[0]


@pytest.mark.parametrize(
    ("blocked", "code", "extra"),
    [
        (
            "langchain,langchain_core,langgraph",
            "import contextfold.integrations.langchain",
            "langchain",
        ),
        ("agents", "import contextfold.integrations.openai_agents", "openai-agents"),
        ("pydantic_ai", "import contextfold.integrations.pydantic_ai", "pydantic-ai"),
        (
            "openai",
            "from contextfold.providers.llm import OpenAIChatModel; OpenAIChatModel(model='m')",
            "openai",
        ),
        (
            "bpe_openai",
            "from contextfold.core.tokens import get_counter; get_counter('o200k_base')",
            "tokenizers",
        ),
        (
            "psycopg,psycopg_pool",
            "from contextfold.storage import open_store; open_store('postgresql://u@127.0.0.1/x')",
            "postgres",
        ),
    ],
)
def test_the_library_says_how_to_install_a_missing_extra(
    blocked: str, code: str, extra: str
) -> None:
    done = _run(blocked, "-c", code)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert f"pip install '.[{extra}]' in the contextfold checkout" in last, done.stderr[-2000:]
    assert "contextfold[" not in done.stderr
