"""Move the package into its layer folders and the tests into a tree that mirrors it.

    python scripts/relayout.py            # print the plan (nothing is changed)
    python scripts/relayout.py --apply    # do it (a clean git tree, not yet moved)

The plan comes from ``scripts/relayout/layout.map`` (source modules) and
``scripts/relayout/tests.map`` (test files); a module neither names follows a named module it
starts with plus ``_`` (``view_cuts.py`` goes next to ``view.py``), a test file neither names goes
next to the source module its name starts with, and any other source module stops the script
before anything moves. ``--apply`` then

1. moves every file with ``git mv`` (new packages get an ``__init__.py``),
2. rewrites the imports (absolute and relative, recomputed for the new place) of every Python
   file, the dotted names (``"contextfold.view.View"`` in a ``mock.patch``) and file paths
   (``src/contextfold/view.py``) in code, docs, README, pyproject and Makefile,
3. fixes ``Path(__file__).parents[N]`` of the files that moved to another depth,
4. writes the layers contract (``[tool.importlinter]``), the lint step, the architecture test,
   the diagram's layer map and the docs' paragraph on where a change goes,
5. runs ``ruff check --fix`` (import order) and ``ruff format`` on what it changed.
"""

from __future__ import annotations

import argparse
import ast
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path.cwd()
SRC = ROOT / "src"
PKG = "contextfold"
DATA = Path(__file__).resolve().parent / "relayout"
TEXT_FILES = ["README.md", "pyproject.toml", "Makefile", "setup.py"]
TEXT_GLOBS = [
    "tests/data/*.txt",
    "docs/*.md",
    "docs/**/*.md",
    "src/contextfold/**/*.md",
    "benchmarks/*.md",
]
PY_DIRS = ["src", "tests", "benchmarks", "examples", "scripts"]
SKIP_PARTS = {"__pycache__", "traces", ".venv", "node_modules"}
#: new packages the moves create, with their docstrings
PACKAGE_DOCS = {
    "contextfold.core": "The data model every layer shares: messages, the view, tokens, config, records.",
    "contextfold.providers": "LLM providers: responses, chat adapters, LLM clients, learned limits.",
    "contextfold.recovery": "What makes compaction recoverable: recovery hooks, memory, past sessions.",
    "contextfold.mcp": "The MCP server and the workspace tools it serves.",
    "contextfold.recovery.sessions": None,
}


class RelayoutError(Exception):
    pass


# ------------------------------------------------------------------ the plan


def read_map(path: Path) -> list[tuple[str, str]]:
    pairs = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            old, new = line.split()
            pairs.append((old, new))
    return pairs


def _module_of(path: Path, base: Path, prefix: str) -> str:
    rel = path.relative_to(base).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([prefix, *parts]) if parts else prefix


def _walk_py(top: Path) -> list[Path]:
    return sorted(p for p in top.rglob("*.py") if not SKIP_PARTS & set(p.relative_to(ROOT).parts))


@dataclass
class Plan:
    #: old dotted module -> new dotted module (every module of src and tests)
    modules: dict[str, str] = field(default_factory=dict)
    #: old file -> new file (relative to ROOT), files that move
    files: dict[Path, Path] = field(default_factory=dict)
    #: modules that are packages (old name)
    packages: set[str] = field(default_factory=set)
    #: how each unnamed module was placed (for the report)
    guessed: list[str] = field(default_factory=list)
    new_packages: list[Path] = field(default_factory=list)


def _place_source(rel: str, entries: dict[str, str]) -> tuple[str | None, str]:
    """New name (relative to the package) of module ``rel`` and how it was found."""
    if rel in entries:
        return entries[rel], "named"
    parent, _, base = rel.rpartition(".")
    best = None
    for old in entries:
        o_parent, _, o_base = old.rpartition(".")
        follows = o_parent == parent and o_base != "__init__" and base.startswith(o_base + "_")
        if follows and (best is None or len(old) > len(best)):
            best = old
    if best is not None and entries[best] != best:
        new = entries[best]
        n_parent, _, n_base = new.rpartition(".")
        suffix = base[len(best.rpartition(".")[2]) :]
        return (f"{n_parent}." if n_parent else "") + n_base + suffix, f"follows {best}"
    parts = rel.split(".")
    for i in range(len(parts) - 1, 0, -1):
        head = ".".join(parts[:i])
        if head in entries:
            return ".".join([entries[head], *parts[i:]]) if entries[head] else rel, "package"
    if best is not None:
        return rel, f"follows {best}"
    return None, "unmapped"


