"""`vllm_load` has no import cycle, counting imports inside functions as well as module-level ones.

The modules are parsed with `ast`, never imported. Every `import` and `from ... import` naming a
`vllm_load` module is an edge, wherever it stands: at module level, inside a function or method,
under `if TYPE_CHECKING:` or in a `try:`. An import inside a function that exists to keep a heavy
or incompatible library out of some process still says which way the dependency points, so it
counts like any other.

How a statement becomes edges:

- `import a.b.c` and `from a.b import c` where `a/b/c.py` (or `a/b/c/`) is a module or package:
  an edge to `a.b.c`. `from a.b import name` where `name` is not a module: an edge to `a.b` (its
  `__init__`). Relative imports are resolved against the importing module's package.
- Importing `a.b.c` also runs the `__init__` of `a` and `a.b`; those are edges too, except to the
  importer's own ancestor packages. Python has started those before the importer runs, so a
  package's `__init__` importing its submodules, and the submodules importing their siblings,
  is no cycle. A submodule that takes a name from its own package's `__init__` (`from . import
  name`, where `name` is defined there) is an edge to that `__init__`, and is flagged if the
  `__init__` imports it back: that is the partially initialised module case.
- A string constant that is exactly the name of one of the package's modules is an edge too:
  that is how cli/main names the subcommand modules it loads with `importlib.import_module`,
  so a subcommand that imports cli/main (to reuse its parser) closes a cycle.

Each cycle is printed as a chain of imports: the shortest one through each module on a cycle.

The imports left inside functions are there to keep a heavy library out of processes that do not
need it; `test_heavy_libraries_stay_out` checks that they still do.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support import ROOT as SUPPORT_ROOT

PACKAGE = "vllm_load"
ROOT = Path(SUPPORT_ROOT)


def module_files(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> source file, for every module of `package` under `root`.

    A package is named by its `__init__.py` (`vllm_load.report`, not `vllm_load.report.__init__`).
    """
    found: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute name a `from {'.' * level}{target} import ...` in `module` refers to."""
    if level == 0:
        return target or ""
    base = module.split(".")
    # a package's own relative imports start from itself, a module's from its package
    base = base[: len(base) - (level - 1)] if is_package else base[: len(base) - level]
    return ".".join(base + ([target] if target else []))


def imported_modules(module: str, is_package: bool, source: str, modules: set[str]) -> set[str]:
    """The modules of `modules` that `module`'s source names in an import, anywhere in it, or in
    a string (for importlib).

    `from a.b import name` is an import of `a.b.name` when that is a module, else of `a.b`.
    """
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_package, node.level, node.module)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in modules else base)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.add(node.value)  # a module named for importlib (kept only if it is one)
    return found & modules


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of `package` it imports (by the rules in this file's docstring)."""
    files = module_files(root, package)
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        own = {*_ancestors(module), module}
        edges: set[str] = set()
        for target in imported_modules(module, is_package, path.read_text(), set(files)):
            edges.add(target)
            edges.update(a for a in _ancestors(target) if a not in own and a in files)
        edges.discard(module)
        graph[module] = edges
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The shortest cycle through each module that is on one, without repeats.

    Each cycle is a chain `[a, b, ..., a]` following the edges, started at its smallest name, so
    the report is stable. Modules that reach each other (a strongly connected component) are
    found first; a self-import is a cycle of its own.
    """
    cycles: set[tuple[str, ...]] = set()
    for component in _strongly_connected(graph):
        if len(component) == 1 and not set(component) & graph.get(min(component), set()):
            continue
        for start in component:
            chain = _chain_through(graph, start, component)[:-1]
            first = chain.index(min(chain))
            rotated = chain[first:] + chain[:first]
            cycles.add((*rotated, rotated[0]))
    return sorted(list(cycle) for cycle in cycles)


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm, iterative (the package is small, but recursion limits are not)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                components.append(component)
    return components


def _chain_through(graph: dict[str, set[str]], start: str, component: set[str]) -> list[str]:
    """The shortest path of imports from `start` back to `start` inside `component` (BFS)."""
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph.get(node, ())):
                if child == start:
                    chain = [node]
                    while chain[-1] != start:
                        chain.append(previous[chain[-1]])
                    return [start, *reversed(chain[:-1]), start]
                if child in component and child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"{start} is in a cycle but no path leads back to it")


def _describe(cycles: list[list[str]]) -> str:
    return "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_vllm_load_has_no_import_cycle():
    cycles = find_cycles(import_graph(ROOT, PACKAGE))
    assert not cycles, f"import cycles in {PACKAGE}:\n{_describe(cycles)}"


#: The floors of `vllm_load`, lowest first: each top-level module or package (`vllm_load` itself
#: is its `__init__`) stands on one. A module imports its own package's modules and the packages
#: of lower floors, never a higher floor nor another package of its own floor, so every
#: dependency points down and two packages never lean on each other (docs/architecture.md).
FLOORS: tuple[frozenset[str], ...] = (
    # foundations: values a user types, declarations, other libraries' internals, process set-up
    frozenset(
        {"vllm_load", "user_values", "figures", "load_kinds", "endpoints", "compat", "tokenization"}
        | {"gc_policy", "parent_death", "huge_pages"}
    ),
    # contracts and pure inputs: the option machinery, the SLO grammar, the run directory, the
    # workload, the server outside the load; how a process takes its stop signals
    frozenset({"option_spec", "slo", "run_format", "workload", "server", "stop_signals"}),
    # the rules that end a ladder early, named as the SLO grammar names the figures
    frozenset({"stop_when"}),
    # every option, declared once
    frozenset({"settings"}),
    # the load and the figures: neither knows the other
    frozenset({"client", "analysis"}),
    # one test on the master
    frozenset({"run"}),
    # what stands on a run or its data: the live run's UI, the report, the simulated server
    frozenset({"web", "report", "sim"}),
    # the results store: what the report measures and draws, kept across runs (its trend page
    # draws with the report's charts)
    frozenset({"store"}),
    # what a locustfile imports: the users, and the run and its UI wired into Locust
    frozenset({"api"}),
    # the programs
    frozenset({"cli", "locustfile"}),
    frozenset({"__main__"}),
)


def _package_of(module: str) -> str:
    """The top-level module or package `module` belongs to (`vllm_load` for the `__init__`)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def floor_of(floors: tuple[frozenset[str], ...]) -> dict[str, int]:
    return {package: i for i, floor in enumerate(floors) for package in floor}


