"""No ``Any`` in a public signature.

Every public module of the package is imported; every public function, class, method,
property, dataclass field, class annotation and module-level type alias it holds is read with
``typing.get_type_hints(include_extras=True)`` and walked through its generic arguments
(``list[Any]``, ``dict[str, Any]``, ``Callable[..., Any]``, a union, an alias, a TypeVar's
bound). Each place where ``Any`` appears is named. A value that is truly opaque is ``object``.

The places typed with ``Any`` before this test existed are listed in
``tests/data/public_any_baseline.txt``: a new place fails, and a place typed since fails until
its line is removed, so the list only shrinks.

A module that needs an optional extra which is not installed is skipped, and that skip fails
under ``CONTEXTFOLD_REQUIRE_ALL=1`` (CI installs every extra).
"""

from __future__ import annotations

import ast
import collections.abc
import dataclasses
import importlib
import inspect
import pkgutil
import sys
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import contextfold

from ..conftest import skip_or_fail

PACKAGE = "contextfold"
# the places typed with Any before this test existed; each one typed comes off the list
BASELINE = Path(__file__).parents[1] / "data" / "public_any_baseline.txt"


def _is_public_name(name: str) -> bool:
    return not name.startswith("_") or (name.startswith("__") and name.endswith("__"))


def public_modules() -> list[str]:
    """Every module of the package with no underscore-prefixed part (``__init__`` aside)."""
    names = [PACKAGE]
    for info in pkgutil.walk_packages(contextfold.__path__, prefix=PACKAGE + "."):
        parts = info.name.split(".")[1:]
        if any(part.startswith("_") for part in parts):
            continue
        names.append(info.name)
    return sorted(names)


def _mentions_any(hint: object, seen: set[int] | None = None) -> bool:
    """Whether ``Any`` appears anywhere in a resolved annotation."""
    seen = set() if seen is None else seen
    if id(hint) in seen:
        return False
    seen.add(id(hint))
    if hint is Any:
        return True
    if isinstance(hint, list | tuple):  # Callable[[A, B], R] argument lists
        return any(_mentions_any(item, seen) for item in hint)
    if isinstance(hint, typing.TypeVar):
        bound = hint.__bound__
        return (bound is not None and _mentions_any(bound, seen)) or any(
            _mentions_any(c, seen) for c in hint.__constraints__
        )
    value = getattr(hint, "__value__", None)  # a 3.12 ``type X = ...`` alias
    if value is not None and not isinstance(hint, type):
        return _mentions_any(value, seen)
    return any(_mentions_any(arg, seen) for arg in typing.get_args(hint))


def _type_checking_names(module: types.ModuleType) -> dict[str, object]:
    """The module's namespace as a type checker sees it: its ``if TYPE_CHECKING:`` blocks run
    too, so that string annotations naming what they import or define resolve."""
    namespace: dict[str, object] = {
        **vars(typing),
        **vars(collections.abc),
        "KW_ONLY": dataclasses.KW_ONLY,
        **vars(module),
    }
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError):
        return namespace
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            block = ast.Module(body=node.body, type_ignores=[])
            exec(compile(block, inspect.getsourcefile(module) or "<module>", "exec"), namespace)
    return namespace


_NAMESPACES: dict[str, dict[str, object]] = {}


def _namespace(module: types.ModuleType) -> dict[str, object]:
    if module.__name__ not in _NAMESPACES:
        _NAMESPACES[module.__name__] = _type_checking_names(module)
    return _NAMESPACES[module.__name__]


def _hints(obj: object, module: types.ModuleType) -> dict[str, object]:
    try:
        return typing.get_type_hints(obj, globalns=_namespace(module), include_extras=True)
    except TypeError:  # a builtin or a callable object get_type_hints does not read
        return {}


def _own_annotations(cls: type, module: types.ModuleType) -> dict[str, object]:
    """The annotations a class itself declares (not its bases', which may be another
    library's), resolved in its module's namespace."""
    return inspect.get_annotations(
        cls, globals=_namespace(module), locals=dict(vars(cls)), eval_str=True
    )


def _module_aliases(module: types.ModuleType) -> Iterator[tuple[str, object]]:
    """Module-level public assignments in the module's own source whose value is a type."""
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError):
        return
    for node in ast.parse(source).body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        elif type(node).__name__ == "TypeAlias":  # 3.12 ``type X = ...``
            targets = [node.name]  # type: ignore[attr-defined]
        for target in targets:
            if isinstance(target, ast.Name) and not target.id.startswith("_"):
                value = getattr(module, target.id, None)
                if _is_type_form(value):
                    yield target.id, value


def _is_type_form(value: object) -> bool:
    if value is Any:
        return True
    origin = typing.get_origin(value)
    return origin is not None or type(value).__name__ == "TypeAliasType"


def _callable_places(
    qualname: str, func: Callable[..., object], module: types.ModuleType
) -> Iterator[str]:
    for param, hint in _hints(func, module).items():
        if _mentions_any(hint):
            yield f"{qualname}: {param}"


