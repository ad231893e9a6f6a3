#!/usr/bin/env python3
"""How often the report's bottleneck verdict is right, judged against the simulator's truth.

A seeded generator draws regimes of `vllm-load sim` (the sequence cap, the KV cache, the token
budget, compute, and mixtures of them; default-like and small settings; short and long prompts,
with and without a shared prefix). For each regime the simulator is started on a free port and
`vllm-load run` steps a few levels chosen so the regime saturates, once, told the server's flags
(`--server-args`, which changes nothing in the test: only the analysis reads them from run.json),
and that run is judged twice: as run (told) and from a copy whose run.json holds no flags (not
told). `vllm-load report` gives each level's verdict; the
simulator's own counters (`vllm_sim:engine_steps_blocked_total` and its kin, scraped here about
5 times a second) give the truth over the same level's measured window:

- requests waited in at least WAITED of the window's engine steps: the truth is what kept the
  queue's head out in most of those steps (`max_num_seqs`: the batch at its cap;
  `max_num_batched_tokens`: the step's budget spent; `kv_cache`: too few free blocks for its
  prompt, or a step that preempted). Every reason that held in at least half of them is right
  (the batch and the budget are often spent at once); none does: the most frequent one alone.
- else, the batch was at its cap, or the step's budget spent, in at least half of the steps
  with nobody blocked (the users just fill it): `at_limit`; that limit is right, and so is
  `not_saturated` (the level is at the knee, not past it), and `compute` if it holds too;
- else, the engine stepped at least BUSY of the window and the per-sequence part of a step
  (what grows with the batch) was at least PER_SEQ of its time: `compute` (the batch doubled
  would add at most 5 % throughput, the report's tolerance for its knee);
- else, requests waited in under QUIET of the steps: `none` (the server had room; right
  verdicts are `not_saturated`, or `client`);
- else: `borderline`, not scored.

A level is right when its verdict is one of the truth's kinds, `undetermined` when it says so,
`missed` when it says `not_saturated` against a server limit, and wrong otherwise ("wrong with
advice" when that wrong verdict also moved a flag). Issue 45's target: no wrong verdict with
advice, at least 85 % right when told, 70 % when not, the rest undetermined.

    python bench/diagnosis_accuracy.py --out /tmp/acc            # 40 regimes, 40 runs (~13 min)
    python bench/diagnosis_accuracy.py --slice --out /tmp/acc    # 2 regimes, the CI check
    python bench/diagnosis_accuracy.py --only 'mixed|budget' --keep-runs --out /tmp/acc2
    python bench/diagnosis_accuracy.py --rejudge /tmp/acc2 --out /tmp/acc3   # this tree's rules

`--rejudge` reads an earlier harness's kept runs (`--keep-runs`) with this tree's rules and scores
them against the truth recorded then: a rule change is checked on every regime in seconds, with
no simulator started (the runs' evidence is the same, so only the rules differ).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from vllm_load.sim.child import SimulatorProcess  # noqa: E402
from vllm_load.sim.counters import (  # noqa: E402
    BLOCKED_BY,
    KV_CACHE,
    MAX_NUM_BATCHED_TOKENS,
    MAX_NUM_SEQS,
    PREEMPTION,
)

WAITED = 0.5  # share of a window's steps that left requests waiting: a server limit held
QUIET = 0.1  # ... under this share: nothing held (unless compute)
BUSY = 0.9  # share of the window the engine spent in steps, for compute
PER_SEQ = 0.9  # share of the step time that grows with the batch, for compute
MAJORITY = 0.5  # a blocking reason is true when it held in this share of the waited steps
COMPUTE, NONE, BORDERLINE, AT_LIMIT = "compute", "none", "borderline", "at_limit"
AT = (MAX_NUM_SEQS, MAX_NUM_BATCHED_TOKENS)  # the limits a step can be at with nobody waiting
LIMITS = (MAX_NUM_SEQS, KV_CACHE, MAX_NUM_BATCHED_TOKENS, COMPUTE)
TRUE_KIND = {PREEMPTION: KV_CACHE}  # a step that preempted stopped on the KV cache
OUTCOMES = ("right", "undetermined", "missed", "wrong")
SCRAPE_S = 0.2
BLOCK = 16


@dataclass(frozen=True)
class Regime:
    """One simulated server and the test run against it."""

    name: str
    family: str  # what the generator meant to bind; the truth is measured, not this
    sim: dict[str, str]  # the simulator's flags (vLLM's names where vLLM has them)
    input_tokens: int
    output_tokens: int
    shared_prefix: int
    levels: tuple[int, ...]

    def sim_args(self) -> list[str]:
        return [w for flag, v in self.sim.items() for w in (flag, v)]

    def server_args(self) -> str:
        """What the user would tell vllm-load: the flags the server was started with."""
        told = {"--num-gpu-blocks": "--num-gpu-blocks-override"}
        keep = ("--max-num-seqs", "--max-num-batched-tokens", "--max-model-len")
        keep += ("--num-gpu-blocks", "--block-size")
        flags = {**DEFAULT_SERVER, **{k: v for k, v in self.sim.items() if k in keep}}
        return " ".join(f"{told.get(k, k)} {v}" for k, v in flags.items())

    def run_args(self) -> list[str]:
        levels = ",".join(map(str, self.levels))
        measured = str(max(16, max(self.levels)))  # a wave of the top level: ~10-20 s a run
        args = ["--input-tokens", str(self.input_tokens)]
        args += ["--output-tokens", str(self.output_tokens), "--levels", levels]
        args += ["--requests-per-level", measured, "--warmup-requests", "4"]
        args += ["--level-time-cap", "25", "--metrics-interval", "0.25"]
        if self.shared_prefix:
            args += ["--shared-prefix-tokens", str(self.shared_prefix)]
        return args


DEFAULT_SERVER = {
    "--max-num-seqs": "256",
    "--max-num-batched-tokens": "8192",
    "--max-model-len": "8192",
    "--block-size": str(BLOCK),
}


# --- the regimes ---------------------------------------------------------------------------


def _blocks(tokens: int) -> int:
    return -(-tokens // BLOCK)


def _workload(rng: random.Random, long_ok: bool = True) -> tuple[int, int, int]:
    """(prompt, output, shared prefix) tokens: short or long prompts, a shared prefix or not."""
    prompt = rng.choice((96, 128, 256, 1024, 2048) if long_ok else (96, 128, 256))
    output = rng.choice((16, 32, 48))
    shared = (prompt // 2) if rng.random() < 0.4 else 0
    return prompt, output, shared


def _scale(ceiling_tok_s: float, fastest: float = 0.2) -> str:
    """A time scale that keeps the output rate under ~4,000 tok/s (1,000 chunks/s of 4 tokens:
    light for the client on a shared machine) and steps no faster than `fastest` x modelled."""
    return f"{max(fastest, ceiling_tok_s / 4000):.3g}"


def _seqs(rng: random.Random, i: int) -> Regime:
    cap = rng.choice((4, 8, 16, 32))
    prompt, output, shared = _workload(rng)
    budget = rng.choice((2048, 8192))
    step = 0.010 + 0.00005 * cap
    sim = {"--max-num-seqs": str(cap), "--max-num-batched-tokens": str(budget)}
    sim["--time-scale"] = _scale(cap / step)
    levels = (max(1, cap // 2), 2 * cap, 3 * cap)
    return Regime(f"{i:02d}-seqs", MAX_NUM_SEQS, sim, prompt, output, shared, levels)


def _kv(rng: random.Random, i: int) -> Regime:
    fits = rng.choice((3, 4, 6, 8))
    prompt, output, shared = _workload(rng)
    per_request = _blocks(prompt + output)
    blocks = fits * per_request + 1
    sim = {"--num-gpu-blocks": str(blocks), "--max-model-len": str(per_request * BLOCK)}
    sim["--max-num-batched-tokens"] = rng.choice(("2048", "8192"))
    sim["--time-scale"] = _scale(fits / 0.010)
    # a shared prefix is held once: more requests fit, so the levels reach further
    reach = 2 if not shared else 4
    levels = (max(1, fits // 2), reach * fits, 2 * reach * fits)
    return Regime(f"{i:02d}-kv", KV_CACHE, sim, prompt, output, shared, levels)


def _budget(rng: random.Random, i: int) -> Regime:
    cap = rng.choice((32, 64, 256))
    if rng.random() < 0.5:  # default-like: a 2,048-token budget and long prompts
        budget, prompt = 2048, rng.choice((1024, 2048))
        output = rng.choice((8, 16))
    else:
        budget = rng.choice((cap + 8, 2 * cap))
        prompt, output, _ = _workload(rng, long_ok=False)
    shared = (prompt // 4) if rng.random() < 0.3 else 0
    # the budget is spent when the users' tokens a step exceed it: U (p + o) / (o + p / B) > B
    steps = output + math.ceil(prompt / budget)
    knee = max(1, round(budget * steps / (prompt + output)))
    top = min(cap - cap // 4, 4 * knee, 96)  # below the cap: the budget alone binds
    levels = tuple(sorted({max(1, knee // 4), min(2 * knee, top), top}))
    sim = {"--max-num-seqs": str(cap), "--max-num-batched-tokens": str(budget)}
    step = 0.010 + 0.00002 * budget  # a step full of prefill
    sim["--time-scale"] = _scale(budget / step * output / (prompt + output))
    return Regime(f"{i:02d}-budget", MAX_NUM_BATCHED_TOKENS, sim, prompt, output, shared, levels)


def _compute(rng: random.Random, i: int) -> Regime:
    # a step costs b + d n: the per-sequence part is 90 % of it from n90 = 9 b / d sequences
    n90 = rng.choice((8, 16, 32))
    base = 0.001
    decode = 9 * base / n90
    prompt, output, shared = _workload(rng, long_ok=False)
    sim = {"--step-base": str(base), "--decode-cost": f"{decode:.6g}", "--prefill-cost": "1e-6"}
    sim["--time-scale"] = _scale(1 / decode, fastest=1.0)
    levels = (max(1, n90 // 8), 2 * n90, 3 * n90)
    return Regime(f"{i:02d}-compute", COMPUTE, sim, prompt, output, shared, levels)


def _mixed(rng: random.Random, i: int) -> Regime:
    """Two limits close together: the cap and the budget, or the cap and the KV cache."""
    cap = rng.choice((8, 16, 32))
    prompt, output, shared = _workload(rng, long_ok=False)
    sim = {"--max-num-seqs": str(cap), "--time-scale": _scale(cap / 0.010)}
    if rng.random() < 0.5:
        sim["--max-num-batched-tokens"] = str(cap + rng.choice((4, 8, 16)))
        family = "seqs+budget"
    else:
        per_request = _blocks(prompt + output)
        sim["--num-gpu-blocks"] = str(cap * per_request + 1)
        sim["--max-model-len"] = str(per_request * BLOCK)
        family = "seqs+kv"
    levels = (max(1, cap // 4), cap, 3 * cap)
    return Regime(f"{i:02d}-mixed", family, sim, prompt, output, shared, levels)


FAMILIES = (_seqs, _kv, _budget, _compute, _mixed)

# Regimes the old rules got wrong (issue 45), always in the draw
KNOWN = (
    Regime(
        "known-budget-40",
        "seqs+budget",
        {"--max-num-seqs": "32", "--max-num-batched-tokens": "40", "--time-scale": "0.5"},
        256,
        48,
        0,
        (2, 4, 12, 24),
    ),
    Regime(
        "known-slow-defaults",
        COMPUTE,
        {"--step-base": "0.001", "--decode-cost": "0.0005", "--prefill-cost": "1e-6"},
        128,
        32,
        0,
        (2, 36, 72),
    ),
    Regime(  # every flag at vLLM's default, each step slow: nothing binds but the step time
        "known-defaults-slow",
        NONE,
        {"--time-scale": "2"},
        128,
        16,
        0,
        (8, 32, 96),
    ),
)


def draw(seed: int, cases: int) -> list[Regime]:
    """`cases` regimes: the known ones first, then the families in turn, seeded."""
    rng = random.Random(seed)
    out = list(KNOWN[:cases])
    for i in range(len(out), cases):
        out.append(FAMILIES[i % len(FAMILIES)](rng, i))
    return out


# The CI slice (~40 s): the first known regime cut to a level below and one past its knee, and a
# KV cache of 4 requests of 9 blocks under 2 and 16 users
SLICE = (
    Regime(
        "slice-budget-40",
        "seqs+budget",
        {"--max-num-seqs": "32", "--max-num-batched-tokens": "40", "--time-scale": "0.3"},
        256,
        16,
        0,
        (2, 24),
    ),
    Regime(
        "slice-kv",
        KV_CACHE,
        {"--num-gpu-blocks": "37", "--max-model-len": "256", "--time-scale": "0.2"},
        128,
        16,
        0,
        (2, 16),
    ),
)


# --- the truth -----------------------------------------------------------------------------

_SIM_LINE = re.compile(r"^(vllm_sim:\w+?)(?:_total)?(\{[^}]*\})? (\S+)$")
_REASON = re.compile(r'(?:reason|limit)="(\w+)"')


def parse_sim(text: str) -> dict[str, float]:
    """The simulator's `vllm_sim:` counters in a /metrics text, by name (reason for blocked)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("vllm_sim:") or "_created" in line.split(" ", 1)[0]:
            continue
        m = _SIM_LINE.match(line)
        if m:
            name, labels, value = m.groups()
            reason = _REASON.search(labels or "")
            out[f"{name}:{reason.group(1)}" if reason else name] = float(value)
    return out