def _test_guess(name: str, src_modules: dict[str, str], packages: set[str]) -> str:
    """The folder (relative to tests/) of a test file named ``test_<name>.py`` not in tests.map:
    the folder its longest-named source module moved to."""
    stem = name.removeprefix("test_")
    best, best_len, best_old = "", 0, ""
    for old, new in src_modules.items():
        rel = old.removeprefix(PKG + ".")
        if rel == PKG:
            continue
        flat = rel.replace(".", "_")
        if (stem == flat or stem.startswith(flat + "_")) and len(flat) > best_len:
            best, best_len, best_old = new, len(flat), old
    if not best:
        return ""
    parts = best.split(".")[1:]
    return parts[0] if len(parts) > 1 or best_old in packages else ""


def build_plan() -> Plan:
    plan = Plan()
    entries = dict(read_map(DATA / "layout.map"))
    unmapped = []
    pkg_dir = SRC / PKG
    for path in _walk_py(pkg_dir):
        old = _module_of(path, SRC, "")
        old = old.lstrip(".")
        rel = old.removeprefix(PKG).lstrip(".") or "__init__"
        if path.name == "__init__.py" and rel != "__init__":
            plan.packages.add(old)
        new_rel, how = _place_source(rel, entries)
        if new_rel is None:
            unmapped.append(str(path.relative_to(ROOT)))
            continue
        if how.startswith("follows"):
            plan.guessed.append(f"{rel} -> {new_rel} ({how})")
        new = PKG if new_rel == "__init__" else f"{PKG}.{new_rel}"
        plan.modules[old] = new
        if path.name == "__init__.py":
            target = SRC / Path(*new.split(".")) / "__init__.py"
        else:
            target = SRC / Path(*new.split(".")).with_suffix(".py")
        if target != path:
            plan.files[path.relative_to(ROOT)] = target.relative_to(ROOT)
    if unmapped:
        raise RelayoutError(
            "modules not in scripts/relayout/layout.map (add a line for each):\n  "
            + "\n  ".join(unmapped)
        )
    # non-Python files inside folders that move as a whole
    for path in sorted(pkg_dir.rglob("*")):
        if (
            path.is_file()
            and path.suffix not in (".py", ".pyc")
            and "__pycache__" not in path.parts
        ):
            owner = _module_of(path.parent / "__init__.py", SRC, "").lstrip(".")
            if owner in plan.modules and plan.modules[owner] != owner:
                new_dir = SRC / Path(*plan.modules[owner].split("."))
                plan.files[path.relative_to(ROOT)] = (
                    new_dir / path.relative_to(path.parent)
                ).relative_to(ROOT)
    _plan_tests(plan)
    _check_collisions(plan)
    _plan_new_packages(plan)
    return plan


def _plan_tests(plan: Plan) -> None:
    tests = ROOT / "tests"
    named = dict(read_map(DATA / "tests.map"))
    missing = []
    for path in _walk_py(tests):
        rel = path.relative_to(tests).as_posix()
        old = _module_of(path, ROOT, "").lstrip(".")
        if "/" in rel:  # tests/agents, tests/spec: stay
            plan.modules[old] = old
            continue
        if rel in ("__init__.py", "conftest.py"):
            plan.modules[old] = old
            continue
        if rel in named:
            new_rel = named[rel]
        else:
            folder = (
                _test_guess(path.stem, plan.modules, plan.packages)
                if path.stem.startswith("test_")
                else ""
            )
            if not folder:
                missing.append(f"tests/{rel}")
                continue
            new_rel = f"{folder}/{rel}"
            plan.guessed.append(f"tests/{rel} -> tests/{new_rel} (named after its module)")
        target = Path("tests") / new_rel
        plan.modules[old] = ".".join(target.with_suffix("").parts)
        if target != Path("tests") / rel:
            plan.files[Path("tests") / rel] = target
    if missing:
        raise RelayoutError(
            "test files not in scripts/relayout/tests.map and named after no source module "
            "(add a line for each):\n  " + "\n  ".join(missing)
        )


