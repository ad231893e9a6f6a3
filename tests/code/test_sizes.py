"""Sizes a reader can hold: no module over ~400 lines and no folder of more than ~12 modules,
unless the module's or the package's docstring says why (docs/architecture.md)."""

from __future__ import annotations

import ast
import os

from support import ROOT, parse_file, python_files

PACKAGE = os.path.join(ROOT, "vllm_load")
MAX_LINES = 400
MAX_MODULES = 12
#: a longer module or a fuller package says why in its docstring, with one of these words
REASON_WORDS = ("on purpose", "over the ~12", "length is", "long because")


def _docstring(path: str) -> str:
    return ast.get_docstring(parse_file(path)) or ""


def _states_a_reason(path: str) -> bool:
    doc = " ".join(_docstring(path).split())
    return any(word in doc for word in REASON_WORDS)


def test_no_module_over_400_lines_without_a_reason():
    long = []
    for path in python_files("vllm_load"):
        with open(path, encoding="utf-8") as fh:
            lines = sum(1 for _ in fh)
        if lines > MAX_LINES and not _states_a_reason(path):
            long.append(f"{os.path.relpath(path, ROOT)}: {lines} lines")
    assert not long, (
        f"modules over {MAX_LINES} lines whose docstring says no reason (split them, or say "
        f"why with one of {REASON_WORDS}):\n" + "\n".join(long)
    )


def test_no_folder_of_more_than_12_modules_without_a_reason():
    full = []
    for folder, _dirs, files in os.walk(PACKAGE):
        modules = [f for f in files if f.endswith(".py") and f != "__init__.py"]
        init = os.path.join(folder, "__init__.py")
        if len(modules) > MAX_MODULES and not (os.path.exists(init) and _states_a_reason(init)):
            full.append(f"{os.path.relpath(folder, ROOT)}: {len(modules)} modules")
    assert not full, (
        f"packages of more than {MAX_MODULES} modules whose __init__ says no reason:\n"
        + "\n".join(full)
    )
