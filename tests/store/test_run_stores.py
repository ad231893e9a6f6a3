"""`vllm-load run` writes its run to the results store as it ends (the one test of the store that
starts a real run: tiny), and the run's figures in the store are those `history` lists."""

from __future__ import annotations

import json
import sqlite3

from support.runhelpers import every_file_text, only_run_dir, run_vllm_load

from vllm_load.sim.child import SimulatorProcess


def test_a_run_is_in_the_store_when_it_ends_and_history_lists_it(tmp_path):
    store = tmp_path / "results.sqlite"
    with SimulatorProcess("--time-scale", "0.002", "--max-num-seqs", "16") as sim:
        proc = run_vllm_load(
            "run",
            "--host",
            sim.url,
            "--levels",
            "2,4",
            "--input-tokens",
            "64",
            "--output-tokens",
            "8",
            "--requests-per-level",
            "8",
            "--warmup-requests",
            "2",
            "--out",
            str(tmp_path / "runs"),
            "--meta",
            "gpu=simulated",
            "--store",
            str(store),
        )
    run_dir = only_run_dir(tmp_path / "runs")
    with open(f"{run_dir}/run.json", encoding="utf-8") as fh:
        run_id = json.load(fh)["run_id"]
    assert f"Results store: sqlite:///{store} (stored {run_id})" in proc.stdout
    db = sqlite3.connect(str(store))
    assert db.execute("SELECT run_id, outcome, gpu_kind FROM runs").fetchall() == [
        (run_id, "completed", "simulated")
    ]
    values = db.execute("SELECT value FROM levels ORDER BY level").fetchall()
    assert values == [(2.0,), (4.0,)]
    assert str(store) not in every_file_text(run_dir)  # where the store is: not the run's
    listed = run_vllm_load(
        "history", "--where", "meta.gpu=simulated", "--json", "--store", str(store)
    )
    (line,) = listed.stdout.splitlines()
    entry = json.loads(line)
    assert entry["run_id"] == run_id and entry["at_level"] in (2.0, 4.0)
    assert entry["total_tok_per_s"] > 0
