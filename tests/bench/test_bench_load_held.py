"""bench/load_held.py runs end to end in a small mode (50 users, 10 s) and prints every figure.

The bench runs as a subprocess (Locust must never be imported into pytest) against its own
simulator on 127.0.0.1. The full bench (1000 users, 300 s) is run by hand:
`python bench/load_held.py`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from support import ROOT

# a held load of its own (~20 s): run with -m slow after changing the bench
pytestmark = pytest.mark.slow

NUMBER = r"[-+]?[\d,]*\.?\d+"
USERS = 50


def numbers(text: str) -> list[float]:
    return [float(n.replace(",", "")) for n in re.findall(NUMBER, text)]


def line_after(out: str, label: str) -> str:
    """The text after `label` on the one line that starts with it."""
    (line,) = [ln for ln in out.splitlines() if ln.strip().startswith(label)]
    return line.strip()[len(label) :]


@pytest.fixture(scope="module")
def bench_output(tmp_path_factory) -> str:
    out_dir = tmp_path_factory.mktemp("load-held")
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "bench", "load_held.py"),
            "--users",
            str(USERS),
            "--duration",
            "10",
            "--progress-interval",
            "3",
            "--out",
            str(out_dir),
        ],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=ROOT,
    )
    assert proc.returncode == 0, (
        f"load_held.py exited {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-3000:]}"
    )
    return proc.stdout


@pytest.mark.timeout(120)
def test_progress_and_memory_per_worker(bench_output):
    out = bench_output
    assert re.search(
        r"^\[\s*\d+ s\] recorded\s+[\d,]+ \| server running \d+ waiting \d+, CPU\s+\d+% \| worker RSS MiB",
        out,
        re.M,
    ), out
    memory = re.findall(
        rf"worker (\S+)\s+RSS start\s+({NUMBER}) MiB\s+end\s+({NUMBER}) MiB\s+"
        rf"growth\s+({NUMBER}) MiB \(\s*({NUMBER})%\)",
        out,
    )
    assert len(memory) == 2, out  # one line per worker
    for _worker, start, end, growth_mib, growth_pct in memory:
        start, end = float(start), float(end)
        assert 0 < start < 1000 and 0 < end < 1000, (start, end)
        assert float(growth_mib) == pytest.approx(end - start, abs=0.11)
        assert abs(float(growth_pct)) < 10, out
    under_load = re.findall(
        rf"under load: peak ({NUMBER}) MiB \(({NUMBER})% on start\), at the level's end "
        rf"({NUMBER}) MiB; drift from \d+ s in to the level's end ({NUMBER}) MiB",
        out,
    )
    assert len(under_load) == 2, out
    for peak, peak_pct, level_end, _drift in under_load:
        assert float(level_end) <= float(peak) and float(peak_pct) < 10, out
    cpu = re.findall(
        rf"worker \S+\s+CPU mean\s+({NUMBER})%\s+max\s+({NUMBER})%\s+loop lag mean", out
    )
    assert len(cpu) == 2 and all(0 <= float(mean) <= float(top) for mean, top in cpu), out


@pytest.mark.timeout(120)
def test_concurrency_is_held(bench_output):
    line = line_after(bench_output, f"achieved concurrency vs {USERS} users: mean in flight")
    client = float(re.search(rf"({NUMBER}) client side", line).group(1).replace(",", ""))
    server = float(re.search(rf"({NUMBER}) server side", line).group(1).replace(",", ""))
    assert 0.8 * USERS <= client <= USERS + 0.5, bench_output
    assert 0.8 * USERS <= server <= USERS + 0.5, bench_output


@pytest.mark.timeout(120)
def test_every_request_accounted_for(bench_output):
    out = bench_output
    rows, ok, failed = numbers(line_after(out, "requests.csv rows"))[:3]
    locust = numbers(line_after(out, "Locust total"))[0]
    in_flight = numbers(line_after(out, "in flight at the stop"))[0]
    sent = numbers(line_after(out, "sent   "))[0]
    received = numbers(line_after(out, "server received"))[0]
    assert rows > USERS and ok + failed == rows and locust == rows, out
    assert in_flight == USERS and sent == rows + in_flight, out
    assert rows <= received <= sent, out
    balance = line_after(out, "sent = recorded + in flight at stop:")
    total, recorded, unread, aborted, never_read = numbers(balance)[:5]
    assert (total, recorded) == (sent, rows) and unread + aborted + never_read == in_flight, balance
    assert balance.endswith("OK"), balance
    assert re.search(
        r"^VERDICT PASS: memory flat PASS \(every worker's RSS growth, to its last sample and to its "
        r"peak under load, under 10%\), every request accounted for PASS$",
        out,
        re.M,
    ), out