def upward_imports(graph: dict[str, set[str]], floors: tuple[frozenset[str], ...]) -> list[str]:
    """Each import that does not point to a lower floor, as `a -> b (floor i -> floor j)`, and
    each top-level package on no floor."""
    floor = floor_of(floors)
    packages = {_package_of(m) for m in graph}
    found = [f"{p} stands on no floor" for p in sorted(packages - set(floor))]
    for module in sorted(graph):
        a = _package_of(module)
        for target in sorted(graph[module]):
            b = _package_of(target)
            if a != b and a in floor and b in floor and floor[a] <= floor[b]:
                found.append(f"{module} -> {target} (floor {floor[a]} -> floor {floor[b]})")
    return found


def test_every_import_points_to_a_lower_floor():
    found = upward_imports(import_graph(ROOT, PACKAGE), FLOORS)
    assert not found, "imports that do not point down:\n" + "\n".join(found)


def test_each_package_stands_on_one_floor():
    named = [p for floor in FLOORS for p in floor]
    assert len(named) == len(set(named))


def test_upward_and_sideways_imports_are_found():
    floors = (frozenset({"low"}), frozenset({"mid", "side"}), frozenset({"top"}))
    graph = {
        "pkg.low.a": set(),
        "pkg.mid.b": {"pkg.low.a", "pkg.mid.c"},  # down, and inside its own package
        "pkg.mid.c": {"pkg.top"},  # up
        "pkg.side": {"pkg.mid.b"},  # sideways, on its own floor
        "pkg.top": {"pkg.mid.b", "pkg.side"},
        "pkg.stray": set(),
    }
    assert upward_imports(graph, floors) == [
        "stray stands on no floor",
        "pkg.mid.c -> pkg.top (floor 1 -> floor 2)",
        "pkg.side -> pkg.mid.b (floor 1 -> floor 1)",
    ]


#: process -> (what it imports first, the libraries it must not import)
_PROCESSES = {
    # the whole parser (`build_parser()`), which imports every subcommand module
    "command": (
        "from vllm_load.cli.main import build_parser; build_parser()",
        ("pandas", "matplotlib", "scipy", "locust", "gevent", "aiohttp", "flask", "yaml"),
    ),
    "load process": (
        "import vllm_load.locustfile",
        ("pandas", "matplotlib", "scipy", "aiohttp", "yaml"),
    ),
    # a command builds only its own subcommand's parser: `run` and `sim` (every test's simulator)
    # never pay for the results store's SQLAlchemy, nor `run` for the simulator's aiohttp; none
    # for PyYAML, which only --meta-file reads
    "run command": (
        "from vllm_load.cli.main import build_parser; build_parser(only='run')",
        ("sqlalchemy", "pandas", "locust", "aiohttp", "yaml"),
    ),
    "sim command": (
        "from vllm_load.cli.main import build_parser; build_parser(only='sim')",
        ("sqlalchemy", "pandas", "locust", "gevent", "yaml"),
    ),
    # a path that names no run is refused before the analysis's imports (~1.5 s of CPU)
    "report refusing a path": (
        "from vllm_load.cli.main import main; main(['report', '/nonexistent/vllm-load-no-run'])",
        ("pandas", "matplotlib", "numpy"),
    ),
    # the SLO-max search refuses its bounds before it draws anything
    "tune refusing bounds": (
        "from vllm_load.cli.main import main; main(['tune', '--slo', 'e2e_p99<=1s', '--host', "
        "'http://127.0.0.1:9', '--out', '/nonexistent/vllm-load-tune', '--min-level', '8', "
        "'--max-level', '4'])",
        ("matplotlib",),
    ),
}


