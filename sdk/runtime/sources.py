"""The producer's own modules that a job's code reaches, found the way cloudpickle finds them.

cloudpickle writes a function or class of an importable module as a reference (`mytasks.double`)
and the worker imports it by name, so the job runs only where that module is installed. The
modules that need shipping are exactly the ones such references name, less what every box has:
the standard library and anything installed (site-packages, or any distribution's top-level
package, editable installs too). They are found by pickling the job's call once into nothing
with a pickler that notes each module a reference names; bulk values (arrays, tensors, bytes)
are stubbed out, so the walk costs what the call's code and small arguments cost.

A module is shipped as its top-level package folder (or its one file), since importing
`myproj.features` imports `myproj` first.
"""

from __future__ import annotations

import functools
import importlib.metadata
import io
import site
import sys
import sysconfig
import types
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cloudpickle

__all__ = ["Source", "own_sources"]


@dataclass(frozen=True)
class Source:
    """A top-level module to ship: its name, and the folder or file it is made of."""

    name: str
    path: Path

    @property
    def is_package(self) -> bool:
        return self.path.is_dir()


def own_sources(*objects: Any) -> list[Source]:
    """The producer's own top-level modules that pickling `objects` refers to, and those that
    these import in turn (a shipped `mytasks` that does `from myproj import f` needs `myproj`
    on the worker too), by name."""
    found: dict[str, Source] = {}
    pending = _referenced_modules(objects)
    while pending:
        name = pending.pop()
        source = _own(name)
        if source is None or source.name in found:
            continue
        found[source.name] = source
        pending |= _imported_by(source.name)
    return [found[name] for name in sorted(found)]


def _imported_by(top: str) -> set[str]:
    """The modules that the loaded modules of package `top` hold in their globals: what their
    top-level `import` and `from ... import` statements brought in."""
    names: set[str] = set()
    for name, module in list(sys.modules.items()):
        if module is None or (name != top and not name.startswith(top + ".")):
            continue
        for value in list(vars(module).values()):
            if isinstance(value, types.ModuleType):
                names.add(value.__name__)
            elif isinstance(value, (type, types.FunctionType)):
                owner = getattr(value, "__module__", None)
                if isinstance(owner, str):
                    names.add(owner)
    return names


class _Noting(cloudpickle.Pickler):  # type: ignore[misc]  # cloudpickle ships no types
    """A cloudpickle pickler that notes the module of every function, class and module it
    meets, and writes nothing of bulk values."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO())
        self.modules: set[str] = set()

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, types.ModuleType):
            self.modules.add(obj.__name__)
        elif isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)):
            module = getattr(obj, "__module__", None)
            if isinstance(module, str):
                self.modules.add(module)
        elif _is_bulk(obj):
            self.modules.add(type(obj).__module__)
            return (_nothing, ())
        return super().reducer_override(obj)


def _nothing() -> None:
    return None


def _is_bulk(obj: Any) -> bool:
    """Values whose bytes say nothing about code: their class's module is all that counts."""
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return len(obj) > 4096
    module = type(obj).__module__
    return module.startswith(("numpy", "torch")) and hasattr(obj, "shape")


def _referenced_modules(objects: Iterable[Any]) -> set[str]:
    pickler = _Noting()
    for obj in objects:
        pickler.dump(obj)
    return pickler.modules


def _own(module_name: str) -> Source | None:
    top = module_name.partition(".")[0]
    if not top or top == "__main__" or top in sys.stdlib_module_names:
        return None
    if top in sys.builtin_module_names or top in _installed_tops():
        return None
    module = sys.modules.get(top)
    if module is None:
        return None  # named but never imported here: nothing on this box to ship
    path = _module_path(module)
    if path is None or _is_installed_path(path):
        return None
    return Source(top, path)


def _module_path(module: types.ModuleType) -> Path | None:
    """The package folder or the module's file; None for built-in and namespace-less ones."""
    paths = list(getattr(module, "__path__", []) or [])
    if paths:
        return Path(paths[0]).resolve()
    file = getattr(module, "__file__", None)
    return Path(file).resolve() if file else None


@functools.cache
def _installed_tops() -> frozenset[str]:
    """Top-level names some installed distribution provides (an editable install too)."""
    return frozenset(importlib.metadata.packages_distributions())


@functools.cache
def _installed_roots() -> tuple[Path, ...]:
    roots = set(site.getsitepackages()) | {site.getusersitepackages()}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        roots.add(sysconfig.get_paths()[key])
    return tuple(Path(r).resolve() for r in roots if r)


def _is_installed_path(path: Path) -> bool:
    return any(path.is_relative_to(root) for root in _installed_roots())
