"""The code passes ruff's lint and is in ruff's format (config: pyproject.toml's [tool.ruff]).

Run `ruff check --fix . && ruff format .` to mend what these report.
"""

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import ROOT, parse_file, python_files


def _ruff() -> str:
    here = os.path.join(os.path.dirname(sys.executable), "ruff")
    found = here if os.path.exists(here) else shutil.which("ruff")
    if not found:
        pytest.fail("ruff is not installed: pip install -e '.[test]'")
    return found


@pytest.mark.parametrize(
    "args", [["check", "."], ["format", "--check", "."]], ids=["lint", "format"]
)
def test_ruff(args):
    proc = subprocess.run([_ruff(), *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (
        f"ruff {' '.join(args)}:\n{proc.stdout[-4000:]}{proc.stderr[-2000:]}"
    )


def test_no_two_test_modules_share_a_name():
    """pytest imports test modules by their base name (tests/ has no packages): a second
    test_x.py anywhere under tests/ fails the whole run's collection ("import file mismatch")."""
    by_name: dict[str, list[str]] = {}
    for path in python_files("tests"):
        name = os.path.basename(path)
        if name.startswith("test_"):
            by_name.setdefault(name, []).append(os.path.relpath(path, ROOT))
    shared = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not shared, f"test modules sharing a name (rename one of each): {shared}"


def test_test_modules_never_import_each_other():
    """Shared test code lives in tests/support (or tests/conftest.py), never in a test module."""
    found = []
    for path in python_files("tests"):
        for node in ast.walk(parse_file(path)):
            if isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module]
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            else:
                continue
            found += [
                f"{os.path.relpath(path, ROOT)}:{node.lineno}: {m}"
                for m in modules
                if m.split(".")[-1].startswith("test_") or m.startswith("tests.")
            ]
    assert not found, (
        "test modules importing test modules (move the shared code to tests/support):\n"
        + "\n".join(found)
    )


def test_no_rated_switches_levels_are_named_by_their_kind_of_load():
    """A level's kind of load (`load_kinds`) says how it is named and which columns it has: no
    code or template asks whether a run "is rated" (a requested rate present) to decide it."""
    root = Path(ROOT) / "vllm_load"
    pattern = re.compile(r"\brated\b|axis\.rate\b|\bis_rate_run\b")
    found = [
        f"{path.relative_to(root)}:{n}: {line.strip()}"
        for path in root.rglob("*")
        if path.suffix in (".py", ".html", ".md", ".js")
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, "\n".join(found)