def _class_places(cls: type, module: types.ModuleType) -> Iterator[str]:
    for field, hint in _own_annotations(cls, module).items():
        if _is_public_name(field) and _mentions_any(hint):
            yield f"{cls.__qualname__}.{field}"
    for name, member in cls.__dict__.items():
        if not _is_public_name(name):
            continue
        qual = f"{cls.__qualname__}.{name}"
        if isinstance(member, staticmethod | classmethod):
            member = member.__func__
        if isinstance(member, property):
            for accessor in (member.fget, member.fset):
                if accessor is not None:
                    yield from _callable_places(qual, accessor, module)
        elif inspect.isfunction(member) and member.__code__.co_filename != "<string>":
            # (a dataclass's generated __init__ is named by its fields above)
            yield from _callable_places(qual, member, module)
        elif inspect.isclass(member) and member.__module__ == cls.__module__:
            yield from _class_places(member, module)


def any_places(module: types.ModuleType) -> list[str]:
    """``module:Qualname: parameter`` for each public place of ``module`` that mentions Any
    (objects defined in the module itself, or re-exported by it from a private module)."""
    places: list[str] = []
    for name, obj in sorted(vars(module).items()):
        if not _is_public_name(name) or name in {"__builtins__", "__loader__", "__spec__"}:
            continue
        home = getattr(obj, "__module__", None)
        if not (home == module.__name__ or _private_home(home)):
            continue
        if inspect.isclass(obj):
            places.extend(_class_places(obj, sys.modules[obj.__module__]))
        elif inspect.isfunction(obj):
            places.extend(_callable_places(obj.__qualname__, obj, sys.modules[obj.__module__]))
    for name, value in _module_aliases(module):
        if _mentions_any(value):
            places.append(f"{name} (type alias)")
    return [f"{module.__name__}:{place}" for place in places]


def _private_home(home: object) -> bool:
    return (
        isinstance(home, str)
        and home.startswith(PACKAGE + ".")
        and any(part.startswith("_") for part in home.split(".")[1:])
    )


def _import(name: str) -> types.ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        missing = getattr(exc, "name", None) or ""
        if missing.split(".")[0] == PACKAGE:
            raise
        skip_or_fail(f"{name} needs {missing or exc}, an optional extra that is not installed")


def baseline() -> set[str]:
    """The places not yet typed, one a line: the list may only shrink."""
    lines = BASELINE.read_text(encoding="utf-8").splitlines()
    return {line for line in lines if line and not line.startswith("#")}


@pytest.mark.parametrize("name", public_modules())
def test_no_any_in_public_signatures(name: str) -> None:
    found = set(any_places(_import(name)))
    known = {place for place in baseline() if place.split(":")[0] == name}
    new = sorted(found - known)
    assert not new, "Any in a public signature (use a Protocol, TypedDict, JSON alias, " + (
        "an overload, a generic or object):\n  " + "\n  ".join(new)
    )
    gone = sorted(known - found)
    assert not gone, f"typed now: remove from {BASELINE.name}:\n  " + "\n  ".join(gone)


def test_the_baseline_names_only_public_modules() -> None:
    modules = set(public_modules())
    assert {place.split(":")[0] for place in baseline()} <= modules


SAMPLE = """
from __future__ import annotations
import dataclasses
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

Loose = dict[str, Any]
Clean = dict[str, int]
T = TypeVar("T", bound=Loose)

def bare(x: Any) -> None: ...
def nested(x: list[dict[str, Any]]) -> None: ...
def returns(x: int) -> Callable[..., Any]: ...
def aliased(x: Loose) -> None: ...
def annotated(x: Annotated[Any, "meta"]) -> None: ...
def bounded(x: T) -> T: ...
def clean(x: Clean, y: object) -> Callable[[int], str]: ...
def _private(x: Any) -> Any: ...

@dataclasses.dataclass
class Box:
    field: tuple[Any, ...]
    fine: int
    def method(self, *args: Any) -> None: ...
    @property
    def prop(self) -> Any: ...
    @staticmethod
    def static(x: int | Any) -> None: ...
    def _hidden(self, x: Any) -> None: ...
"""


def test_the_walk_finds_every_kind_of_any() -> None:
    """The checker itself: each way Any can hide in a signature is found, and nothing else."""
    sample = types.ModuleType(f"{PACKAGE}.any_sample")
    sys.modules[sample.__name__] = sample
    try:
        exec(compile(SAMPLE, "<sample>", "exec"), vars(sample))
        found = set(any_places(sample))
    finally:
        del sys.modules[sample.__name__]
    # aliases are read from the module's source file, which the sample has not: check directly
    assert _mentions_any(sample.Loose) and not _mentions_any(sample.Clean)
    prefix = f"{sample.__name__}:"
    assert found == {
        prefix + place
        for place in (
            "bare: x",
            "nested: x",
            "returns: return",
            "aliased: x",
            "annotated: x",
            "bounded: x",
            "bounded: return",
            "Box.field",
            "Box.method: args",
            "Box.prop: return",
            "Box.static: x",
        )
    }, found
