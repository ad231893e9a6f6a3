"""`vllm-load regress`: a candidate configuration's stored runs against a baseline's, with the
test `compare` uses; exit 1 on a significant regression beyond the tolerance or when nothing
could be tested, 0 otherwise, 2 on bad input."""

from __future__ import annotations

import json
import os

import pytest

from vllm_load.cli.main import main
from vllm_load.run_format.synthetic import ServerModel, SyntheticRun, write_synthetic_run

SPEC = dict(levels=(4, 8), warmup_requests=4, requests_per_level=20, output_tokens=32)


def _run(base, version: str, seed: int, itl: float) -> str:
    path = write_synthetic_run(
        str(base),
        SyntheticRun(
            **SPEC,
            seed=seed,
            start_ts=1_790_000_000.0 + 3600 * seed,
            server=ServerModel(base_itl_s=itl),
        ),
    )
    with open(os.path.join(path, "run.json"), encoding="utf-8") as fh:
        run = json.load(fh)
    run["target"]["version"] = {"version": version}  # as vLLM's /version said it
    with open(os.path.join(path, "run.json"), "w", encoding="utf-8") as fh:
        json.dump(run, fh)
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    base = tmp_path_factory.mktemp("regress")
    for seed in range(3):
        _run(base / "runs", "0.31.0", seed, 0.012)
    for seed in range(3, 6):  # the same server
        _run(base / "runs", "0.31.1", seed, 0.012)
    for seed in range(6, 9):  # a third slower per token, and the newest
        _run(base / "runs", "0.32.0", seed, 0.016)
    path = str(base / "results.sqlite")
    assert main(["store", "import", str(base / "runs"), "--store", path]) == 0
    return path


def _regress(store, capsys, *args) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["regress", *args, "--store", store])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_a_slower_latest_version_is_a_regression_and_exits_1(store, capsys):
    code, out = _regress(
        store, capsys, "--baseline", "vllm_version=0.31.0", "--candidate", "latest"
    )
    assert code == 1, out
    assert "baseline: 3 run(s), candidate: 3 run(s)" in out
    assert "8: ITL p99: " in out and out.count(": worse") >= 4
    assert "significantly worse beyond 0%" in out
    # a tolerance wider than the regression lets it pass
    code, out = _regress(
        store, capsys, "--baseline", "vllm_version=0.31.0", "--max-regression", "50%"
    )
    assert code == 0 and "no significant regression beyond 50%" in out, out


def test_the_same_server_under_another_version_passes(store, capsys):
    code, out = _regress(
        store, capsys, "--baseline", "vllm_version=0.31.0", "--candidate", "vllm_version=0.31.1"
    )
    assert code == 0, out
    assert ": worse" not in out


def test_one_run_a_side_tests_nothing_and_does_not_pass(store, capsys):
    code, out = _regress(
        store,
        capsys,
        "--baseline",
        "vllm_version=0.31.0",
        "--candidate",
        "run_id=" + _first_id(store),
    )
    assert code == 1 and "nothing was tested" in out, out


def _first_id(store) -> str:
    import sqlite3

    (run_id,) = (
        sqlite3.connect(store)
        .execute("SELECT run_id FROM runs WHERE vllm_version = '0.32.0' ORDER BY started_at")
        .fetchone()
    )
    return run_id


def test_a_side_matching_no_run_is_one_line_and_exit_2(store, capsys):
    code, out = _regress(store, capsys, "--baseline", "vllm_version=0.29")
    assert code == 2
    assert out.strip().splitlines() == [
        "vllm-load regress: error: --baseline: no stored run matches (see vllm-load history)"
    ]


def test_sides_that_sent_different_workloads_are_refused(tmp_path, capsys):
    for seed, (version, tokens) in enumerate([("0.31.0", 32), ("0.32.0", 64)]):
        path = _run(tmp_path / "runs", version, seed, 0.012)
        with open(os.path.join(path, "run.json"), encoding="utf-8") as fh:
            run = json.load(fh)
        run["settings"]["output_tokens"] = tokens
        with open(os.path.join(path, "run.json"), "w", encoding="utf-8") as fh:
            json.dump(run, fh)
    store = str(tmp_path / "results.sqlite")
    assert main(["store", "import", str(tmp_path / "runs"), "--store", store]) == 0
    code, out = _regress(store, capsys, "--baseline", "vllm_version=0.31.0")
    assert code == 2
    (line,) = out.strip().splitlines()
    assert "different workloads: output_tokens" in line, line