class Scraper(threading.Thread):
    """Reads the simulator's counters every SCRAPE_S s: [(unix time, counters)]."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url + "/metrics"
        self.samples: list[tuple[float, dict[str, float]]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            sent = time.time()
            try:
                with urllib.request.urlopen(self.url, timeout=5) as r:
                    text = r.read().decode()
                self.samples.append(((sent + time.time()) / 2, parse_sim(text)))
            except OSError:
                pass
            self.stop.wait(SCRAPE_S)


def at(samples: list[tuple[float, dict[str, float]]], ts: float) -> dict[str, float] | None:
    """The counters at `ts`, interpolated between the samples either side (None outside)."""
    for (t0, a), (t1, b) in zip(samples, samples[1:]):
        if t0 <= ts <= t1:
            f = 0.0 if t1 == t0 else (ts - t0) / (t1 - t0)
            return {k: a.get(k, 0.0) + f * (b.get(k, 0.0) - a.get(k, 0.0)) for k in b}
    return None


@dataclass
class Truth:
    kinds: list[
        str
    ]  # the limits that held (or compute); [at_limit, limits...], [none], [borderline]
    steps: float
    waited: float  # share of steps that left requests waiting
    blocked: dict[str, float]  # share of the waited steps each reason held in
    full: dict[str, float]  # share of the steps at each of `AT`, waiting or not
    busy: float  # share of the window the engine stepped
    per_seq: float  # share of step time that grows with the batch

    @property
    def kind(self) -> str:
        return self.kinds[0]


def truth(samples: list, start: float, end: float) -> Truth | None:
    """The truth of the window [start, end] (module docstring), None if not scraped over it."""
    a, b = at(samples, start), at(samples, end)
    if a is None or b is None or end <= start:
        return None
    d = {k: b[k] - a.get(k, 0.0) for k in b}
    steps = d.get("vllm_sim:engine_steps", 0.0)
    if steps < 1:
        return Truth([BORDERLINE], steps, 0.0, {}, {}, 0.0, 0.0)
    waited_steps = d.get("vllm_sim:engine_steps_waiting", 0.0)
    seconds = d.get("vllm_sim:engine_step_seconds", 0.0)
    fixed = d.get("vllm_sim:engine_step_fixed_seconds", 0.0)
    blocked: dict[str, float] = {}
    for reason in BLOCKED_BY:
        kind = TRUE_KIND.get(reason, reason)
        share = d.get(f"vllm_sim:engine_steps_blocked:{reason}", 0.0) / max(waited_steps, 1.0)
        blocked[kind] = blocked.get(kind, 0.0) + share
    full = {k: d.get(f"vllm_sim:engine_steps_full:{k}", 0.0) / steps for k in AT}
    waited, busy = waited_steps / steps, seconds / (end - start)
    per_seq = 1 - fixed / seconds if seconds else 0.0
    compute = busy >= BUSY and per_seq >= PER_SEQ
    at_limits = [k for k in AT if full[k] >= MAJORITY]
    if waited >= WAITED:
        ranked = sorted(blocked, key=lambda k: -blocked[k])
        kinds = [k for k in ranked if blocked[k] >= MAJORITY] or ranked[:1]
    elif at_limits:
        kinds = [AT_LIMIT, *at_limits, *([COMPUTE] if compute else [])]
    elif compute:
        kinds = [COMPUTE]
    elif waited < QUIET:
        kinds = [NONE]
    else:
        kinds = [BORDERLINE]
    return Truth(kinds, steps, waited, blocked, full, busy, per_seq)


# --- one run -------------------------------------------------------------------------------


@dataclass
class LevelCase:
    value: float
    window: tuple[float, float]
    verdict: str
    advice: list
    reason: str
    evidence: dict  # what the verdict read (NaN as null)
    truth: dict | None
    outcome: str  # OUTCOMES, or "unscored"
    wrong_with_advice: bool


@dataclass
class RunCase:
    regime: str
    told: bool
    levels: list[LevelCase] = field(default_factory=list)
    error: str = ""
    seconds: float = 0.0


def judge(verdict: str, advice: list, t: Truth | None) -> tuple[str, bool]:
    """(outcome, wrong with advice) of a verdict against the truth."""
    if t is None or t.kind == BORDERLINE:
        return "unscored", False
    if t.kind in (NONE, AT_LIMIT):  # nothing blocked: below the knee, or just at a limit
        right = {"not_saturated", "client", *t.kinds[1:]}
    else:
        right = set(t.kinds)
    if verdict in right:
        return "right", False
    if verdict == "undetermined":
        return "undetermined", False
    if verdict == "not_saturated":
        return "missed", False
    return "wrong", bool(advice)


def level_windows(run_dir: str) -> dict[float, tuple[float, float]]:
    """{level value: its measured window (unix times)} as docs/run-format.md defines it: from
    the end of the W-th of its requests to finish to the end of the (W + K)-th to start."""
    with open(os.path.join(run_dir, "steps.csv"), encoding="utf-8") as fh:
        levels = list(csv.DictReader(fh))
    with open(os.path.join(run_dir, "requests.csv"), encoding="utf-8") as fh:
        requests = list(csv.DictReader(fh))
    out = {}
    for lv in levels:
        mine = sorted(
            (r for r in requests if r["level"] == lv["level"]), key=lambda r: float(r["start_ts"])
        )
        w, k = int(lv["warmup_requests"]), int(lv["target_requests"])
        ends = sorted(float(r["end_ts"]) for r in mine)
        start = ends[w - 1] if 0 < w <= len(ends) else float(lv["start_ts"])
        measured = mine[w:k]
        if not measured:
            continue
        end = max(float(r["end_ts"]) for r in measured)
        out[float(lv["value"])] = (start, end)
    return out


def verdicts(run_dir: str) -> dict[float, dict]:
    """{level value: its `bottleneck`} as `vllm-load report` writes them in NAME.summary.json
    (the same `summary_dict`, without the report's charts: 0.3 s a run instead of 7)."""
    from vllm_load.report.model import build_report_data
    from vllm_load.report.summary_files import summary_dict

    series = summary_dict(build_report_data([run_dir]))["series"][0]
    return {float(lv["value"]): lv["bottleneck"] for lv in series["levels"]}


def _finite(d: dict) -> dict:
    """`d` with NaN and infinite numbers as None: results.json stays strict JSON."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in d.items()}


def run_regime(regime: Regime, work: str) -> list[RunCase]:
    """Start the regime's simulator, run vllm-load against it once, told the server's flags
    (`--server-args`, which changes nothing in the test: the analysis reads it from run.json),
    and judge every level of that run twice: as run, told, and from a copy whose run.json says
    nothing about the server's flags, not told. The truth is the same scrape for both."""
    began = time.monotonic()
    told_dir = case_dir(work, regime.name, True)
    cli = [sys.executable, "-m", "vllm_load"]
    with SimulatorProcess("--tokens-per-chunk", "4", *regime.sim_args()) as sim:
        scraper = Scraper(sim.url)
        scraper.start()
        args = [*cli, "run", "--host", sim.url, *regime.run_args(), "--run-dir", told_dir]
        args += ["--server-args", regime.server_args()]
        proc = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=ROOT)
        scraper.stop.set()
        scraper.join()
    seconds = time.monotonic() - began
    if proc.returncode != 0:
        error = f"vllm-load run exited {proc.returncode}: {proc.stderr.strip()[-500:]}"
        return [RunCase(regime.name, told, error=error, seconds=seconds) for told in (True, False)]
    try:
        untold(told_dir, case_dir(work, regime.name, False))
    except (OSError, ValueError) as e:
        error = f"could not copy the run {told_dir}: {e}"
        return [RunCase(regime.name, told, error=error, seconds=seconds) for told in (True, False)]
    return [
        judge_run(regime.name, told, case_dir(work, regime.name, told), scraper.samples, seconds)
        for told in (True, False)
    ]


