"""Is the guided search better than a grid? (issue 47, item 4)

On the simulator, a grid over `--max-num-seqs` x `--max-num-batched-tokens` x `--num-gpu-blocks`
is run whole: every cell's SLO-max found by `vllm-load tune --slo` (the same search the guided
one uses), for each SLO. Then `vllm-load tune --slo ... --guided` runs from several starting
configurations (cells of the grid), with `--bound`s that keep it inside the grid's ranges. For
each start and SLO: the guided search's best SLO-max against the grid's best, and the runs
each used (every level of every SLO-max search is one run). It passes where the guided search
reaches within 5 % of the grid's best in at most a third of the grid's runs.

Every process talks to 127.0.0.1 only, on a free port, is bounded in time and stopped by its
own PID (the tune commands stop the servers they start). `--quick`: a 2 x 1 x 1 grid, one start,
one SLO (the smoke test's); `--small`: a 2 x 2 x 2 grid and the first SLO. The full grid is
3 x 2 x 2 (what a shared 2-core machine runs for two SLOs in about 45 minutes).

    python bench/guided_search.py [--quick | --small] [--out DIR]
"""

from __future__ import annotations

import argparse
import glob
import itertools
import json
import os
import subprocess
import sys
import tempfile

from vllm_load.sim.child import free_port

#: a model length the smallest KV cache of the grid holds (the simulator, as vLLM, refuses one
#: that does not fit)
SIM = f"{sys.executable} -m vllm_load sim --time-scale 0.1 --seed 1 --max-model-len 512"
#: tiny levels on the simulator (the requests of a level take a second or two)
WORKLOAD = (
    "--input-tokens",
    "256",
    "--output-tokens",
    "32",
    "--requests-per-level",
    "12",
    "--warmup-requests",
    "2",
    "--max-level",
    "64",
    "--max-levels",
    "6",
    "--ready-timeout",
    "60",
    # a level lasts about a second here: at the default 1 s the diagnosis would see one scrape
    "--metrics-interval",
    "0.1",
)
#: the KV cache by vLLM's flag, which the simulator takes too: the flag the verdict advises
GRID = {
    "max_num_seqs": ("2", "8", "32"),
    "max_num_batched_tokens": ("256", "4096"),
    "num_gpu_blocks_override": ("64", "1024"),
}
STARTS = (
    {"max_num_seqs": "2", "max_num_batched_tokens": "256", "num_gpu_blocks_override": "64"},
    {"max_num_seqs": "2", "max_num_batched_tokens": "4096", "num_gpu_blocks_override": "1024"},
    {"max_num_seqs": "32", "max_num_batched_tokens": "256", "num_gpu_blocks_override": "64"},
)
SLOS = ("e2e_p90<=400ms", "ttft_p90<=150ms,itl_p90<=40ms")
#: `--small`: a 2 x 2 x 2 grid and the first SLO (what a 2-core machine runs in half an hour)
SMALL_GRID = {
    "max_num_seqs": ("2", "16"),
    "max_num_batched_tokens": ("256", "2048"),
    "num_gpu_blocks_override": ("64", "1024"),
}
SMALL_STARTS = (
    {"max_num_seqs": "2", "max_num_batched_tokens": "256", "num_gpu_blocks_override": "64"},
    {"max_num_seqs": "2", "max_num_batched_tokens": "2048", "num_gpu_blocks_override": "1024"},
    {"max_num_seqs": "16", "max_num_batched_tokens": "256", "num_gpu_blocks_override": "64"},
)
QUICK_GRID = {
    "max_num_seqs": ("2", "8"),
    "max_num_batched_tokens": ("1024",),
    "num_gpu_blocks_override": ("1024",),
}


def command(config: dict[str, str], port: int) -> str:
    flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in config.items())
    return f"{SIM} --port {port} {flags}"


