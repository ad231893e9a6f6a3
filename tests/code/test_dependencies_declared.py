"""Every distribution the code imports is declared in setup.cfg (issue 51, item 5).

An import that works only because another package happens to pull its distribution in (numpy
through pandas, Flask through Locust) breaks the day that package stops doing so, or pins a
version ours does not work with. So each import of `vllm_load/` must be in install_requires (or,
inside a function, in an extra other than `test`: the package runs without it), and each import
of `tests/` and of the benches the tests run (`bench/*.py`) in install_requires or the `test`
extra. Modules map to distributions through `importlib.metadata.packages_distributions()`; the
standard library is `sys.stdlib_module_names`; the repository's own modules are local.
"""

from __future__ import annotations

import ast
import configparser
import importlib.metadata
import os
import re
import sys
from collections.abc import Iterable
from functools import lru_cache

from support import ROOT, parse_file, python_files

# an extra's module whose distribution the test environment does not install (`pip install
# '.[test]'`), so packages_distributions() cannot name it: the `gpu` extra's NVML bindings
NOT_INSTALLED = {"pynvml": "nvidia-ml-py"}


def canonical(name: str) -> str:
    """A distribution's name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(lines: str) -> set[str]:
    """The distributions a setup.cfg requirement list names (comments and markers left out)."""
    names = set()
    for line in lines.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line)
            assert match, f"setup.cfg: a requirement with no name: {line!r}"
            names.add(canonical(match.group()))
    return names


def declared(setup_cfg: str) -> tuple[set[str], dict[str, set[str]]]:
    """install_requires and each extra of a setup.cfg, as canonical names."""
    config = configparser.ConfigParser(interpolation=None)
    config.read(setup_cfg, encoding="utf-8")
    extras = {
        extra: requirement_names(lines) for extra, lines in config["options.extras_require"].items()
    }
    return requirement_names(config["options"]["install_requires"]), extras


@lru_cache(maxsize=None)
def imports(path: str) -> tuple[tuple[str, int, bool], ...]:
    """(top-level module, line, whether at module level) of every absolute import in `path`."""
    found = []

    def visit(node: ast.AST, top_level: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                names = [child.module]
            else:
                function = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                visit(child, top_level and not function)
                continue
            found.extend((name.split(".")[0], child.lineno, top_level) for name in names)

    visit(parse_file(path), True)
    return tuple(found)


def is_local(module: str, path: str) -> bool:
    """The repository's own module: the package, a folder of the repository on sys.path
    (tests/, bench/), or a file beside the importing one."""
    for folder in (ROOT, os.path.join(ROOT, "tests"), os.path.dirname(path)):
        if os.path.isdir(os.path.join(folder, module)) or os.path.isfile(
            os.path.join(folder, f"{module}.py")
        ):
            return True
    return False


@lru_cache(maxsize=1)
def distributions_of() -> dict[str, set[str]]:
    found = importlib.metadata.packages_distributions()
    return {module: {canonical(d) for d in dists} for module, dists in found.items()} | {
        module: {dist} for module, dist in NOT_INSTALLED.items()
    }


def undeclared(
    paths: Iterable[str], allowed: set[str], lazy_allowed: frozenset[str] | set[str] = frozenset()
) -> list[str]:
    """Each import in `paths` whose distribution is not in `allowed` (nor, for an import inside a
    function, in `lazy_allowed`), as 'path:line: module (distribution)'."""
    problems = []
    for path in paths:
        for module, line, top_level in imports(path):
            if module in sys.stdlib_module_names or module == "__future__":
                continue
            if is_local(module, path):
                continue
            where = f"{os.path.relpath(path, ROOT)}:{line}: {module}"
            dists = distributions_of().get(module)
            if not dists:
                problems.append(f"{where} (no installed distribution provides it)")
            elif not dists & (allowed if top_level else allowed | lazy_allowed):
                problems.append(f"{where} ({', '.join(sorted(dists))})")
    return problems


def check(setup_cfg: str) -> list[str]:
    requires, extras = declared(setup_cfg)
    optional = set().union(*(names for extra, names in extras.items() if extra != "test"))
    package = undeclared(python_files("vllm_load"), requires, optional)
    benches = [
        os.path.join(ROOT, "bench", name)
        for name in sorted(os.listdir(os.path.join(ROOT, "bench")))
        if name.endswith(".py")
    ]
    tests = undeclared([*python_files("tests"), *benches], requires | extras["test"])
    return [f"not in install_requires: {p}" for p in package] + [
        f"not in install_requires or the test extra: {p}" for p in tests
    ]


def test_every_import_is_declared_in_setup_cfg():
    problems = check(os.path.join(ROOT, "setup.cfg"))
    assert not problems, "\n".join(problems)


def test_an_undeclared_import_is_found(tmp_path):
    """The check itself: setup.cfg without numpy names the package's numpy imports."""
    with open(os.path.join(ROOT, "setup.cfg"), encoding="utf-8") as fh:
        text = fh.read()
    assert "\n    numpy>=" in text
    without = tmp_path / "setup.cfg"
    without.write_text(re.sub(r"\n    numpy>=[^\n]*", "", text), encoding="utf-8")
    problems = check(str(without))
    assert any(
        p.startswith("not in install_requires: vllm_load/") and ": numpy (numpy)" in p
        for p in problems
    ), problems