def case_dir(work: str, regime: str, told: bool) -> str:
    return os.path.join(work, f"{regime}-{'told' if told else 'not-told'}")


def untold(told_dir: str, out: str) -> None:
    """A copy of the run in `told_dir` as a run not told the server's flags records it: its
    run.json without `--server-args` (its data files linked, not copied)."""
    shutil.copytree(told_dir, out, copy_function=os.link)
    path = os.path.join(out, "run.json")
    with open(path, encoding="utf-8") as fh:
        run = json.load(fh)
    run["settings"]["server_args"] = ""
    words = run.get("command", "").split(" --server-args ")
    run["command"] = words[0]  # the flags are its last option (run_regime gives them last)
    os.unlink(path)  # a link to the told run's file: write a file of its own
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(run, fh, indent=1)


def judge_run(regime: str, told: bool, run_dir: str, samples: list, seconds: float) -> RunCase:
    """Every level of the run in `run_dir`: the report's verdict against the truth of
    `samples` (the simulator's counters) over the level's measured window."""
    case = RunCase(regime, told, seconds=seconds)
    try:
        windows, said = level_windows(run_dir), verdicts(run_dir)
    except (OSError, ValueError, KeyError, IndexError) as e:
        case.error = f"could not read the run {run_dir}: {e}"
        return case
    for value, (start, end) in sorted(windows.items()):
        v = said.get(value, {})
        t = truth(samples, start, end)
        outcome, bad = judge(v.get("kind", "?"), v.get("advice", []), t)
        case.levels.append(
            LevelCase(
                value,
                (start, end),
                v.get("kind", "?"),
                v.get("advice", []),
                v.get("reason", ""),
                _finite(v.get("evidence", {})),
                None if t is None else asdict(t),
                outcome,
                bad,
            )
        )
    return case