def _check_collisions(plan: Plan) -> None:
    seen: dict[Path, Path] = {}
    for old, new in plan.files.items():
        if new in seen:
            raise RelayoutError(f"{old} and {seen[new]} would both become {new}")
        seen[new] = old
        if (ROOT / new).exists() and new not in plan.files:
            raise RelayoutError(f"{old} -> {new}: that file exists already")


def _plan_new_packages(plan: Plan) -> None:
    targets = set(plan.files.values())
    existing_after = {p for p in targets if p.name == "__init__.py"}
    kept = {
        p.relative_to(ROOT)
        for top in (SRC / PKG, ROOT / "tests")
        for p in top.rglob("__init__.py")
        if p.relative_to(ROOT) not in plan.files
    }
    for target in sorted(targets):
        if target.suffix != ".py":
            continue
        folder = target.parent
        while folder not in (Path("src"), Path(".")):
            init = folder / "__init__.py"
            if init not in existing_after and init not in kept and init not in plan.new_packages:
                plan.new_packages.append(init)
            if folder in (Path("tests"), Path("src") / PKG):
                break
            folder = folder.parent


# ------------------------------------------------------------------ rewriting imports


@dataclass
class Names:
    """What the rewriter knows: old module -> new module, and each module's top-level names."""

    modules: dict[str, str]
    defined: dict[str, set[str]]

    def remap(self, module: str) -> str:
        if module in self.modules:
            return self.modules[module]
        parts = module.split(".")
        for i in range(len(parts) - 1, 0, -1):
            head = ".".join(parts[:i])
            if head in self.modules and head not in (PKG, "tests"):
                return ".".join([self.modules[head], *parts[i:]])
        return module


def _top_names(path: Path) -> set[str]:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError):
        return set()
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        out.add(n.id)
        elif isinstance(node, ast.ImportFrom):
            # names re-exported from a sibling (``from .x import Y``) count: patch targets use them
            for alias in node.names:
                if node.level or (node.module or "").startswith(PKG):
                    out.add(alias.asname or alias.name)
        elif isinstance(node, ast.If):
            for sub in node.body:
                if isinstance(sub, (ast.FunctionDef, ast.ClassDef)):
                    out.add(sub.name)
    return out


def _package_of(module: str, is_package: bool) -> str:
    return module if is_package else module.rpartition(".")[0]


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = _package_of(module, is_package).split(".")
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _relative(target: str, module: str, is_package: bool) -> tuple[int, str]:
    """``target`` as a relative import from ``module``: (level, module text)."""
    here = _package_of(module, is_package).split(".")
    there = target.split(".")
    common = 0
    while common < min(len(here), len(there)) and here[common] == there[common]:
        common += 1
    level = len(here) - common + 1
    return level, ".".join(there[common:])


HEADER = re.compile(r"from\s+[.\w]*\s+import\b")


def _bound(item: str) -> str:
    return item.split(" as ")[-1].strip()


def _alias_comments(lines: list[str], node: ast.ImportFrom) -> dict[str, str]:
    """The comment on each imported name's line (``x,  # noqa: F401``), by the name it binds;
    a comment on the statement's first line goes to its first name."""
    out: dict[str, str] = {}
    bound = [a.asname or a.name for a in node.names]
    for i, line in enumerate(lines):
        if "#" not in line:
            continue
        code, _, comment = line.partition("#")
        on_line = [b for b in bound if re.search(rf"\b{re.escape(b)}\b", code)]
        key = on_line[-1] if on_line else (bound[0] if i == 0 else None)
        if key:
            out[key] = "#" + comment.rstrip("\n")
    return out


def _render_from(
    level: int, module: str, names: list[str], indent: str, comments: dict[str, str]
) -> str:
    head = "." * level + module
    line = f"{indent}from {head} import {', '.join(names)}"
    noted = [n for n in names if _bound(n) in comments]
    if len(line) > 95 or len(noted) > 1 or (noted and len(names) > 1):
        body = "".join(
            f"{indent}    {n},{'  ' + comments[_bound(n)] if _bound(n) in comments else ''}\n"
            for n in names
        )
        return f"{indent}from {head} import (\n{body}{indent})"
    return line + ("  " + comments[_bound(noted[0])] if noted else "")


@dataclass
class FileCtx:
    old_module: str | None
    new_module: str | None
    is_package: bool


