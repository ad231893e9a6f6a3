"""Every command-line flag is declared with `add_argument` in one place (the options several
commands share come from `vllm_load/cli/common.py`, `Settings` or `web.auth`), and a flag that
means different things in different commands has different names."""

from __future__ import annotations

import ast
import os
from collections import defaultdict

from support import ROOT, parse_file, python_files

#: flags declared twice on purpose, each with why
DECLARED_TWICE = {
    # sim's is the address the simulator binds; everywhere else it is the server under test
    # (a URL). Left as it is: --host is what vLLM and every server call their bind address
    "--host": {"vllm_load/sim/cli.py", "vllm_load/cli/common.py"},
    # the same meaning (simulator server processes): sim's own, and validate-client's for the
    # echo simulator it starts (another default)
    "--server-workers": {"vllm_load/sim/cli.py", "vllm_load/cli/validate_client.py"},
    # the same meaning (the HTML file written), on two commands of their own modules
    "--output": {"vllm_load/report/cli.py", "vllm_load/cli/compare.py"},
}


def declarations() -> dict[str, list[str]]:
    """flag -> the `path:line`s of the `add_argument` calls that declare it."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in python_files("vllm_load"):
        for node in ast.walk(parse_file(path)):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and str(arg.value).startswith("--"):
                        found[arg.value].append(f"{os.path.relpath(path, ROOT)}:{node.lineno}")
    return found


def test_every_flag_is_declared_once():
    twice = {
        flag: places
        for flag, places in declarations().items()
        if len(places) > 1 and {p.split(":")[0] for p in places} != DECLARED_TWICE.get(flag)
    }
    assert not twice, f"flags declared more than once (use a helper in cli/common.py): {twice}"


def test_the_simulator_and_compare_name_their_own_meanings():
    from vllm_load.cli.main import build_parser

    parser = build_parser()
    for argv in (["sim", "--workers", "2"], ["compare", "a", "--seed", "1"]):
        try:
            parser.parse_args(argv)
        except SystemExit as e:
            assert e.code == 2
        else:
            raise AssertionError(f"{argv} was accepted")
    assert parser.parse_args(["sim", "--server-workers", "2"]).server_workers == 2
    args = parser.parse_args(["compare", "--bootstrap-seed", "1", "a", "vs", "b"])
    assert args.bootstrap_seed == 1
