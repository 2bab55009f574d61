"""Rules of the source layout that review alone would let drift (issue 38), read from the source
with `ast`, so no tool or import runs: each checks a rule that a later change could break.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The folders that ship, as pyproject maps them (test_packaging.py checks that mapping).
SOURCE = ("sdk", "server", "daemon", "controller", "providers", "cli")
#: The environment that names a process's control plane, read once (sdk/plane/env.py).
PLANE_ENV = {"LAKESHORE_URL", "LAKESHORE_TOKEN", "LAKESHORE_NAMESPACE"}


def sources() -> Iterator[tuple[str, ast.Module]]:
    for folder in SOURCE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(), str(path))


def _is_environ(node: ast.expr) -> bool:
    """`os.environ` or a bare `environ`."""
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ"
    )


def _read_key(node: ast.AST) -> ast.expr | None:
    """The key an environment read looks up: `environ.get(k)`, `getenv(k)`, `environ[k]`,
    `k in environ`; None for anything else (writes included)."""
    if isinstance(node, ast.Call) and node.args:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "get" and _is_environ(func.value):
            return node.args[0]
        if (isinstance(func, ast.Attribute) and func.attr == "getenv") or (
            isinstance(func, ast.Name) and func.id == "getenv"
        ):
            return node.args[0]
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        return node.slice if _is_environ(node.value) else None
    if (
        isinstance(node, ast.Compare)
        and isinstance(node.ops[0], ast.In | ast.NotIn)
        and _is_environ(node.comparators[0])
    ):
        return node.left
    return None


def _constants(tree: ast.Module) -> dict[str, str]:
    """Module-level `NAME = "text"`: a read through a named constant counts as the text's."""
    return {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        if isinstance(node.value.value, str)
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def plane_env_reads() -> dict[tuple[str, str], set[str]]:
    """(file, enclosing function) -> the plane variables it reads from the environment."""
    found: dict[tuple[str, str], set[str]] = {}
    for path, tree in sources():
        names = _constants(tree)

        def visit(
            node: ast.AST, where: str, path: str = path, names: dict[str, str] = names
        ) -> None:
            key = _read_key(node)
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                text: str | None = key.value
            else:
                text = names.get(key.id) if isinstance(key, ast.Name) else None
            if text in PLANE_ENV:
                found.setdefault((path, where), set()).add(text)
            inner = node.name if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else where
            for child in ast.iter_child_nodes(node):
                visit(child, inner)

        visit(tree, "<module>")
    return found


def test_each_plane_variable_is_read_from_the_environment_in_one_function() -> None:
    """LAKESHORE_URL, _TOKEN and _NAMESPACE were read in 11 places, each deciding for itself what
    an empty value means; every other module asks `env_url()`, `env_token()`, `env_namespace()`.
    (Click's `envvar=` on command options is a declaration, not a read here, and writes into a
    child's environment are not reads.)"""
    assert plane_env_reads() == {
        ("sdk/plane/env.py", "env_url"): {"LAKESHORE_URL"},
        ("sdk/plane/env.py", "env_token"): {"LAKESHORE_TOKEN"},
        ("sdk/plane/env.py", "env_namespace"): {"LAKESHORE_NAMESPACE"},
    }


#: What the store, the bottom layer, must not import at module level: the SDK layers above it.
#: The circle plane <-> objects <-> spill closed only through imports inside functions.
ABOVE_THE_STORE = (
    "dreamlake.lakeshore.spill",
    "dreamlake.lakeshore.objects",
    "dreamlake.lakeshore.queue",
)


def module_level_imports(tree: ast.Module, package: str) -> Iterator[str]:
    """The absolute module names a module imports when it is imported: every import outside a
    function body (class bodies and `if TYPE_CHECKING:` blocks included), relative ones resolved
    against `package`, and `from pkg import name` also as `pkg.name` (it may be a module)."""
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = ".".join(parts[: len(parts) - node.level + 1]) if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            yield module
            yield from (f"{module}.{alias.name}" for alias in node.names)
        pending.extend(ast.iter_child_nodes(node))


def test_the_store_imports_nothing_above_it() -> None:
    store = ROOT / "sdk" / "plane" / "store"
    assert list(store.glob("*.py")), "the store moved: point this test at it"
    bad = {
        (path.name, name)
        for path in sorted(store.glob("*.py"))
        for name in module_level_imports(
            ast.parse(path.read_text()), "dreamlake.lakeshore.plane.store"
        )
        if any(name == above or name.startswith(f"{above}.") for above in ABOVE_THE_STORE)
    }
    assert not bad, f"plane/store imports a layer above it at module level: {sorted(bad)}"


def test_the_import_check_resolves_relative_imports() -> None:
    """The check above would pass vacuously if it misread `from ...spill import x`."""
    tree = ast.parse(
        "from ...spill import is_spilled\nfrom ... import objects\nfrom .queues import Q\n"
        "if True:\n    import dreamlake.lakeshore.queue\n"
        "def later() -> None:\n    from ...queue import SyncQueue\n"
    )
    names = set(module_level_imports(tree, "dreamlake.lakeshore.plane.store"))
    assert {
        "dreamlake.lakeshore.spill",
        "dreamlake.lakeshore.objects",
        "dreamlake.lakeshore.plane.store.queues",
        "dreamlake.lakeshore.queue",
    } <= names
    assert "dreamlake.lakeshore.queue.SyncQueue" not in names  # inside a function: not counted


#: The three parts of the SDK whose import circle closed only through imports inside functions:
#: the planes, the object store and spill (issue 38).
CIRCLE = ("sdk/plane", "sdk/objects", "sdk/spill.py")
#: Imports inside functions that cross between them and stay: each loads a part on first use.
LAZY_LINKS = {
    # `HttpPlane.object_tier`: the object store loads with the first object transfer, not with an
    # HTTP-only producer's plane. Its module-level twin would close no circle (the object store
    # imports only plane.wire and plane.default, which never import plane.http at module level).
    ("sdk/plane/http.py", "dreamlake.lakeshore.objects.plane"),
}


def module_of(path: str) -> tuple[str, str]:
    """(the module `path` is, the package its relative imports resolve against)."""
    parts = Path(path).with_suffix("").parts[1:]  # sdk/ is the package dreamlake.lakeshore
    name = ".".join(("dreamlake", "lakeshore", *parts))
    if parts and parts[-1] == "__init__":
        name = name.removesuffix(".__init__")
        return name, name
    return name, name.rpartition(".")[0]


def runtime_imports(tree: ast.Module, package: str, *, functions: bool) -> Iterator[str]:
    """What a module imports when it runs: module level (not `if TYPE_CHECKING:`), and with
    `functions`, only what function bodies import."""

    def walk(node: ast.AST, inside: bool) -> Iterator[str]:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in walk(child, inside))
            return
        inside = inside or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        if isinstance(node, ast.Import | ast.ImportFrom) and inside == functions:
            yield from module_level_imports(ast.Module(body=[node], type_ignores=[]), package)
        for child in ast.iter_child_nodes(node):
            yield from walk(child, inside)

    yield from walk(tree, False)