def _alias_text(name: str, asname: str | None) -> str:
    return f"{name} as {asname}" if asname and asname != name else name


def rewrite_import_from(
    node: ast.ImportFrom, ctx: FileCtx, names: Names
) -> list[tuple[str, int, str, list[str]]] | None:
    """The statements that replace ``node``: (kind, level, module, names), None to keep it."""
    if ctx.old_module is None and node.level:
        return None
    absolute = _resolve(node, ctx.old_module or "", ctx.is_package)
    if not (
        absolute == PKG
        or absolute.startswith(PKG + ".")
        or absolute == "tests"
        or absolute.startswith("tests.")
    ):
        return None
    groups: dict[str, list[str]] = {}
    changed = False
    new_base = names.remap(absolute)
    if new_base != absolute:
        changed = True
    for alias in node.names:
        sub = f"{absolute}.{alias.name}"
        if alias.name != "*" and sub in names.modules:
            new_sub = names.modules[sub]
            parent, _, base = new_sub.rpartition(".")
            if new_sub != sub:
                changed = True
            groups.setdefault(parent, []).append(
                _alias_text(base, alias.asname or (alias.name if base != alias.name else None))
            )
        else:
            groups.setdefault(new_base, []).append(_alias_text(alias.name, alias.asname))
    moved_file = ctx.old_module != ctx.new_module
    if not changed and not (moved_file and node.level):
        return None
    out = []
    for target, items in groups.items():
        if node.level and ctx.new_module:
            level, text = _relative(target, ctx.new_module, ctx.is_package)
            out.append(("from", level, text, items))
        else:
            out.append(("from", 0, target, items))
    return out


def rewrite_python(text: str, ctx: FileCtx, names: Names) -> str:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return rewrite_text(text, names)
    lines = text.splitlines(keepends=True)
    replace: dict[int, tuple[int, str]] = {}  # first line index -> (last line index, new text)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            stmts = rewrite_import_from(node, ctx, names)
            if stmts is None:
                continue
            first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
            src = "".join(lines[first : last + 1])
            indent = lines[first][: node.col_offset]
            if not lines[first][node.col_offset :].startswith("from"):
                continue  # shares its line with another statement: left alone
            head = HEADER.match(lines[first], node.col_offset)
            originals = [_alias_text(a.name, a.asname) for a in node.names]
            if head and len(stmts) == 1 and stmts[0][3] == originals:
                # only the module changes: edit the header, keep names, comments and layout
                _, level, module, _ = stmts[0]
                line = lines[first]
                new_line = (
                    f"{line[: head.start()]}from {'.' * level}{module} import{line[head.end() :]}"
                )
                replace[first] = (first, new_line)
                continue
            comments = _alias_comments(lines[first : last + 1], node)
            rendered = [
                _render_from(level, module, items, indent, comments)
                for _, level, module, items in stmts
            ]
            end = "\n" if src.endswith("\n") else ""
            replace[first] = (last, "\n".join(rendered) + end)
        elif isinstance(node, ast.Import):
            new_names = []
            changed = False
            for alias in node.names:
                new = (
                    names.remap(alias.name)
                    if alias.name.startswith((PKG + ".", "tests."))
                    else alias.name
                )
                changed |= new != alias.name
                new_names.append(_alias_text(new, alias.asname))
            if changed:
                first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
                indent = lines[first][: node.col_offset]
                end = "\n" if lines[last].endswith("\n") else ""
                replace[first] = (last, f"{indent}import {', '.join(new_names)}{end}")
    out = []
    i = 0
    while i < len(lines):
        if i in replace:
            last, new = replace[i]
            out.append(new)
            i = last + 1
        else:
            out.append(rewrite_text(lines[i], names))
            i += 1
    return "".join(out)


DOTTED = re.compile(r"(?<![\w.])(contextfold|tests)((?:\.[A-Za-z_][A-Za-z0-9_]*)+)")
PATHS = re.compile(r"(?<![\w.-])((?:src/)?contextfold/[\w/]*[\w]|tests/[\w/]*\w)(\.py\b|/)?")


