"""No import circle inside ``driver/``: the module import graph has no strongly connected
component of more than one module.

The graph is read from the source with ``ast``, nothing is imported:

- every ``import x`` and ``from x import y`` counts, wherever it stands (module level, inside a
  function, a ``try`` or an ``if``): a function-local import is still a circle the moment the
  function runs;
- relative imports (``from . import x``, ``from ..core import y``) are resolved against the
  importing module's package;
- ``from package import name`` points at ``package.name`` when that is a module of ``driver/``,
  else at ``package`` itself; an import names its target module, not the packages above it;
- imports inside an ``if TYPE_CHECKING:`` block (``TYPE_CHECKING`` or ``typing.TYPE_CHECKING``)
  never run and are skipped for the run-time graph (the block's ``else:`` branch does run and is
  counted); a second test counts them too, so no circle hides in annotations either;
- only edges between modules of ``driver/`` are kept; ``importlib.import_module`` with a
  computed name (``driver.plugins.load_all``) is not an import statement and is not seen.

The strongly connected components come from scipy (``scipy.sparse.csgraph``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

REPO_ROOT = Path(__file__).resolve().parents[1]

# Circles being removed on another branch; each entry must still be a circle (see the test), so
# an exception cannot outlive its circle. None today.
KNOWN_CIRCLES: list[frozenset[str]] = []


def module_names(package_dir: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under ``package_dir`` (a package's
    ``__init__.py`` is the package's own name)."""
    root = package_dir.parent
    modules = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _is_type_checking_block(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _runtime_imports(
    tree: ast.AST, annotations: bool = False
) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of the tree except those under ``if TYPE_CHECKING:`` (with
    ``annotations``, those too)."""
    found: list[ast.Import | ast.ImportFrom] = []
    pending = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        if _is_type_checking_block(node) and not annotations:
            pending.extend(node.orelse)  # only the else branch ever runs
            continue
        pending.extend(ast.iter_child_nodes(node))
    return found


def _deepest_known(dotted: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of ``dotted`` that is a module of the package (``import a.b.c``
    where only ``a.b`` is ours -> ``a.b``)."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def imported_modules(
    name: str, path: Path, modules: dict[str, Path], annotations: bool = False
) -> set[str]:
    """The package's modules that module ``name`` imports at run time (with ``annotations``,
    for type annotations too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    targets: set[str] = set()
    for node in _runtime_imports(tree, annotations):
        if isinstance(node, ast.Import):
            for alias in node.names:
                targets.add(_deepest_known(alias.name, modules) or "")
            continue
        base = node.module or ""
        if node.level:  # relative: from the importing module's package, up level - 1
            package = name.split(".") if is_package else name.split(".")[:-1]
            anchor = package[: len(package) - (node.level - 1)]
            base = ".".join([*anchor, *([node.module] if node.module else [])])
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            targets.add(submodule if submodule in modules else _deepest_known(base, modules) or "")
    targets.discard("")
    targets.discard(name)
    return targets


def import_graph(package_dir: Path, annotations: bool = False) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (see the module docstring for the rules;
    ``annotations`` counts ``if TYPE_CHECKING:`` imports too)."""
    modules = module_names(package_dir)
    return {
        name: imported_modules(name, path, modules, annotations) for name, path in modules.items()
    }


def import_circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module, largest first."""
    names = sorted(graph)
    index = {name: position for position, name in enumerate(names)}
    rows = [index[source] for source in names for _ in graph[source]]
    columns = [index[target] for source in names for target in sorted(graph[source])]
    matrix = csr_matrix(
        (np.ones(len(rows), dtype=np.int8), (rows, columns)), shape=(len(names), len(names))
    )
    _count, labels = connected_components(matrix, directed=True, connection="strong")
    components: dict[int, set[str]] = {}
    for name, label in zip(names, labels, strict=True):
        components.setdefault(int(label), set()).add(name)
    circles = [frozenset(members) for members in components.values() if len(members) > 1]
    return sorted(circles, key=lambda circle: (-len(circle), sorted(circle)))


def describe_circle(circle: frozenset[str], graph: dict[str, set[str]]) -> str:
    """The circle's modules, each with the imports that keep it inside the circle."""
    lines = [f"import circle of {len(circle)} modules:"]
    for name in sorted(circle):
        lines.append(f"  {name} -> {', '.join(sorted(graph[name] & circle))}")
    return "\n".join(lines)


# --- the cycle finder on tiny synthetic packages -------------------------------------------


def write_package(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def test_a_circle_through_a_function_local_relative_import_is_found(tmp_path: Path) -> None:
    package = write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg.b import thing\n",
            "pkg/b.py": "def thing():\n    from .c import other\n    return other\n",
            "pkg/c.py": "import pkg.a\nother = 1\n",
            "pkg/d.py": "from pkg import a\n",  # imports the circle, is not part of it
        },
    )
    graph = import_graph(package)
    assert graph["pkg.b"] == {"pkg.c"}
    assert graph["pkg.d"] == {"pkg.a"}
    assert import_circles(graph) == [frozenset({"pkg.a", "pkg.b", "pkg.c"})]
    assert "pkg.c -> pkg.a" in describe_circle(import_circles(graph)[0], graph)


