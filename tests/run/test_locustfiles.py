"""Every locustfile in locustfiles/ runs as its docstring says, briefly, against the simulator:
each of its personas sends requests and every request succeeds."""

from __future__ import annotations

import os

import pytest
from support import ROOT
from support.runhelpers import load_run_files, only_run_dir, run_vllm_load

from vllm_load.sim.process import SimulatorProcess

LOCUSTFILES = {
    "chat_stepped.py": ([], {"ClosedLoopUser"}),
    "dataset_conversations.py": (["--dataset", "sample"], {"DatasetUser"}),
    "personas.py": (["--dataset", "sample", "--think-time", "0.1,0.3"], {"Chat", "Rag", "Agent"}),
}


def test_every_locustfile_is_listed_here():
    found = {name for name in os.listdir(os.path.join(ROOT, "locustfiles")) if name.endswith(".py")}
    assert found == set(LOCUSTFILES)


@pytest.mark.parametrize("name", list(LOCUSTFILES))
def test_locustfile_runs(tmp_path, name):
    extra, personas = LOCUSTFILES[name]
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