# --- the table -----------------------------------------------------------------------------


def confusion(cases: list[RunCase]) -> dict:
    """{told|not told: {true kind: {outcome: n, 'wrong_with_advice': n, 'n': n}}}."""
    table: dict = {}
    for case in cases:
        side = table.setdefault("told" if case.told else "not told", {})
        for lv in case.levels:
            if lv.outcome == "unscored" or lv.truth is None:
                continue
            row = side.setdefault(lv.truth["kinds"][0], dict.fromkeys((*OUTCOMES, "n"), 0))
            row[lv.outcome] += 1
            row["n"] += 1
            row["wrong_with_advice"] = row.get("wrong_with_advice", 0) + lv.wrong_with_advice
    return table


def render(table: dict, cases: list[RunCase]) -> str:
    head = f"{'told?':9} {'true kind':24} {'n':>4} " + " ".join(f"{o:>12}" for o in OUTCOMES)
    lines = [head + f" {'wrong+advice':>12}"]
    for side in ("told", "not told"):
        rows = table.get(side, {})
        total = dict.fromkeys((*OUTCOMES, "n", "wrong_with_advice"), 0)
        for kind in sorted(rows, key=lambda k: (k not in LIMITS, k)):
            row = rows[kind]
            for k in total:
                total[k] += row.get(k, 0)
            lines.append(_row(side, kind, row))
        lines.append(_row(side, "all", total))
    unscored = sum(lv.outcome == "unscored" for c in cases for lv in c.levels)
    failed = sum(bool(c.error) for c in cases)
    lines.append(
        f"levels not scored (borderline truth or no window): {unscored}; runs failed: {failed}"
    )
    return "\n".join(lines)


