"""Rules of the source layout that review alone would let drift (issue 38), read from the source
with `ast`, so no tool or import runs: each checks a rule that a later change could break.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The folders that ship, as pyproject maps them (test_packaging.py checks that mapping).
SOURCE = ("sdk", "server", "daemon", "controller", "providers", "cli")
#: The environment that names a process's control plane, read once (sdk/plane/default.py).
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
        ("sdk/plane/default.py", "env_url"): {"LAKESHORE_URL"},
        ("sdk/plane/default.py", "env_token"): {"LAKESHORE_TOKEN"},
        ("sdk/plane/default.py", "env_namespace"): {"LAKESHORE_NAMESPACE"},
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
