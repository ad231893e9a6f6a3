"""The README's first lines work as written on a distribution Python that refuses a bare `pip
install` (PEP 668): they make and enter a virtual environment first, install vllm-load without
the test extra (about 1 GB: transformers, selenium, mypy, ...) for the demo, and their test
command is exactly what CI runs (.ci/run)."""

from __future__ import annotations

import os
import re

from support import ROOT

CI_MARKER = "# --- the README's test command ---"


def first_commands() -> list[str]:
    """The commands of the README's first code block, comments stripped."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as fh:
        match = re.search(r"```bash\n(.*?)```", fh.read(), re.S)
    assert match, "the README has no bash block"
    lines = [line.split("  #")[0].strip() for line in match.group(1).splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def index_of(commands: list[str], pattern: str) -> int:
    found = [i for i, command in enumerate(commands) if re.search(pattern, command)]
    assert found, f"no README command matches {pattern!r}: {commands}"
    return found[0]


def test_the_first_lines_enter_a_virtual_environment_before_installing():
    commands = first_commands()
    venv = index_of(commands, r"^python3 -m venv (\S+) && \. \1/bin/activate$")
    assert venv == 0 and index_of(commands, r"\bpip install\b") > venv


def test_the_demo_installs_without_the_test_extra():
    commands = first_commands()
    demo = index_of(commands, r"^vllm-load demo\b")
    assert index_of(commands, r"^pip install -e \.$") < demo
    assert index_of(commands, r"\.\[test\]") > demo  # the test extra only for the tests


def test_ci_runs_exactly_the_readme_test_command():
    readme = first_commands()
    test_command = readme[index_of(readme, r"\bpytest\b")]
    assert "'.[test]'" in test_command and test_command.endswith("pytest")
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as fh:
        ci = fh.read().splitlines()
    assert CI_MARKER in ci, f".ci/run has no line {CI_MARKER!r}"
    after = [line for line in ci[ci.index(CI_MARKER) + 1 :] if line.strip()]
    assert after == [test_command], (after, test_command)