def _row(side: str, kind: str, row: dict) -> str:
    n = row.get("n", 0)
    cells = " ".join(
        f"{row.get(o, 0):>5} ({row.get(o, 0) / n if n else 0:>4.0%})" for o in OUTCOMES
    )
    return f"{side:9} {kind:24} {n:>4} {cells} {row.get('wrong_with_advice', 0):>12}"


def targets(table: dict) -> list[str]:
    """Issue 45's targets, each with its measured figure."""

    def share(side: str, limits: bool) -> tuple[int, int]:
        rows = [r for k, r in table.get(side, {}).items() if not limits or k in LIMITS]
        return sum(r.get("right", 0) for r in rows), sum(r["n"] for r in rows)

    bad = sum(r.get("wrong_with_advice", 0) for s in table.values() for r in s.values())
    out = [f"wrong verdicts with advice: {bad} (target 0)"]
    for side, goal in (("told", 0.85), ("not told", 0.70)):
        right, n = share(side, limits=True)
        every, scored = share(side, limits=False)
        out.append(
            f"right when {side}, levels a limit held: {right}/{n} = {_pct(right, n)} (target >= "
            f"{goal:.0%}); every scored level: {every}/{scored} = {_pct(every, scored)}"
        )
    return out


def _pct(part: int, whole: int) -> str:
    return f"{part / whole:.0%}" if whole else "-"


