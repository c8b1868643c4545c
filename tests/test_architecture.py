"""The floors of ``docs/ARCHITECTURE.md`` hold in ``driver/``, and no import circle does.

Floors: the document's floor table (a row whose first cell is ``F<n> ...``) names, in its second
cell, the folders (``driver/core/``) and files (``driver/files.py``) of each floor, lowest first.
The test reads that table, so the document and the test cannot drift: every module of ``driver/``
must stand on exactly one floor (a file by its own row, else the deepest folder named that holds
it), every path named must exist, no module imports one on a higher floor, and none imports a
path of its own floor listed after its own (the order inside a floor). Imports under
``if TYPE_CHECKING:`` count here: a module that names a higher floor in its annotations depends
on it too.

Circles: the module import graph has no strongly connected component of more than one module.

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
  counted); the floor test and a second circle test count them too;
- only edges between modules of ``driver/`` are kept; ``importlib.import_module`` with a
  computed name is not an import statement and is not seen, but every ``load("<kind>")`` call
  (``driver.plugins``) is read as an import of ``driver/<kind>/`` for the floors.

The strongly connected components come from scipy (``scipy.sparse.csgraph``).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

REPO_ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = REPO_ROOT / "docs" / "ARCHITECTURE.md"

# Circles being removed on another branch; each entry must still be a circle (see the test), so
# an exception cannot outlive its circle. None today.
KNOWN_CIRCLES: list[frozenset[str]] = []

# Modules standing above the floor they belong to, each imported from below until it moves
# there: module -> where it goes. Each entry must still be imported from a lower floor (see the
# test), so an exception cannot outlive its climb.
KNOWN_CLIMBS: dict[str, str] = {}
# Paths the floor table names before they exist; each must still be absent (see the test).
PLANNED: dict[str, str] = {}
SATELLITES = 8  # the floor of the satellites: nothing on the mission's path (below it) imports them


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


def _runtime_imports(tree: ast.AST, annotations: bool = False) -> list[ast.Import | ast.ImportFrom]:
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


# --- floors -------------------------------------------------------------------------------

FLOOR_HEADER = re.compile(r"^\|\s*floor\s*\|")
FLOOR_ROW = re.compile(r"^\|\s*F(?P<floor>\d+)\b[^|]*\|(?P<where>[^|]*)\|")


def floor_table(text: str) -> dict[str, int]:
    """Path (``driver/core/`` or ``driver/files.py``) -> floor, from the rows of the floor table
    (the table whose header's first cell is ``floor``; a row's first cell is ``F<n> ...``, its
    second cell names the floor's ``driver/`` paths in backticks)."""
    floors: dict[str, int] = {}
    in_table = False
    for line in text.splitlines():
        in_table = bool(FLOOR_HEADER.match(line)) or (in_table and line.startswith("|"))
        row = FLOOR_ROW.match(line) if in_table else None
        if not row:
            continue
        for path in re.findall(r"`(driver/[^`]*)`", row["where"]):
            if path in floors:
                raise ValueError(f"{path} stands on two floors: F{floors[path]}, F{row['floor']}")
            floors[path] = int(row["floor"])
    return floors


def row_order(text: str) -> dict[str, int]:
    """Path -> its place in its floor's row (0: listed first, the lowest of the floor)."""
    order: dict[str, int] = {}
    listed: dict[int, int] = {}  # floor -> paths of its row read so far
    for path, floor in floor_table(text).items():  # in the table's order
        order[path] = listed.get(floor, 0)
        listed[floor] = order[path] + 1
    return order


def module_paths(package_dir: Path, floors: dict[str, int]) -> dict[str, str | None]:
    """Module -> the table's path it stands on: its file's own row, else the deepest folder
    named that holds it (None: on no floor)."""
    root = package_dir.parent
    found: dict[str, str | None] = {}
    for name, path in module_names(package_dir).items():
        relative = path.relative_to(root).as_posix()
        holders = [p for p in floors if p.endswith("/") and relative.startswith(p)]
        if relative in floors:
            found[name] = relative
        elif holders:
            found[name] = max(holders, key=len)
        else:
            found[name] = None
    return found


def module_floors(package_dir: Path, floors: dict[str, int]) -> dict[str, int | None]:
    """Module -> its floor (None: on no floor)."""
    return {
        name: None if path is None else floors[path]
        for name, path in module_paths(package_dir, floors).items()
    }


def against_row_order(
    graph: dict[str, set[str]],
    paths: dict[str, str | None],
    floors: dict[str, int],
    order: dict[str, int],
) -> list[tuple[str, str]]:
    """(importer, imported) for every import of a module of the importer's floor whose path
    the floor's row lists after the importer's own."""
    found = []
    for source, targets in graph.items():
        for target in targets:
            here, there = paths[source], paths[target]
            if here is None or there is None or here == there or floors[here] != floors[there]:
                continue
            if order[there] > order[here]:
                found.append((source, target))
    return sorted(found)


def climbs(graph: dict[str, set[str]], floor: dict[str, int | None]) -> list[tuple[str, str]]:
    """(importer, imported) for every import of a module on a higher floor than the importer."""
    return sorted(
        (source, target)
        for source, targets in graph.items()
        for target in targets
        if floor[source] is not None and floor[target] is not None and floor[target] > floor[source]  # type: ignore[operator]
    )


def describe_climbs(found: list[tuple[str, str]], floor: dict[str, int | None]) -> str:
    return "imports that climb a floor (docs/ARCHITECTURE.md):\n" + "\n".join(
        f"  {source} (F{floor[source]}) -> {target} (F{floor[target]})" for source, target in found
    )


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
    # The runtimes read plans (driver.runtimes.plan, the types a runtime receives) and the
    # registry holds the runtimes; planning needs the registry, so at run time it must not need
    # the runtimes back (the plan types apart: they import no runtime).
    graph = import_graph(REPO_ROOT / "driver")
    assert graph["driver.runtimes.plan"] == {"driver.model.case"}
    for planning in ("driver.core.command", "driver.core.plan", "driver.runtimes.plan"):
        runtimes = {
            name for name in graph[planning]
            if name.startswith("driver.runtimes") and name != "driver.runtimes.plan"
        }  # fmt: skip
        assert not runtimes, f"{planning} imports {sorted(runtimes)} at run time"


# --- the floor check on a tiny synthetic package -----------------------------------------

TINY_DOC = """
| floor | where | what |
|---|---|---|
| F0 base | `driver/__init__.py`, `driver/files.py` | plumbing |
| F1 kinds | `driver/kinds/` | plug-ins |
| F2 top | `driver/top/`, `driver/kinds/special.py` | the top |

| concept | where |
|---|---|
| F9 not a floor row | `driver/elsewhere.py` (another table is not read) |
"""


def test_the_floor_table_is_read_and_a_file_row_beats_its_folder(tmp_path: Path) -> None:
    floors = floor_table(TINY_DOC)
    assert floors == {
        "driver/__init__.py": 0,
        "driver/files.py": 0,
        "driver/kinds/": 1,
        "driver/top/": 2,
        "driver/kinds/special.py": 2,
    }
    package = (
        write_package(
            tmp_path,
            {
                "driver/__init__.py": "",
                "driver/files.py": "",
                "driver/kinds/__init__.py": "",
                "driver/kinds/base.py": "",
                "driver/kinds/special.py": "",
                "driver/top/__init__.py": "",
                "driver/stray.py": "",
            },
        ).parent
        / "driver"
    )
    assert module_floors(package, floors) == {
        "driver": 0,
        "driver.files": 0,
        "driver.kinds": 1,
        "driver.kinds.base": 1,
        "driver.kinds.special": 2,
        "driver.top": 2,
        "driver.stray": None,
    }
    with pytest.raises(ValueError, match="driver/files.py stands on two floors"):
        twice = "| F1 again | `driver/files.py` | |\n| F2 top |"
        floor_table(TINY_DOC.replace("| F2 top |", twice))


def test_a_climb_through_a_function_or_an_annotation_is_found(tmp_path: Path) -> None:
    package = (
        write_package(
            tmp_path,
            {
                "driver/__init__.py": "",
                "driver/files.py": "def f():\n    from driver.kinds import base\n",
                "driver/kinds/__init__.py": "",
                "driver/kinds/base.py": (
                    "from typing import TYPE_CHECKING\n"
                    "if TYPE_CHECKING:\n    from driver.top import thing\n"
                    "from driver import files\n"
                ),
                "driver/kinds/special.py": "from driver.top import thing\n",  # F2 -> F2: allowed
                "driver/top/__init__.py": "from driver.kinds import base\nthing = 1\n",
            },
        ).parent
        / "driver"
    )
    floor = module_floors(package, floor_table(TINY_DOC))
    found = climbs(import_graph(package, annotations=True), floor)
    assert found == [("driver.files", "driver.kinds.base"), ("driver.kinds.base", "driver.top")]
    assert "driver.files (F0) -> driver.kinds.base (F1)" in describe_climbs(found, floor)
    # without the annotations the type-only climb is invisible: the floor test counts them
    assert climbs(import_graph(package), floor) == [("driver.files", "driver.kinds.base")]


def test_an_import_against_the_order_of_its_floor_is_found(tmp_path: Path) -> None:
    floors = floor_table(TINY_DOC)
    assert row_order(TINY_DOC) == {
        "driver/__init__.py": 0,
        "driver/files.py": 1,
        "driver/kinds/": 0,
        "driver/top/": 0,
        "driver/kinds/special.py": 1,
    }
    package = (
        write_package(
            tmp_path,
            {
                "driver/__init__.py": "def f():\n    from driver import files\n",  # F0 0 -> 1
                "driver/files.py": "import driver\n",  # F0 1 -> 0: in order
                "driver/kinds/__init__.py": "",
                "driver/kinds/special.py": "from driver.top import a\n",  # F2 1 -> 0: in order
                "driver/top/__init__.py": "",
                "driver/top/a.py": "from driver.top import b\n",  # one path: free
                "driver/top/b.py": (
                    "from typing import TYPE_CHECKING\n"
                    "if TYPE_CHECKING:\n    from driver.kinds import special\n"  # F2 0 -> 1
                ),
            },
        ).parent
        / "driver"
    )
    paths = module_paths(package, floors)
    assert paths["driver.top.a"] == "driver/top/" and paths["driver.kinds.special"] == (
        "driver/kinds/special.py"
    )
    found = against_row_order(
        import_graph(package, annotations=True), paths, floors, row_order(TINY_DOC)
    )
    assert found == [("driver", "driver.files"), ("driver.top.b", "driver.kinds.special")]


# --- the floors of the real package ------------------------------------------------------


def real_floors() -> tuple[dict[str, int], dict[str, int | None]]:
    floors = floor_table(ARCHITECTURE.read_text(encoding="utf-8"))
    return floors, module_floors(REPO_ROOT / "driver", floors)


def test_the_document_names_floors_f0_to_f9_and_only_paths_that_exist() -> None:
    floors, _ = real_floors()
    assert sorted(set(floors.values())) == list(range(10)), "the floor table has F0 to F9"
    missing = [p for p in floors if p not in PLANNED and not (REPO_ROOT / p).exists()]
    assert not missing, f"docs/ARCHITECTURE.md names paths that do not exist: {missing}"
    unlisted = [p for p in PLANNED if p not in floors]
    assert not unlisted, f"PLANNED paths the floor table does not name: {unlisted}"
    made = [p for p in PLANNED if (REPO_ROOT / p).exists()]
    assert not made, f"these exist now, delete them from PLANNED: {made}"


def test_every_module_stands_on_one_floor() -> None:
    _, floor = real_floors()
    assert "driver.core.runner" in floor, "modules not read"
    homeless = sorted(name for name, value in floor.items() if value is None)
    assert not homeless, f"on no floor of docs/ARCHITECTURE.md (add them to its table): {homeless}"


def test_no_import_climbs_a_floor() -> None:
    _, floor = real_floors()
    found = climbs(import_graph(REPO_ROOT / "driver", annotations=True), floor)
    unexpected = [(source, target) for source, target in found if target not in KNOWN_CLIMBS]
    assert not unexpected, describe_climbs(unexpected, floor)
    gone = sorted(set(KNOWN_CLIMBS) - {target for _source, target in found})
    assert not gone, f"no longer imported from below, delete them from KNOWN_CLIMBS: {gone}"


def test_no_import_goes_against_the_order_inside_a_floor() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    floors = floor_table(text)
    paths = module_paths(REPO_ROOT / "driver", floors)
    found = against_row_order(
        import_graph(REPO_ROOT / "driver", annotations=True), paths, floors, row_order(text)
    )
    assert not found, "imports against the order of their floor's row (docs/ARCHITECTURE.md):\n" + (
        "\n".join(
            f"  {source} ({paths[source]}) -> {target} ({paths[target]})"
            for source, target in found
        )
    )


def plugin_loads(package_dir: Path) -> dict[str, set[str]]:
    """Module -> the plug-in packages it loads by name (``load("parsers")``: ``driver.parsers``),
    the imports ``driver.plugins`` makes for it that no import statement shows."""
    found: dict[str, set[str]] = {}
    for name, path in module_names(package_dir).items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            callee = getattr(node, "func", None)
            if getattr(callee, "id", getattr(callee, "attr", None)) != "load":
                continue
            kinds = [a.value for a in node.args if isinstance(a, ast.Constant)]  # type: ignore[attr-defined]
            found.setdefault(name, set()).update(f"{package_dir.name}.{kind}" for kind in kinds)
    return found


def test_a_plugin_load_is_read_as_an_import(tmp_path: Path) -> None:
    package = (
        write_package(
            tmp_path,
            {
                "driver/__init__.py": "",
                "driver/files.py": "from driver import plugins\nplugins.load('kinds')\n",
                "driver/kinds/__init__.py": "",
                "driver/top/__init__.py": "def f():\n    load('top', 'kinds')\n",
            },
        ).parent
        / "driver"
    )
    loads = plugin_loads(package)
    assert loads == {"driver.files": {"driver.kinds"}, "driver.top": {"driver.top", "driver.kinds"}}
    floor = module_floors(package, floor_table(TINY_DOC))
    assert climbs(loads, floor) == [("driver.files", "driver.kinds")]


def test_no_plugin_load_climbs_or_goes_against_a_floors_order() -> None:
    """``plugins.load(kind)`` imports ``driver/<kind>/`` by computed name: each call counts as an
    import of that package for the floors and their order."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    floors = floor_table(text)
    loads = plugin_loads(REPO_ROOT / "driver")
    assert loads["driver.model.measure"] == {"driver.parsers"}, "load calls not read"
    paths = module_paths(REPO_ROOT / "driver", floors)
    floor = module_floors(REPO_ROOT / "driver", floors)
    found = climbs(loads, floor) + against_row_order(loads, paths, floors, row_order(text))
    assert not found, describe_climbs(found, floor)


def test_measuring_a_log_loads_no_runtime() -> None:
    """``plugins.load`` imports by computed name, which the graph above cannot see: measuring a
    log (F2) must load the parsers only, no runtime, launcher or source."""
    script = (
        "import sys\n"
        "from driver.model.measure import parse_logs\n"
        "from driver.model.measure import LogParseError\n"
        "try:\n    parse_logs('dlperf-jsonl', {'node0.log': ''})\n"
        "except LogParseError:\n    pass\n"
        "assert 'driver.parsers.dlperf_jsonl' in sys.modules, 'parsers not loaded'\n"
        "above = sorted(m for m in sys.modules if m.split('.')[1:2] in "
        "(['runtimes'], ['sources'], ['launchers'], ['cluster'], ['images']))\n"
        "print(above)\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, check=False
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "[]", f"measuring a log imported {ran.stdout.strip()}"


def test_the_missions_path_imports_no_satellite() -> None:
    """Below the satellites' floor nothing imports them, even for annotations: a satellite can
    break without touching a run, a report, a release or an audit."""
    _, floor = real_floors()
    assert {floor[name] for name in ("driver.testbed", "driver.analysis")} == {SATELLITES}
    graph = import_graph(REPO_ROOT / "driver", annotations=True)
    reaching = [
        (source, target)
        for source, targets in graph.items()
        for target in targets
        if (floor[source] or 0) < SATELLITES and floor[target] == SATELLITES
    ]
    assert not reaching, describe_climbs(sorted(reaching), floor)
