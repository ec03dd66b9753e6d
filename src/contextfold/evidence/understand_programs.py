"""Which kind of output a shell command line gives, from the programs it runs: a directory
listing (ls, tree, find without a name filter), a package install (pip, npm, apt, uv, poetry
...), a linter's or type checker's report (ruff, flake8, pylint, mypy, eslint, tsc ...).

:func:`command_kinds` reads only the command's words (never the output), so that recall can
take "the listing of the folder", "the install output", "what the linter complained about"
as a strong signal (:mod:`.understand`); :func:`kind_programs` names the programs to look the
commands up by, :func:`listings` the folders a command lists.
"""

from __future__ import annotations

import re

#: Where one program of a command line ends and the next begins.
_SEGMENT = re.compile(r"&&|\|\||[;|\n]|\$\(|`")
#: Words in front of the program they run (``sudo``, ``timeout 60``, ``npx``, ``uv run``).
_WRAPPERS = frozenset({"sudo", "env", "time", "timeout", "nice", "nohup", "exec", "command"})
_RUNNERS = frozenset({"npx", "pnpx", "bunx", "pipx"})
_RUN_VIA = frozenset({"uv", "poetry", "pipenv", "pdm", "hatch", "rye", "yarn", "pnpm", "npm"})
_ENV_SET = re.compile(r"^[A-Za-z_]\w*=")
_PYTHON = re.compile(r"^python(?:\d(?:\.\d+)?)?$")

_LISTERS = frozenset({"ls", "ll", "dir", "tree", "exa", "eza", "lsd", "find", "fd", "fdfind"})
#: Tests of ``find`` that make it a search rather than a listing.
_FIND_SEARCH = frozenset(
    {"-name", "-iname", "-path", "-ipath", "-regex", "-iregex", "-exec", "-execdir", "-newer"}
)
#: program -> the sub-commands that install ("" for the program alone)
_INSTALLERS: dict[str, frozenset[str]] = {
    "pip": frozenset({"install", "download"}),
    "pip3": frozenset({"install", "download"}),
    "uv": frozenset({"pip", "add", "sync"}),
    "poetry": frozenset({"install", "add", "update"}),
    "pipenv": frozenset({"install", "sync"}),
    "pdm": frozenset({"install", "add", "sync"}),
    "conda": frozenset({"install", "create", "update"}),
    "mamba": frozenset({"install", "create", "update"}),
    "micromamba": frozenset({"install", "create"}),
    "npm": frozenset({"install", "i", "ci", "add"}),
    "yarn": frozenset({"", "install", "add"}),
    "pnpm": frozenset({"install", "i", "add"}),
    "bun": frozenset({"install", "add", "i"}),
    "apt": frozenset({"install"}),
    "apt-get": frozenset({"install"}),
    "apk": frozenset({"add"}),
    "yum": frozenset({"install"}),
    "dnf": frozenset({"install"}),
    "brew": frozenset({"install"}),
    "gem": frozenset({"install"}),
    "bundle": frozenset({"", "install"}),
    "cargo": frozenset({"install", "add"}),
    "go": frozenset({"get", "install"}),
    "composer": frozenset({"install", "require"}),
    "easy_install": frozenset({""}),
}
_LINTERS = frozenset(
    {"flake8", "pylint", "mypy", "dmypy", "pyright", "pytype", "pycodestyle", "pyflakes"}
    | {"pydocstyle", "bandit", "vulture", "eslint", "tslint", "jshint", "stylelint", "tsc"}
    | {"shellcheck", "rubocop", "golangci-lint", "hadolint", "yamllint", "markdownlint"}
    | {"clang-tidy", "cppcheck", "pylama", "prospector", "mccabe", "codespell"}
)
#: Formatters that report what they would change when asked to check only.
_CHECKERS = frozenset({"black", "isort", "prettier", "autopep8", "yapf"})
_CHECK_FLAGS = frozenset({"--check", "--diff", "--check-only", "-c", "--list-different"})


def _via(head: str, then: list[str]) -> bool:
    """``uv run X``, ``poetry run X``, ``python -m X``: X is the program."""
    if head in _RUN_VIA:
        return then in (["run"], ["exec"], ["x"])
    return _PYTHON.match(head) is not None and then == ["-m"]