def circle_modules() -> dict[str, tuple[str, ast.Module]]:
    """Module name -> (its file, its tree), for every module of the three parts."""
    found: dict[str, tuple[str, ast.Module]] = {}
    for part in CIRCLE:
        where = ROOT / part
        for path in sorted(where.rglob("*.py")) if where.is_dir() else [where]:
            rel = path.relative_to(ROOT).as_posix()
            found[module_of(rel)[0]] = (rel, ast.parse(path.read_text(), rel))
    return found


def import_graph(*, functions: bool) -> dict[str, set[str]]:
    """Module -> the modules of the three parts it imports. Importing `a.b.c` from outside `a.b`
    runs `a.b`'s `__init__` first, so that counts as importing `a.b` too (from inside, `a.b` is
    already being imported)."""
    modules = circle_modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, (path, tree) in modules.items():
        for target in runtime_imports(tree, module_of(path)[1], functions=functions):
            parts = target.split(".")
            for end in range(3, len(parts) + 1):
                module = ".".join(parts[:end])
                inside = name == module or name.startswith(f"{module}.")
                if module in modules and not inside:
                    graph[name].add(module)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as the path that closes it, or None."""
    state: dict[str, int] = {}  # 1: on the path being walked, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for after in sorted(graph.get(node, ())):
            if state.get(after) == 1:
                return [*path[path.index(after) :], after]
            if after not in state and (cycle := visit(after)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def test_no_import_circle_among_the_planes_the_object_store_and_spill() -> None:
    """The planes, the object store and spill import one another at module level with no cycle
    (so each loads without depending on import order)."""
    graph = import_graph(functions=False)
    assert "dreamlake.lakeshore.objects.plane" in graph and "dreamlake.lakeshore.spill" in graph
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_the_circle_does_not_close_through_imports_inside_functions() -> None:
    """It used to: the store's retention imported spill, and the plane tier the default plane and
    the wire decoding, each inside a function. Now the spilled-key test is storage.py's, the
    wire decoding is imported at module level, and objects get their plane from their caller."""
    modules = circle_modules()
    crossing = {
        (path, target)
        for name, (path, tree) in modules.items()
        for target in runtime_imports(tree, module_of(path)[1], functions=True)
        if target in modules and target.split(".")[2] != name.split(".")[2]
    }
    assert crossing == LAZY_LINKS


def test_the_cycle_check_finds_a_cycle() -> None:
    """The checks above would pass vacuously if `find_cycle` missed one, or the graph lost the
    implicit import of a module's package."""
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    graph = import_graph(functions=False)
    assert {"dreamlake.lakeshore.plane", "dreamlake.lakeshore.plane.wire"} <= graph[
        "dreamlake.lakeshore.objects.plane"
    ]


def test_imports_across_folders_are_absolute() -> None:
    """A folder's dependencies show in its own files: `from ..plane.store import SqlStore` in
    server/app.py named a `..plane` that does not exist beside it (issue 38). Relative imports
    stay only within a folder (level 1)."""
    leaving = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for folder in SOURCE
        for path in (ROOT / folder).rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.level >= 2
    ]
    assert not leaving, f"relative imports that leave their folder: {leaving}"


def test_the_sdk_import_contract_lists_every_module_of_sdk() -> None:
    """import-linter's `sdk-below` names sdk's modules one by one (they sit beside the other
    folders under the root package, so no wildcard can pick them out): a module left off the
    list would be free to import the server or the daemon, and nothing would say so."""
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11+")
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (sdk_below,) = [c for c in contracts["contracts"] if c["id"] == "sdk-below"]
    sdk = ROOT / "sdk"
    children = {
        p.stem if p.is_file() else p.name
        for p in sdk.iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()
    }
    listed = {m.removeprefix("dreamlake.lakeshore.") for m in sdk_below["source_modules"]}
    assert listed == children