def _dotted(match: re.Match[str], names: Names) -> str:
    parts = (match.group(1) + match.group(2)).split(".")
    for i in range(len(parts), 1, -1):
        head = ".".join(parts[:i])
        if head in names.modules and names.modules[head] != head:
            rest = parts[i:]
            known = names.defined.get(head, set())
            if rest and rest[0] not in known and not rest[0].startswith("__"):
                # "contextfold.tokens.before" names a span attribute, not the module
                return match.group(0)
            if head == "tests" or (head.startswith("tests.") and i == 1):
                return match.group(0)
            return ".".join([names.modules[head], *rest])
        if head in names.modules:
            return match.group(0)
    return match.group(0)


def _path(match: re.Match[str], names: Names, files: dict[str, str]) -> str:
    body, tail = match.group(1), match.group(2) or ""
    key = body.removeprefix("src/")
    candidates = [key + ".py"] if tail == ".py" else [key + "/__init__.py", key + ".py"]
    for cand in candidates:
        full = cand if cand.startswith("tests/") else "src/" + cand
        if full in files:
            new = files[full]
            if cand.endswith("/__init__.py"):
                new = new.removesuffix("/__init__.py")
            elif tail != ".py":
                new = new.removesuffix(".py")
            else:
                new = new.removesuffix(".py")
            if not body.startswith("src/") and new.startswith("src/"):
                new = new.removeprefix("src/")
            return new + tail
    return match.group(0)


def rewrite_text(text: str, names: Names, files: dict[str, str] | None = None) -> str:
    text = DOTTED.sub(lambda m: _dotted(m, names), text)
    files = files if files is not None else _FILES
    if files:
        text = PATHS.sub(lambda m: _path(m, names, files), text)
    return text


BACKTICKED = re.compile(r"(?<=`)([a-z_][\w/]*?)(\.py|/)(?=[`\s:)])")


def rewrite_doc(text: str, names: Names) -> str:
    """Docs also name files relative to the package (`` `compactors/pipeline.py` ``)."""
    text = rewrite_text(text, names)

    def sub(m: re.Match[str]) -> str:
        body, tail = m.group(1), m.group(2)
        if body.startswith(("src/", "tests/", "contextfold/", "docs/", "benchmarks/")):
            return m.group(0)
        key = f"src/contextfold/{body}" + (".py" if tail == ".py" else "/__init__.py")
        if key not in _FILES:
            return m.group(0)
        moved = _FILES[key].removeprefix("src/contextfold/")
        return moved if tail == ".py" else moved.removesuffix("__init__.py")

    return BACKTICKED.sub(sub, text)


_FILES: dict[str, str] = {}

PARENTS = re.compile(r"Path\(__file__\)((?:\.resolve\(\))?)(\.parents\[(\d+)\]|(?:\.parent(?!s))+)")


def fix_depth(text: str, delta: int) -> str:
    """``Path(__file__).parents[N]`` of a file that moved ``delta`` folders deeper."""
    if not delta:
        return text

    def sub(m: re.Match[str]) -> str:
        up = int(m.group(3)) + 1 if m.group(3) is not None else m.group(2).count(".parent")
        up += delta
        tail = ".parent" if up == 1 else f".parents[{up - 1}]"
        return f"Path(__file__){m.group(1)}{tail}"

    return PARENTS.sub(sub, text)


# ------------------------------------------------------------------ applying


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout


def preflight() -> None:
    if not (ROOT / ".git").exists() or not (SRC / PKG).is_dir():
        raise RelayoutError("run from the repository root")
    if _git("status", "--porcelain", "--untracked-files=normal").strip():
        raise RelayoutError("the git tree is not clean: commit or stash first")
    if (SRC / PKG / "core").exists() or (SRC / PKG / "compaction").exists():
        raise RelayoutError("src/contextfold/core exists: the tree is moved already")


def _python_files() -> list[Path]:
    out: list[Path] = []
    for top in PY_DIRS:
        if (ROOT / top).is_dir():
            out.extend(_walk_py(ROOT / top))
    own = Path(__file__).resolve()
    return [p for p in out if p.resolve() != own and DATA not in p.resolve().parents]


def _text_files() -> list[Path]:
    out = [ROOT / n for n in TEXT_FILES if (ROOT / n).is_file()]
    for pattern in TEXT_GLOBS:
        out.extend(p for p in ROOT.glob(pattern) if p.is_file() and p not in out)
    return out


