"""Every locustfile in locustfiles/ runs as its docstring says, briefly, against the simulator:
each of its personas sends requests and every request succeeds."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support import ROOT
from support.runhelpers import load_run_files, only_run_dir, run_vllm_load

from vllm_load.sim.child import SimulatorProcess

#: each file, the options its docstring runs it with, and its user classes; the files that only
#: import the built-in tests (run end to end by test_run_e2e and test_workloads) are checked by
#: what Locust finds in them
LOCUSTFILES = {
    "chat_stepped.py": (None, {"ClosedLoopUser"}),
    "dataset_conversations.py": (None, {"DatasetUser"}),
    "personas.py": (["--dataset", "sample", "--think-time", "0.1,0.3"], {"Chat", "Rag", "Agent"}),
}


def test_every_locustfile_is_listed_here():
    found = {name for name in os.listdir(os.path.join(ROOT, "locustfiles")) if name.endswith(".py")}
    assert found == set(LOCUSTFILES)


@pytest.mark.parametrize("name", [n for n, (extra, _) in LOCUSTFILES.items() if extra is None])
def test_locustfile_holds_its_user_classes(name):
    proc = subprocess.run(
        [sys.executable, "-m", "locust", "-f", os.path.join(ROOT, "locustfiles", name), "--list"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    listed = proc.stdout[proc.stdout.index("Available Users:") :].split()[2:]
    assert set(listed) == LOCUSTFILES[name][1]


@pytest.mark.parametrize("name", [n for n, (extra, _) in LOCUSTFILES.items() if extra is not None])
def test_locustfile_runs(tmp_path, name):
    extra, personas = LOCUSTFILES[name]
    assert extra is not None
    with SimulatorProcess("--time-scale", "0.05", "--max-num-seqs", "16") as sim:
        run_vllm_load(
            "run",
            "-f",
            os.path.join(ROOT, "locustfiles", name),
            "--host",
            sim.url,
            "--levels",
            "10",
            "--input-tokens",
            "256",
            "--output-tokens",
            "32",
            "--requests-per-level",
            "60",
            "--warmup-requests",
            "5",
            "--out",
            str(tmp_path),
            *extra,
        )
    requests, _steps, run, _ = load_run_files(only_run_dir(tmp_path))
    assert run["outcome"] == "completed" and set(run["user_classes"]) == personas
    assert set(requests["user_class"]) == personas
    assert requests["ok"].all(), requests["error_message"].dropna().unique()[:5]