@pytest.mark.parametrize("process", sorted(_PROCESSES))
def test_heavy_libraries_stay_out(process):
    """Every command starts without pandas, Locust or aiohttp, and a load process without pandas
    (checked in a child process: gevent must not patch pytest's)."""
    first, heavy = _PROCESSES[process]
    code = f"import sys; {first}; print(' '.join(m for m in {heavy!r} if m in sys.modules))"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == [], f"{process} imports {proc.stdout.strip()}"


def test_the_graph_sees_the_package():
    graph = import_graph(ROOT, PACKAGE)
    assert "vllm_load.cli.main" in graph
    # `from .. import name`, an import inside a function, `from ..pkg import name`
    assert "vllm_load" in graph["vllm_load.cli.main"]
    assert "vllm_load.report.render" in graph["vllm_load.cli.demo"]
    assert "vllm_load.sim.child" in graph["vllm_load.cli.locust_process"]
    assert "vllm_load.cli.validate_client" in graph["vllm_load.cli.main"]  # by importlib


def test_a_module_named_for_importlib_is_an_edge(tmp_path):
    _write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/main.py": 'import importlib\nCOMMANDS = {"a": "pkg.sub"}\n',
            "pkg/sub.py": "def main():\n    from .main import COMMANDS\n",
        },
    )
    assert find_cycles(import_graph(tmp_path, "pkg")) == [["pkg.main", "pkg.sub", "pkg.main"]]


def test_find_cycles_on_a_hand_made_graph():
    graph = {
        "a": {"b"},
        "b": {"c"},
        "c": {"a", "d"},
        "d": set(),
        "e": {"e"},
        "f": {"g"},
        "g": set(),
    }
    assert find_cycles(graph) == [["a", "b", "c", "a"], ["e", "e"]]
    assert find_cycles({"x": {"y"}, "y": set()}) == []


def _write_package(root: Path, files: dict[str, str]) -> None:
    for relative, source in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))


def test_a_cycle_through_an_import_inside_a_function_is_found(tmp_path):
    _write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from .b import helper\n",
            "pkg/sub/__init__.py": "",
            "pkg/b.py": """
                def helper():
                    from .sub import c
                    return c
            """,
            "pkg/sub/c.py": "import pkg.a\n",
        },
    )
    assert find_cycles(import_graph(tmp_path, "pkg")) == [["pkg.a", "pkg.b", "pkg.sub.c", "pkg.a"]]


def test_two_modules_importing_each_other_are_a_cycle(tmp_path):
    _write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from . import b\n",
            "pkg/b.py": "from .a import name\n",
        },
    )
    assert find_cycles(import_graph(tmp_path, "pkg")) == [["pkg.a", "pkg.b", "pkg.a"]]


def test_a_package_init_importing_its_submodules_is_no_cycle(tmp_path):
    _write_package(
        tmp_path,
        {
            "pkg/__init__.py": "from .a import A\nfrom .b import B\n",
            "pkg/a.py": "from .b import B\nA = B\n",
            "pkg/b.py": "import pkg.c\nB = 1\n",
            "pkg/c.py": "",
        },
    )
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg"] == {"pkg.a", "pkg.b"}
    assert find_cycles(graph) == []


def test_taking_a_name_from_the_own_package_init_that_imports_back_is_a_cycle(tmp_path):
    _write_package(
        tmp_path,
        {
            "pkg/__init__.py": "from .a import A\nSETTING = 1\n",
            "pkg/a.py": "from . import SETTING\nA = SETTING\n",
        },
    )
    assert find_cycles(import_graph(tmp_path, "pkg")) == [["pkg", "pkg.a", "pkg"]]


def test_an_import_of_another_package_runs_its_init(tmp_path):
    _write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/one/__init__.py": "from ..two import x\n",
            "pkg/one/m.py": "",
            "pkg/two/__init__.py": "",
            "pkg/two/x.py": "from ..one import m\n",
        },
    )
    # two.x imports one.m, which first runs one/__init__, which imports two.x
    assert find_cycles(import_graph(tmp_path, "pkg")) == [["pkg.one", "pkg.two.x", "pkg.one"]]


def test_relative_imports_resolve_against_the_package():
    assert _resolve("p.q.mod", False, 1, "x") == "p.q.x"
    assert _resolve("p.q.mod", False, 2, None) == "p"
    assert _resolve("p.q", True, 1, "x") == "p.q.x"
    assert _resolve("p.q", True, 2, "x") == "p.x"
    assert _resolve("p.q.mod", False, 0, "os.path") == "os.path"