# --- the command ---------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Judge the report's bottleneck verdicts against the simulator's truth "
        "(issue 45): draw regimes, run each once and judge it told and not told the server's "
        "flags, print the "
        "confusion table and write results.json.",
    )
    p.add_argument("--seed", type=int, default=45, help="seed of the regimes (default 45)")
    p.add_argument("--cases", type=int, default=40, help="regimes to draw (default 40)")
    p.add_argument(
        "--out",
        default="",
        help="directory for results.json and the runs (default: a temporary one)",
    )
    p.add_argument("--slice", action="store_true", help="the CI slice: 2 fixed regimes (~1 min)")
    p.add_argument("--keep-runs", action="store_true", help="keep the run directories")
    p.add_argument("--list", action="store_true", help="print the regimes drawn and stop")
    p.add_argument(
        "--only",
        default="",
        metavar="REGEX",
        help="only the drawn regimes whose name matches (e.g. 'mixed|budget', '^29-')",
    )
    p.add_argument(
        "--rejudge",
        default="",
        metavar="DIR",
        help="re-read the runs an earlier harness kept in DIR (--keep-runs) with this tree's "
        "rules and score them against the truth recorded there; no simulator is started",
    )
    args = p.parse_args(argv)
    if args.cases < 1:
        p.error("--cases must be at least 1")
    try:
        re.compile(args.only)
    except re.error as e:
        p.error(f"--only {args.only!r} is not a regular expression ({e}): give one like 'mixed'")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = args.out or tempfile.mkdtemp(prefix="diagnosis-accuracy-")
    os.makedirs(out, exist_ok=True)
    if args.rejudge:
        return rejudge(args, out)
    regimes = list(SLICE) if args.slice else draw(args.seed, args.cases)
    regimes = [r for r in regimes if re.search(args.only, r.name)]
    if not regimes:
        print(f"diagnosis_accuracy: no regime's name matches --only {args.only!r}", file=sys.stderr)
        return 2
    if args.list:
        for r in regimes:
            print(
                f"{r.name:18} {r.family:24} {' '.join(r.sim_args()):60} {r.input_tokens}/"
                f"{r.output_tokens} prefix {r.shared_prefix} levels {r.levels}"
            )
        return 0
    work = os.path.join(out, "runs")
    if os.path.isdir(work) and os.listdir(work):
        print(
            f"diagnosis_accuracy: {work} holds an earlier harness's runs: give a new --out",
            file=sys.stderr,
        )
        return 2
    os.makedirs(work, exist_ok=True)
    cases: list[RunCase] = []
    for regime in regimes:
        for case in run_regime(regime, work):
            cases.append(case)
            print(_progress(regime, case), flush=True)
        write_results(out, args, regimes, cases)  # a harness cut short keeps what it ran
    _print_table(cases)
    print(f"results: {write_results(out, args, regimes, cases)}")
    if not args.keep_runs:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if any(c.error for c in cases) else 0


