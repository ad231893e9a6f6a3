"""Report scale: `vllm-load report` over one synthetic run of 1,000,000 request rows.

The rows are as a real run writes them: every stream's `chunk_marks` and ITL histogram, two
personas (one of them conversations), 1 % failures, seven levels, four load workers.
Prints the time to generate the run (not part of the figure), then the report's wall time and
peak RSS, measured on the `vllm-load report` child process, against issue 40's targets
(<= 10 s, <= 1 GiB).

    python bench/report_scale.py [--rows 1000000] [--keep DIR] [--run DIR]

`--run` reports an existing run (one `--keep` wrote) instead of generating one.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

from vllm_load.rundir.synthetic import ServerModel, SyntheticRun, write_synthetic_run
from vllm_load.rundir.synthetic_personas import Persona

LEVELS = (10, 50, 100, 200, 500, 750, 1000)


def realistic_run(rows: int, seed: int = 0) -> SyntheticRun:
    """About `rows` request rows as a real run writes them (see the module docstring)."""
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rows", type=int, default=1_000_000, help="request rows in the run (default 1,000,000)"
    )
    parser.add_argument("--keep", default="", help="write the run and report here and keep them")
    parser.add_argument("--run", default="", help="report this run instead of generating one")
    args = parser.parse_args()

    base = args.keep or tempfile.mkdtemp(prefix="vllm-load-report-scale-")
    try:
        t0 = time.perf_counter()
        run_dir = args.run or write_synthetic_run(
            os.path.join(base, "runs"), realistic_run(args.rows)
        )
        generated = time.perf_counter() - t0
        size = os.path.getsize(os.path.join(run_dir, "requests.csv"))
        with open(os.path.join(run_dir, "requests.csv"), "rb") as fh:
            rows = sum(1 for _ in fh) - 1
        print(
            f"synthetic run: {rows:,} rows, requests.csv {size / 2**20:,.0f} MiB, generated in {generated:.1f} s"
        )

        out = os.path.join(base, "report.html")
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "vllm_load", "report", run_dir, "-o", out, "--quiet"],
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            print(proc.stderr, file=sys.stderr)
            return 1
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        peak_mib = usage.ru_maxrss / 1024  # KiB on Linux
        # CPU time beside the wall time: on a shared machine the wall time reads its load too
        print(
            f"report: wall {wall:.1f} s, CPU {usage.ru_utime + usage.ru_stime:.1f} s, peak RSS "
            f"{peak_mib:,.0f} MiB, HTML {os.path.getsize(out) / 2**10:,.0f} KiB, "
            f"load average {os.getloadavg()[0]:.2f}"
        )
        for name, value, limit, unit in (
            ("wall time", wall, 10.0, "s"),
            ("peak RSS", peak_mib, 1024.0, "MiB"),
        ):
            verdict = "PASS" if value <= limit else f"MISS by {value - limit:,.1f} {unit}"
            print(f"  target {name} <= {limit:,.0f} {unit}: {verdict}")
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
