"""The suite's order for xdist's work stealing (support/worker_order.py) keeps every test once,
a file's tests together, and gives each worker's first share an even part of the heavy tests,
with light ones at its tail."""

from __future__ import annotations

import random

from support.worker_order import shares, spread, weight


def _collected(seed: int) -> list[str]:
    rng = random.Random(seed)
    ids = []
    for d in ("analysis", "bench", "cli", "client", "e2e", "report", "run", "web"):
        for f in range(rng.randint(2, 30)):
            ids += [f"tests/{d}/test_{f}.py::test_{t}" for t in range(rng.randint(1, 40))]
    return ids


def test_each_worker_gets_an_even_share_of_the_heavy_tests_first_and_files_stay_whole():
    for seed in range(20):
        ids = _collected(seed)
        for workers in (2, 3, 4):
            out = spread(ids, workers)
            assert sorted(out) == sorted(ids)
            # a heavy or middling file's tests together; a light file cut only where a share ends
            files = [nodeid.split("::")[0] for nodeid in out if weight(nodeid) < 2]
            runs = [f for i, f in enumerate(files) if i == 0 or files[i - 1] != f]
            assert len(runs) == len(set(runs)), "a file's tests split apart"
            light = [nodeid for nodeid in out if weight(nodeid) == 2]
            assert light == [nodeid for nodeid in ids if weight(nodeid) == 2]
            # xdist's first shares: contiguous, equal counts
            first, at = [], 0
            for k in shares(len(out), workers):
                first.append(out[at : at + k])
                at += k
            heavy = [sum(weight(n) == 0 for n in share) for share in first]
            biggest = max(
                sum(1 for n in ids if n.split("::")[0] == f)
                for f in {n.split("::")[0] for n in ids if weight(n) == 0}
            )
            assert max(heavy) - min(heavy) <= biggest, (seed, workers, heavy)
            # what is stolen and run last, each queue's tail, is light
            assert all(weight(share[-1]) == 2 for share in first), (seed, workers)


def test_shares_are_xdists_first_split():
    assert shares(2038, 3) == [679, 679, 680] and sum(shares(7, 4)) == 7


def test_weights_read_the_directory():
    assert weight("tests/e2e/test_run_e2e.py::test_x") == 0
    assert weight("tests/cli/test_tune.py::test_x[1]") == 1
    assert weight("tests/analysis/test_ab.py::test_x") == 2
    assert weight("tests/test_top.py::test_x") == 2