def _print_table(cases: list[RunCase]) -> None:
    table = confusion(cases)
    print()
    print(render(table, cases))
    for line in targets(table):
        print(line)


def rejudge(args: argparse.Namespace, out: str) -> int:
    """Score the runs an earlier harness kept (`args.rejudge`) with this tree's verdicts against
    the truth it recorded; prints what changed per level, then the table."""
    try:
        with open(os.path.join(args.rejudge, "results.json"), encoding="utf-8") as fh:
            before = json.load(fh)
    except (OSError, ValueError) as e:
        print(
            f"diagnosis_accuracy: --rejudge {args.rejudge}: no readable results.json ({e})",
            file=sys.stderr,
        )
        return 2
    cases: list[RunCase] = []
    for old in before["cases"]:
        if not re.search(args.only, old["regime"]) or old["error"]:
            continue
        side = "told" if old["told"] else "not-told"
        run_dir = os.path.join(args.rejudge, "runs", f"{old['regime']}-{side}")
        if not os.path.isdir(run_dir):
            continue  # not kept
        said = verdicts(run_dir)
        case = RunCase(old["regime"], old["told"], seconds=old["seconds"])
        for lv in old["levels"]:
            v = said.get(lv["value"], {})
            t = Truth(**lv["truth"]) if lv["truth"] else None
            outcome, bad = judge(v.get("kind", "?"), v.get("advice", []), t)
            case.levels.append(
                LevelCase(
                    lv["value"], tuple(lv["window"]), v.get("kind", "?"), v.get("advice", []),
                    v.get("reason", ""), _finite(v.get("evidence", {})), lv["truth"], outcome, bad,
                )
            )  # fmt: skip
            if (lv["verdict"], lv["outcome"]) != (case.levels[-1].verdict, outcome):
                print(
                    f"{old['regime']} ({side}) {lv['value']:g}: {lv['verdict']} [{lv['outcome']}]"
                    f" -> {v.get('kind', '?')} [{outcome}{'+advice' if bad else ''}]"
                    f" (truth {'/'.join(t.kinds) if t else '?'})"
                )
        cases.append(case)
    if not cases:
        print(f"diagnosis_accuracy: {args.rejudge} kept no run to rejudge", file=sys.stderr)
        return 2
    _print_table(cases)
    regimes = [r for r in before["regimes"] if re.search(args.only, r["name"])]
    print(f"results: {write_results(out, args, regimes, cases)}")
    return 0