def tune(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vllm_load", "tune", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def grid_cell(config: dict[str, str], slo: str, out: str, name: str) -> tuple[float | None, int]:
    """(SLO-max, levels run) of one cell."""
    port = free_port()
    done = tune(
        "--slo", slo, "--server-cmd", command(config, port), "--host", f"http://127.0.0.1:{port}",
        *WORKLOAD, "--out", out, "--name", name,
    )  # fmt: skip
    path = os.path.join(out, name, "slo_max.json")
    if not os.path.exists(path):
        raise SystemExit(f"grid cell {config} for {slo} wrote nothing:\n{done.stderr[-2000:]}")
    state = json.load(open(path, encoding="utf-8"))
    if "result" not in state:  # its server did not start, or a level did not complete
        print(f"grid cell {config}: {done.stderr.strip().splitlines()[-1:]}", flush=True)
        return None, len(state["levels"])
    return state["result"]["slo_max"], int(state["result"]["levels_run"])


def guided(start: dict[str, str], grid: dict, slo: str, out: str, name: str) -> dict:
    port = free_port()
    bounds = [f"--bound={k}={min(map(int, v))}..{max(map(int, v))}" for k, v in grid.items()]
    done = tune(
        "--slo", slo, "--guided", "--server-cmd", command(start, port),
        "--host", f"http://127.0.0.1:{port}", *bounds, *WORKLOAD, "--out", out, "--name", name,
    )  # fmt: skip
    path = os.path.join(out, name, "guided.json")
    if not os.path.exists(path):
        raise SystemExit(
            f"guided search from {start} for {slo} wrote nothing:\n{done.stderr[-2000:]}"
        )
    return json.load(open(path, encoding="utf-8"))


def short(config: dict[str, str]) -> str:
    return "/".join(config.get(k, "-") for k in GRID)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a 2-cell grid, one start, one SLO")
    parser.add_argument("--small", action="store_true", help="a 2 x 2 x 2 grid, the first SLO")
    parser.add_argument("--out", default="", help="where the tunes go (default: a temporary dir)")
    parser.add_argument(
        "--phase",
        choices=("all", "grid", "guided", "table"),
        default="all",
        help="grid: run the grid only, its SLO-maxes kept in OUT/grid-N-KofN.json; guided: run "
        "the guided searches only (OUT/guided-N-J/guided.json); table: read both back (same "
        "--out) and print the table",
    )
    parser.add_argument(
        "--start-index", type=int, default=None, help="guided: run only the start of this index"
    )
    parser.add_argument(
        "--slo-index", type=int, default=None, help="run only the SLO of this index (0 or 1)"
    )
    parser.add_argument(
        "--shard",
        default="0/1",
        help="K/N: run only the grid cells whose index is K modulo N (N processes share a grid)",
    )
    opts = parser.parse_args()
    shard, shards = (int(x) for x in opts.shard.split("/"))
    grid = QUICK_GRID if opts.quick else SMALL_GRID if opts.small else GRID
    starts = SMALL_STARTS if opts.small else STARTS
    if opts.quick:
        starts = ({k: v[0] for k, v in grid.items()},)
    slos = SLOS[:1] if opts.quick or opts.small else SLOS
    chosen = range(len(slos)) if opts.slo_index is None else (opts.slo_index,)
    out = opts.out or tempfile.mkdtemp(prefix="guided-bench-")
    cells = [dict(zip(grid, values)) for values in itertools.product(*grid.values())]
    rows = []
    if opts.phase in ("all", "grid"):
        for s in chosen:
            slo, found = slos[s], {}
            for i, cell in enumerate(cells):
                if i % shards != shard:
                    continue
                found[short(cell)] = grid_cell(cell, slo, out, f"grid-{s}-{i}")
                print(f"grid {slo} {short(cell)}: SLO-max {found[short(cell)][0]}", flush=True)
            name = f"grid-{s}-{shard}of{shards}.json"
            with open(os.path.join(out, name), "w", encoding="utf-8") as f:
                json.dump({"slo": slo, "found": found}, f, indent=1)
    if opts.phase == "grid":
        print(f"\nGrid: {out}")
        return 0
    if opts.phase in ("all", "guided"):
        for s in chosen:
            for j, start in enumerate(starts):
                if opts.start_index is None or opts.start_index == j:
                    line = guided(start, grid, slos[s], out, f"guided-{s}-{j}")["result"]["line"]
                    print(f"guided {slos[s]} from {short(start)}: {line}", flush=True)
    if opts.phase == "guided":
        return 0
    for s in chosen:
        slo = slos[s]
        found = {}
        for name in glob.glob(os.path.join(out, f"grid-{s}-*of*.json")):
            with open(name, encoding="utf-8") as f:
                for k, v in json.load(f)["found"].items():  # a cell rerun alone wins
                    if v[0] is not None or k not in found:
                        found[k] = tuple(v)
        if len(found) != len(cells):
            raise SystemExit(f"{out} holds {len(found)} of the grid's {len(cells)} cells for {slo}")
        best = max((v for v, _ in found.values() if v is not None), default=None)
        grid_runs = sum(n for _, n in found.values())
        for j, start in enumerate(starts):
            with open(os.path.join(out, f"guided-{s}-{j}", "guided.json"), encoding="utf-8") as f:
                state = json.load(f)
            result = state["result"]
            reached = result["best_slo_max"]
            within = best is not None and reached is not None and reached >= 0.95 * best
            cheap = result["runs_used"] <= grid_runs / 3
            rows.append(
                (
                    slo,
                    short(start),
                    f"{best:g}" if best is not None else "-",
                    str(grid_runs),
                    f"{reached:g}" if reached is not None else "-",
                    short({**start, **(result["best_config"] or {})}),
                    str(result["runs_used"]),
                    str(result["steps"]),
                    "yes" if within and cheap else "no",
                )
            )
    header = (
        "SLO",
        "start (seqs/batched/blocks)",
        "grid best",
        "grid runs",
        "guided best",
        "at",
        "guided runs",
        "steps",
        "within 5% in <= 1/3 runs",
    )
    table = [header, *rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    print()
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")
    print(f"\nTunes: {out}")
    return 0 if all(r[-1] == "yes" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
