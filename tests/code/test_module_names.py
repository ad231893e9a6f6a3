"""No two modules of `vllm_load` share a base name, unless the name means one thing everywhere.

Two `summary.py` or three `targets.py` meaning different things left a newcomer (and a
traceback, which shows only the file's name) guessing which one was meant. A name may repeat only
where it says the same thing in every package, listed below with the reason.
"""

import os
from collections import defaultdict

from support import ROOT, python_files

#: base names that may repeat, each with the one meaning it has wherever it stands
SHARED_ON_PURPOSE = {
    "__init__.py": "Python's: a package",
    "__main__.py": "Python's: what `python -m` runs",
    # report/, sim/, store/: the package's `vllm-load` subcommand(s), loaded by cli/main.py
    "cli.py": "a package's subcommand: configure_parser(parser) and main(args)",
    # run/ and web/: importing it connects the package to Locust's events (`api.py` imports both)
    "wiring.py": "the package wired into Locust's events",
}


def modules_by_base_name(top: str = "vllm_load") -> dict[str, list[str]]:
    """Base name -> the paths (relative to the repository) of every module of `top` with it."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in python_files(top):
        found[os.path.basename(path)].append(os.path.relpath(path, ROOT))
    return found


def test_no_two_modules_share_a_base_name():
    shared = {
        name: paths
        for name, paths in modules_by_base_name().items()
        if len(paths) > 1 and name not in SHARED_ON_PURPOSE
    }
    assert not shared, (
        "modules sharing a base name (name each for what it does, or justify the name in "
        f"SHARED_ON_PURPOSE): {shared}"
    )


def test_each_name_shared_on_purpose_is_still_shared():
    """A name left on the list after its twin was renamed would let a new twin in unexplained."""
    found = modules_by_base_name()
    stale = [
        name
        for name in SHARED_ON_PURPOSE
        if not name.startswith("__") and len(found.get(name, [])) < 2
    ]
    assert not stale, f"SHARED_ON_PURPOSE names a base name no two modules share: {stale}"
