"""The order the default suite's tests are handed to pytest-xdist's work-stealing workers in.

`--dist worksteal` gives each of n workers a contiguous n-th of the collected tests, then lets a
worker that runs dry take half of the longest queue, longest by count. Collected in file order,
one third holds most of the tests that start servers and runs (seconds each: tests/e2e, web) and
another only pure functions (milliseconds), so the worker with the heavy third ends long after
the others, and what they steal from its queue's tail is its heaviest work, taken late. Spread
instead: each worker's share gets an even part of the heavy files and of the middling ones
(tests/cli, report) at its front, then light ones up to its size, so every queue's tail, what is
stolen and run last, is short tests. A file's tests stay together, so a module fixture
(a simulator shared by a file's tests) is set up once. On the 2,038 tests of 2026-11-30, the
per-test times of a fresh-clone run replayed through xdist's stealing: 353 s against 390 s.
"""

from __future__ import annotations

#: the weight of a test directory, by its tests' mean time on 2026-11-30: 0 seconds (they start
#: servers and runs: e2e 5.6 s, bench 2.4 s, web 2.2 s), 1 about half a second (cli, report,
#: code, store: 0.5-0.7 s), 2 milliseconds (the rest: 0.02-0.2 s)
WEIGHTS = {"e2e": 0, "bench": 0, "web": 0, "cli": 1, "report": 1, "code": 1, "store": 1}


def weight(nodeid: str) -> int:
    parts = nodeid.split("/")
    return WEIGHTS.get(parts[1], 2) if len(parts) > 2 else 2


def shares(count: int, workers: int) -> list[int]:
    """How many of `count` tests xdist's work stealing hands each worker first."""
    sizes = []
    for i in range(workers):
        sizes.append((count - sum(sizes)) // (workers - i))
    return sizes


def spread(nodeids: list[str], workers: int) -> list[str]:
    """`nodeids` (in collection order) reordered for `workers` work-stealing workers: each
    worker's first share holds whole heavy and middling files, as evenly as their counts allow,
    then light tests in collection order up to its share's size (a light file may be cut where a
    share ends: its tests are in-process)."""
    files: dict[str, list[str]] = {}
    for nodeid in nodeids:
        files.setdefault(nodeid.split("::")[0], []).append(nodeid)
    parts: list[list[list[str]]] = [[[], []] for _ in range(workers)]

    def size(i: int) -> int:
        return sum(len(part) for part in parts[i])

    for w in (0, 1):
        for path, tests in files.items():
            if weight(path) == w:
                i = min(range(workers), key=lambda i: (len(parts[i][w]), size(i)))
                parts[i][w].extend(tests)
    light = [nodeid for nodeid in nodeids if weight(nodeid) == 2]
    out: list[str] = []
    for i, share in enumerate(shares(len(nodeids), workers)):
        take = len(light) if i == workers - 1 else max(0, share - size(i))
        out += parts[i][0] + parts[i][1] + light[:take]
        light = light[take:]
    return out