def write_results(out: str, args: argparse.Namespace, regimes: list, cases: list) -> str:
    """results.json: the regimes, every case so far, the table and the targets; its path."""
    table = confusion(cases)
    results = {
        "seed": args.seed,
        "slice": args.slice,
        "truth_rule": {
            "waited": WAITED,
            "quiet": QUIET,
            "busy": BUSY,
            "per_seq": PER_SEQ,
            "majority": MAJORITY,
        },
        "regimes": [r if isinstance(r, dict) else asdict(r) for r in regimes],
        "cases": [asdict(c) for c in cases],
        "confusion": table,
        "targets": targets(table),
    }
    path = os.path.join(out, "results.json")
    with open(path + ".tmp", "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=1)
    os.replace(path + ".tmp", path)
    return path


def _progress(regime: Regime, case: RunCase) -> str:
    side = "told" if case.told else "not told"
    if case.error:
        return f"{regime.name} ({side}): FAILED {case.error}"
    cells = ", ".join(
        f"{lv.value:g}: {lv.verdict} vs {'/'.join(lv.truth['kinds']) if lv.truth else '?'}"
        f" [{lv.outcome}]"
        for lv in case.levels
    )
    return f"{regime.name} ({side}, {case.seconds:.0f} s) {regime.sim_args()}: {cells}"


if __name__ == "__main__":
    sys.exit(main())
