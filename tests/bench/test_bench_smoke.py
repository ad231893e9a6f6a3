"""The client benches run end to end in their --quick mode and print every figure.

Each bench runs as a subprocess (Locust must never be imported into pytest) against its own
simulator on 127.0.0.1; the figures themselves depend on the machine and are not judged here,
only that they are printed and positive.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from support import ROOT

NUMBER = r"([-+]?[\d,]*\.?\d+)"


def run_bench(name: str, tmp_path, timeout: float = 120) -> str:
    """Run bench/NAME --quick; return its stdout (assert exit 0)."""
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", name), "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    assert proc.returncode == 0, (
        f"{name} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc.stdout


def numbers(line: str) -> list[float]:
    return [float(n.replace(",", "")) for n in re.findall(NUMBER, line)]


def capacity_row(out: str, load: str, client: str) -> list[str]:
    """The cells after the client name in the figures table (`-` where a figure does not apply)."""
    (line,) = [ln for ln in out.splitlines() if ln.startswith(load) and f" {client} " in ln]
    return line.split(f" {client} ", 1)[1].replace("%", "").split()


@pytest.mark.slow  # a load run of its own (~20 s): run with -m slow after changing the bench
@pytest.mark.timeout(180)
def test_client_capacity_quick(tmp_path):
    out = run_bench("client_capacity.py", tmp_path)
    assert "Server limit:" in out, out
    rows = [
        (client, load, stream)
        for load, stream in (
            ("10 users, non-streaming 8 tokens", False),
            ("10 users, streaming 64 tokens", True),
        )
        for client in ("vllm-load", "reference", "locust")
        if not (stream and client == "locust")  # Locust's FastHttpUser: non-streaming only
    ]
    for client, load, stream in rows:
        cells = capacity_row(out, load, client)
        # req/s, chunks/s, ratio, CPU s/1k, CPU ratio, p99 E2E ms, achieved, RSS MiB, server
        # core %, ratio by round
        assert len(cells) == 10, cells
        req_s, chunks_s, ratio, cpu_1k, cpu_ratio, p99_ms, achieved, rss = cells[:8]
        peer = client != "vllm-load"  # a peer's row holds vllm-load's ratio to it
        if peer:  # --quick measures 2 rounds; the ratio is their median
            by_round = [float(r) for r in cells[9].split("/")]
            assert len(by_round) == 2 and all(r > 0 for r in by_round), cells
            assert float(ratio) == pytest.approx(sum(by_round) / 2, abs=0.006), cells
        else:
            assert cells[9] == "-" and ratio == "-" and cpu_ratio == "-", cells
        positive = [req_s, cpu_1k, p99_ms, achieved, rss] + ([chunks_s] if stream else [])
        positive += [ratio, cpu_ratio] if peer else []
        assert all(float(v.replace(",", "")) > 0 for v in positive), (load, client, cells)
    assert not [
        ln for ln in out.splitlines() if ln.startswith("10 users, streaming") and " locust " in ln
    ]
    for target in (
        r"non-streaming req/s at 10 users >= 1\.5x reference: [\d.]+x \(median of rounds: [\d.]+, [\d.]+\)",
        r"non-streaming req/s at 10 users >= 1\.5x locust: [\d.]+x \(median of rounds: [\d.]+, [\d.]+\)",
        r"streaming chunks/s at 10 users >= 2x reference: [\d.]+x \(median of rounds: [\d.]+, [\d.]+\)",
        r"streaming p99 E2E at 10 users <= reference's: [\d,.]+ ms vs [\d,.]+ ms",
        r"streaming achieved concurrency at 10 users >= 95%: [\d.]+",
        r"RSS of vllm-load at 10 streaming users <= 300 MiB: [\d,]+ MiB",
    ):
        assert re.search(r"(PASS|FAIL)  " + target, out), (target, out)


@pytest.mark.slow  # a load run of its own (~15 s): run with -m slow after changing the bench
@pytest.mark.timeout(180)
def test_timing_accuracy_quick(tmp_path):
    out = run_bench("timing_accuracy.py", tmp_path)
    for client in ("vllm-load", "reference"):
        (line,) = [ln for ln in out.splitlines() if re.match(rf"\s+10\s+{client}\s", ln)]
        values = numbers(line.split(client, 1)[1])
        assert len(values) == 11, line
        ttft_p50, ttft_p99, itl_p50, itl_p99 = values[:4]
        # measured − true (ms): the measured TTFT and ITL are positive, and off by less than 200 ms
        assert (
            -20 < ttft_p50 < 200
            and -20 < ttft_p99 < 200
            and -20 < itl_p50 < 200
            and -20 < itl_p99 < 200
        ), line
        assert values[-1] == 100.0, line  # success %
    # against the simulator's trace: every measured request joined on X-Request-Id, errors small
    (row,) = [ln for ln in out.splitlines() if re.match(r"\s+10\s+\d+/\d+\s", ln)]
    matched, requests = map(int, re.match(r"\s+10\s+(\d+)/(\d+)", row).groups())
    assert matched == requests > 0, row
    first_p50, first_p99, first_max, abs_p99, end_p50, end_p99 = numbers(row.split("/", 1)[1])[1:7]
    assert -1 < first_p50 <= first_p99 <= first_max < 100 and 0 <= abs_p99 < 100, row
    assert "Targets (true = the server's trace):" in out, out


def test_sse_parse_quick(tmp_path):
    out = run_bench("sse_parse.py", tmp_path, timeout=60)
    rows = [ln for ln in out.splitlines() if ln.startswith(("64 KB", "4 KB", "one event per read"))]
    assert len(rows) == 3, out
    for row in rows:
        ours, plain, ratio = numbers(row.split("  ", 1)[1])[-3:]
        assert ours > 0 and plain > 0 and ratio > 0, row


def test_record_cost_quick(tmp_path):
    """Both trees' records are built, timed and written; the bench itself exits 1 if the two
    requests.csv files differ by a byte."""
    out = run_bench("record_cost.py", tmp_path, timeout=60)
    rows = [ln for ln in out.splitlines() if ln.startswith(("non-streamed", "streamed"))]
    assert len(rows) == 4, out
    for row in rows:
        before, after, ratio = numbers(row.split(" + ", 1)[1])[-5:-2]
        assert before > 0 and after > 0 and ratio > 0, row
    assert "requests.csv bytes: identical" in out, out
