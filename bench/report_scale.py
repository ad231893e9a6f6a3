"""Report scale: `vllm-load report` over one synthetic run of 1,000,000 request rows.

The rows are as a real run writes them: every stream's `chunk_marks` and ITL histogram, two
personas (one of them conversations), 1 % failures, seven levels, four load workers.

The report is timed on the run directory as `vllm-load run` leaves it: a run's own end
(`run.end_summary.print_summary`: the per-level table it prints) parses requests.csv and writes its
columnar copy (requests.columns.npz) beside it, so this bench does the same first, in a process
of its own, and prints what that cost. Then the report's wall time, CPU time and peak RSS,
measured on the `vllm-load report` child process, against issue 40's targets (<= 10 s,
<= 1 GiB), with the load average: the machine is shared, and the wall time reads its load.

    python bench/report_scale.py [--rows 1000000] [--keep DIR] [--run DIR] [--from-csv]

Every step runs in a child process of its own, the run's generation too: a child's peak RSS
counts the memory of the process it was started from (Linux keeps the larger of the two at
exec), so this process holds nothing big.

`--run` reports an existing run (one `--keep` wrote) instead of generating one; `--from-csv`
deletes the columnar copy first and reports from requests.csv (which writes the copy), as the
first report of a run recorded before the copy existed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from vllm_load.run_format.files import REQUESTS_COPY, REQUESTS_CSV  # names only: no pandas here

LEVELS = (10, 50, 100, 200, 500, 750, 1000)
TARGET_WALL_S = 10.0
TARGET_RSS_MIB = 1024.0
#: what `vllm-load run` does as it ends, in its own process
RUN_END = (
    "import sys; from vllm_load.run.end_summary import print_summary; print_summary(sys.argv[1])"
)


def realistic_run(rows: int, seed: int = 0):
    """About `rows` request rows as a real run writes them (see the module docstring)."""
    from vllm_load.run_format.synthetic import ServerModel, SyntheticRun
    from vllm_load.run_format.synthetic_personas import Persona

    return SyntheticRun(
        levels=LEVELS,
        requests_per_level=max(rows // len(LEVELS) - 10, 1),
        warmup_requests=10,
        output_tokens=512,
        server=ServerModel(fail_rate=0.01),
        personas=(Persona("ChatUser", 3.0), Persona("AgentUser", 1.0, 1.4, turns=4)),
        chunk_marks=True,
        workers=4,
        seed=seed,
        meta={"gpus": "8", "purpose": "report scale bench"},
    )


@dataclass(frozen=True)
class Measured:
    """One child process: wall time, CPU time (user + system) and peak RSS."""

    wall_s: float
    cpu_s: float
    peak_mib: float

    def text(self) -> str:
        return (
            f"wall {self.wall_s:.1f} s, CPU {self.cpu_s:.1f} s, peak RSS {self.peak_mib:,.0f} MiB"
        )


def measure(command: list[str]) -> Measured:
    """Run `command` as a child and measure it alone (os.wait4: its own rusage, where the
    children's together would give the largest peak of them all); stdout is dropped, stderr
    shown on failure."""
    with tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            print(err.read(), file=sys.stderr)
            raise SystemExit(f"{' '.join(command[:4])} ... failed ({proc.returncode})")
    # ru_maxrss: KiB on Linux
    return Measured(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)


def load_text() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (5 min {five:.2f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rows", type=int, default=1_000_000, help="request rows in the run (default 1,000,000)"
    )
    parser.add_argument("--keep", default="", help="write the run and report here and keep them")
    parser.add_argument("--run", default="", help="report this run instead of generating one")
    parser.add_argument(
        "--from-csv", action="store_true", help="report from requests.csv (no columnar copy)"
    )
    parser.add_argument("--write-to", default="", help=argparse.SUPPRESS)  # the generating child
    args = parser.parse_args()
    if args.write_to:
        from vllm_load.run_format.synthetic import write_synthetic_run

        print(write_synthetic_run(args.write_to, realistic_run(args.rows)))
        return 0

    base = args.keep or tempfile.mkdtemp(prefix="vllm-load-report-scale-")
    try:
        t0 = time.perf_counter()
        runs = os.path.join(base, "runs")
        write = [sys.executable, __file__, "--rows", str(args.rows), "--write-to", runs]
        run_dir = (
            args.run
            or subprocess.run(write, check=True, capture_output=True, text=True)
            .stdout.strip()
            .splitlines()[-1]
        )
        generated = time.perf_counter() - t0
        csv_path = os.path.join(run_dir, REQUESTS_CSV)
        copy_path = os.path.join(run_dir, REQUESTS_COPY)
        with open(csv_path, "rb") as fh:
            rows = sum(1 for _ in fh) - 1
        print(
            f"synthetic run: {rows:,} rows, requests.csv "
            f"{os.path.getsize(csv_path) / 2**20:,.0f} MiB, generated in {generated:.1f} s"
        )
        if not os.path.exists(copy_path) or args.from_csv:
            if os.path.exists(copy_path):
                os.remove(copy_path)
            if not args.from_csv:
                end = measure([sys.executable, "-c", RUN_END, run_dir])
                print(
                    f"run's end (its summary: requests.csv parsed, its columnar copy written, "
                    f"the table printed): {end.text()}, {load_text()}"
                )
        if os.path.exists(copy_path):
            print(f"columnar copy: {os.path.getsize(copy_path) / 2**20:,.0f} MiB")
        elif not args.from_csv:
            print("no columnar copy was written: the report parses requests.csv")

        out = os.path.join(base, "report.html")
        report = measure(
            [sys.executable, "-m", "vllm_load", "report", run_dir, "-o", out, "--quiet"]
        )
        source = "requests.csv (writing the copy)" if args.from_csv else "the run as it ended"
        print(
            f"report from {source}: {report.text()}, HTML "
            f"{os.path.getsize(out) / 2**10:,.0f} KiB, {load_text()}"
        )
        for name, value, limit, unit in (
            ("wall time", report.wall_s, TARGET_WALL_S, "s"),
            ("peak RSS", report.peak_mib, TARGET_RSS_MIB, "MiB"),
        ):
            verdict = "PASS" if value <= limit else f"FAIL (over by {value - limit:,.1f} {unit})"
            print(f"  target {name} <= {limit:,.0f} {unit}: {verdict}")
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