def apply(plan: Plan) -> list[Path]:
    defined = {}
    for path in _walk_py(SRC / PKG) + _walk_py(ROOT / "tests"):
        base = SRC if path.is_relative_to(SRC) else ROOT
        old = _module_of(path, base, "").lstrip(".")
        defined[old] = _top_names(path) | {
            m.rpartition(".")[2] for m in plan.modules if m.rpartition(".")[0] == old
        }
    names = Names(plan.modules, defined)
    _FILES.update({o.as_posix(): n.as_posix() for o, n in plan.files.items()})
    # rewrite in place first (every file at its old path knows its old module), then move
    changed: list[Path] = []
    for path in _python_files():
        rel = path.relative_to(ROOT)
        old_mod = None
        if rel.parts[0] == "src":
            old_mod = _module_of(path, SRC, "").lstrip(".")
        elif rel.parts[0] == "tests":
            old_mod = _module_of(path, ROOT, "").lstrip(".")
        ctx = FileCtx(old_mod, plan.modules.get(old_mod or "", old_mod), path.name == "__init__.py")
        text = path.read_text(encoding="utf-8")
        new = rewrite_python(text, ctx, names)
        if rel in plan.files:
            delta = len(plan.files[rel].parts) - len(rel.parts)
            new = fix_depth(new, delta)
        if old_mod == PKG:
            new = _lazy_table(new, names)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(rel)
    for path in _text_files():
        text = path.read_text(encoding="utf-8")
        new = rewrite_doc(text, names) if path.suffix == ".md" else rewrite_text(text, names)
        if new != text:
            path.write_text(new, encoding="utf-8")
    for old, new in sorted(plan.files.items()):
        (ROOT / new).parent.mkdir(parents=True, exist_ok=True)
        _git("mv", str(old), str(new))
    for init in plan.new_packages:
        dotted = ".".join(init.parent.parts[1:] if init.parts[0] == "src" else init.parent.parts)
        doc = PACKAGE_DOCS.get(dotted) or f"{dotted.rpartition('.')[2].capitalize()}."
        if init.parts[0] == "tests":
            doc = f"Tests of {'/'.join(init.parent.parts[1:])}."
        (ROOT / init).write_text(f'"""{doc}"""\n', encoding="utf-8")
        _git("add", str(init))
    _remove_empty_dirs()
    return [plan.files.get(p, p) for p in changed]


def _lazy_table(text: str, names: Names) -> str:
    """The root ``__init__``'s table of relative module names (``"ContextManager": ".manager"``)."""

    def sub(m: re.Match[str]) -> str:
        old = PKG + m.group(2)
        new = names.remap(old)
        return m.group(1) + "." + new.removeprefix(PKG + ".") + m.group(3)

    return re.sub(r'(:\s*")(\.[\w.]+)(")', sub, text)


def _remove_empty_dirs() -> None:
    for top in (SRC / PKG, ROOT / "tests"):
        for folder in sorted(
            (p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)
        ):
            left = [p for p in folder.iterdir() if p.name != "__pycache__"]
            if not left:
                shutil.rmtree(folder)


# ------------------------------------------------------------------ the post steps


def post_steps() -> None:
    sys.path.insert(0, str(DATA))
    import post  # scripts/relayout/post.py

    post.run(ROOT)


def ruff(files: list[Path]) -> None:
    exe = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    targets = [d for d in PY_DIRS if (ROOT / d).is_dir()]
    subprocess.run([exe, "check", "--fix", "--select", "I", "-q", *targets], cwd=ROOT, check=False)
    subprocess.run([exe, "format", "-q", *targets], cwd=ROOT, check=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--apply", action="store_true", help="move and rewrite (else: print the plan)"
    )
    args = parser.parse_args(argv)
    try:
        if args.apply:
            preflight()
        plan = build_plan()
    except RelayoutError as exc:
        print(f"relayout: {exc}", file=sys.stderr)
        return 2
    for old, new in sorted(plan.files.items()):
        print(f"{old} -> {new}")
    for line in plan.guessed:
        print(f"placed: {line}")
    for init in plan.new_packages:
        print(f"new package: {init}")
    if not args.apply:
        print(f"{len(plan.files)} files would move (run with --apply)")
        return 0
    changed = apply(plan)
    post_steps()
    ruff(changed)
    print(f"moved {len(plan.files)} files, rewrote {len(changed)} Python files")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