def test_parent_relative_imports_and_package_inits_resolve(tmp_path: Path) -> None:
    package = write_package(
        tmp_path,
        {
            "pkg/__init__.py": "from .sub import x\n",
            "pkg/sub/__init__.py": "from . import leaf\nx = 1\n",
            "pkg/sub/leaf.py": "from .. import top\nfrom ..sub import leaf2\n",
            "pkg/sub/leaf2.py": "from ...outside import nothing\n",
            "pkg/top.py": "import os\nimport pkg.sub.leaf\n",
        },
    )
    graph = import_graph(package)
    assert graph["pkg"] == {"pkg.sub"}  # ``x`` is a name, not a module: the package itself
    assert graph["pkg.sub"] == {"pkg.sub.leaf"}
    assert graph["pkg.sub.leaf"] == {"pkg.top", "pkg.sub.leaf2"}
    assert graph["pkg.sub.leaf2"] == set()
    assert import_circles(graph) == [frozenset({"pkg.sub.leaf", "pkg.top"})]


def test_type_checking_imports_are_skipped_but_their_else_branch_is_not(tmp_path: Path) -> None:
    package = write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "import pkg.b\n",
            "pkg/b.py": (
                "import typing\nfrom typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from pkg.a import A\n"
                "if typing.TYPE_CHECKING:\n    import pkg.a\n"
            ),
            "pkg/c.py": "import pkg.a\n",
            "pkg/d.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    pass\nelse:\n    import pkg.c\n"
            ),
            "pkg/e.py": "import pkg.d\n",
        },
    )
    graph = import_graph(package)
    assert graph["pkg.b"] == set()
    assert graph["pkg.d"] == {"pkg.c"}
    assert import_circles(graph) == []
    (package / "c.py").write_text("import pkg.a\nimport pkg.e\n")  # c -> e -> d -> c
    assert import_circles(import_graph(package)) == [frozenset({"pkg.c", "pkg.d", "pkg.e"})]


# --- the real package --------------------------------------------------------------------


def test_driver_has_no_import_circle() -> None:
    graph = import_graph(REPO_ROOT / "driver")
    assert "driver.core.runner" in graph and graph["driver.core.runner"], "graph not read"
    circles = import_circles(graph)
    unexpected = [circle for circle in circles if circle not in KNOWN_CIRCLES]
    assert not unexpected, "\n\n".join(describe_circle(circle, graph) for circle in unexpected)
    gone = [sorted(circle) for circle in KNOWN_CIRCLES if circle not in circles]
    assert not gone, f"no longer circles, delete them from KNOWN_CIRCLES: {gone}"


def test_driver_has_no_import_circle_even_through_annotations() -> None:
    """The stricter reading: a module that names another in its annotations still depends on
    it; the package has no circle that way either."""
    graph = import_graph(REPO_ROOT / "driver", annotations=True)
    circles = import_circles(graph)
    assert not circles, "\n\n".join(describe_circle(circle, graph) for circle in circles)


def test_planning_reaches_runtimes_for_annotations_only() -> None:
    # The runtimes read plans (driver.core.repeatplan) and the registry holds the runtimes;
    # planning needs the registry, so at run time it must not need the runtimes back.
    graph = import_graph(REPO_ROOT / "driver")
    assert graph["driver.core.repeatplan"] == {"driver.model.case"}
    for planning in ("driver.core.command", "driver.core.plan", "driver.core.repeatplan"):
        runtimes = {name for name in graph[planning] if name.startswith("driver.runtimes")}
        assert not runtimes, f"{planning} imports {sorted(runtimes)} at run time"