def _invoked(words: list[str]) -> list[str]:
    """The words of one program's call, from its name on (wrappers and settings left out)."""
    while words:
        head = words[0].rsplit("/", 1)[-1]
        if _ENV_SET.match(words[0]) or head in _WRAPPERS:
            words = words[1:]
            while words and (words[0].startswith("-") or words[0].isdigit()):
                words = words[1:]  # the wrapper's options (timeout 60, nice -n 10)
        elif head in _RUNNERS:
            words = words[1:]
            while words and words[0].startswith("-"):
                words = words[1:]  # npx --yes eslint
        elif _via(head, words[1:2]):
            words = words[2:]
        else:
            return [head, *words[1:]]
    return []


def _program_kind(words: list[str]) -> str | None:
    prog, args = words[0], [w for w in words[1:] if not w.startswith("-")]
    if _PYTHON.match(prog) and args and args[0].endswith("setup.py"):
        prog, args = "setup.py", args[1:]
    sub = args[0] if args else ""
    if prog == "find":  # by name, or to run a program on each: a search
        return None if _FIND_SEARCH & set(words[1:]) else "list"
    if prog in _LISTERS or (prog == "git" and sub == "ls-files"):
        return "list"
    installs = _INSTALLERS.get(prog)
    if installs is not None and (sub in installs or ("" in installs and not sub)):
        return "install" if prog != "uv" or sub != "pip" or args[1:2] == ["install"] else None
    if prog.endswith("setup.py"):
        return "install" if sub in ("install", "develop") else None
    if prog in _LINTERS or (prog == "go" and sub == "vet") or (prog == "cargo" and sub == "clippy"):
        return "lint"
    if prog in ("ruff", "biome") and sub not in ("format", "version", "help"):
        return "lint"
    if prog in ("sqlfluff", "pre-commit") and sub in ("lint", "run"):
        return "lint"
    if prog in _CHECKERS and _CHECK_FLAGS & set(words[1:]):
        return "lint"
    return None


def kind_programs(kind: str | None) -> tuple[str, ...]:
    """The programs whose calls are outputs of ``kind`` (one of :data:`PROGRAM_KINDS`), to
    look their commands up by; empty for any other kind."""
    if kind == "list":
        return tuple(sorted(_LISTERS))
    if kind == "install":
        return (*sorted(_INSTALLERS), "setup.py")
    if kind == "lint":
        return (*sorted(_LINTERS | _CHECKERS), "ruff", "biome", "sqlfluff", "pre-commit", "vet")
    return ()


def command_kinds(command: str | None) -> frozenset[str]:
    """The kinds of :data:`PROGRAM_KINDS` a shell command line's programs are: a directory
    listing (ls, find, tree), an install (pip, npm, apt, uv, poetry ...), a linter or type
    checker (ruff, flake8, pylint, mypy, eslint, tsc ...). From the command's words only."""
    if not command:
        return frozenset()
    out: set[str] = set()
    for part in _SEGMENT.split(command):
        words = _invoked(_split(part))
        kind = _program_kind(words) if words else None
        if kind is not None:
            out.add(kind)
    return frozenset(out)


def _split(part: str) -> list[str]:
    return part.replace("'", " ").replace('"', " ").split()


def listings(command: str | None) -> list[tuple[tuple[str, ...], str]]:
    """The listings a command line makes: for each, the folders it names (none: the one it
    is in) and the folder a ``cd`` before it went to ("" without one)."""
    out: list[tuple[tuple[str, ...], str]] = []
    cwd = ""
    for part in _SEGMENT.split(command or ""):
        words = _split(part)
        if words[:1] == ["cd"]:
            cwd = words[1] if len(words) > 1 else "~"
            continue
        words = _invoked(words)
        if words and _program_kind(words) == "list":
            args = words[1:]
            if words[0] == "find":  # its folders come before its tests
                first = next((i for i, w in enumerate(args) if w.startswith("-")), len(args))
                args = args[:first]
            out.append((tuple(w for w in args if not w.startswith("-")), cwd))
    return out
