"""`vllm-load tune`: the stepped test over a matrix of server settings, ranked.

For every combination of `--matrix NAME=V1,V2,...` values, the server command (a template with
`{NAME}` fields) is started, the stepped test runs once it is ready, and the server is stopped.
Each run is tagged `config.NAME=value` in run.json, which makes every combination its own
series in the report. The result is a configuration table with the best configuration for
throughput (highest peak tok/s, or with `--rank-by goodput` the highest peak goodput: requests
per second meeting the `--slo`s) and for latency (lowest p99 E2E averaged over the tested
levels, the same levels for every configuration). Combinations already completed in the tune
directory are not run again, so an interrupted tune resumes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import re
import string
from dataclasses import asdict, dataclass

from ..analysis.decisions.slo import parse_slo
from ..rundir.files import safe_name, write_atomic
from ..settings import Settings
from ..target.process import ServerError, ServerProcess, wait_ready
from ..values import SettingsError
from .common import add_name_argument, add_ready_timeout_argument, add_server_cmd_argument
from .errors import CommandFailed, Interrupted, server_log
from .run import add_managed_run_options, run_headless

STATE_FILE = "tune.json"
RESUME = "run the same command again to test the remaining configurations (completed ones are kept)"


@dataclass
class ConfigResult:
    """One configuration's outcome and its headline figures."""

    config: dict
    run_dir: str
    outcome: str
    peak_tok_per_s: float = math.nan
    peak_users: float = math.nan
    saturation: str = ""
    p99_at_peak: float = math.nan
    mean_e2e_p99: float = math.nan
    # with --slo: the peak of good requests/s, and the highest level meeting the SLOs
    goodput_peak: float = math.nan
    goodput_peak_users: float = math.nan
    slo_users: float = math.nan

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.config.items())


def parse_matrix(items: list[str]) -> dict[str, list[str]]:
    """`NAME=V1,V2` items -> {NAME: [V1, V2]}; one clear error for a malformed item."""
    matrix: dict[str, list[str]] = {}
    for item in items:
        name, sep, values = item.partition("=")
        name = name.strip()
        vals = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or not vals:
            raise SettingsError(
                f"--matrix takes NAME=V1,V2,... with NAME a template field, got {item!r}"
            )
        if name in matrix:
            raise SettingsError(f"--matrix {name} given twice")
        matrix[name] = vals
    if not matrix:
        raise SettingsError("give at least one --matrix NAME=V1,V2,...")
    return matrix


def combinations(matrix: dict[str, list[str]]) -> list[dict[str, str]]:
    names = list(matrix)
    return [dict(zip(names, values)) for values in itertools.product(*(matrix[n] for n in names))]


def template_fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


RANK_BY = ("throughput", "goodput")


def rank(
    results: list[ConfigResult], by: str = "throughput"
) -> tuple[ConfigResult | None, ConfigResult | None]:
    """(best for throughput, or for goodput with `by="goodput"`, and best for latency) among
    the completed configurations."""
    done = [r for r in results if r.outcome == "completed" and r.peak_tok_per_s == r.peak_tok_per_s]
    if by == "goodput":
        done = [r for r in done if r.goodput_peak == r.goodput_peak]
    if not done:
        return None, None
    if by == "goodput":
        # on a tie in goodput, the one meeting the SLOs at the higher level
        best_throughput = max(
            done,
            key=lambda r: (
                r.goodput_peak,
                -math.inf if r.slo_users != r.slo_users else r.slo_users,
            ),
        )
    else:
        best_throughput = max(done, key=lambda r: r.peak_tok_per_s)
    timed = [r for r in done if r.mean_e2e_p99 == r.mean_e2e_p99]
    best_latency = min(timed, key=lambda r: r.mean_e2e_p99) if timed else None
    return best_throughput, best_latency


def _or_dash(value: float, spec: str) -> str:
    return format(value, spec) if value == value else "-"


def format_table(results: list[ConfigResult], by: str = "throughput", slo: bool = False) -> str:
    """The configuration table; with `slo`, the goodput columns too."""
    best_t, best_l = rank(results, by)
    header = (
        "configuration",
        "peak tok/s",
        "at users",
        "saturation",
        "p99 E2E at peak",
        "mean p99 E2E",
        *(("peak goodput req/s", "at users", "meets SLOs up to") if slo else ()),
        "best for",
    )
    rows = [header]
    for r in results:
        tags = [t for t, best in ((by, best_t), ("latency", best_l)) if best is r]
        goodput = (
            (
                _or_dash(r.goodput_peak, ",.2f"),
                _or_dash(r.goodput_peak_users, ",.4g"),
                _or_dash(r.slo_users, ",.4g") if r.goodput_peak == r.goodput_peak else "-",
            )
            if slo
            else ()
        )
        rows.append(
            (
                r.label,
                f"{r.peak_tok_per_s:,.0f}" if r.peak_tok_per_s == r.peak_tok_per_s else r.outcome,
                f"{r.peak_users:,.0f}" if r.peak_users == r.peak_users else "-",
                r.saturation or "-",
                f"{r.p99_at_peak:.3f} s" if r.p99_at_peak == r.p99_at_peak else "-",
                f"{r.mean_e2e_p99:.3f} s" if r.mean_e2e_p99 == r.mean_e2e_p99 else "-",
                *goodput,
                ", ".join(tags),
            )
        )
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def measure(result: ConfigResult, slo: list[str] | None = None) -> None:
    """Fill the headline figures of a completed configuration from its run directory, judged
    against `slo` (`--slo` items; default: those the run was started with)."""
    # at call time: keeps pandas and matplotlib out of every command's start (cli.main)
    from ..report.model import build_report_data

    data = build_report_data([result.run_dir], slo=parse_slo(slo))
    series = data.series[0]
    sat = series.saturation
    if sat.peak is not None:
        result.peak_tok_per_s, result.peak_users, result.p99_at_peak = (
            sat.peak.tok_per_s,
            sat.peak.users,
            sat.peak.e2e_p99,
        )
    result.saturation = sat.status
    p99 = series.curve["e2e_p99_mean"].astype(float)
    result.mean_e2e_p99 = float(p99.mean()) if p99.notna().any() else math.nan
    head = series.slo_headline
    if head is not None:
        result.goodput_peak, result.goodput_peak_users = head.goodput_peak, head.goodput_peak_users
        result.slo_users = head.best.mean


# --- the command --------------------------------------------------------------------------------------
def configure_parser(parser: argparse.ArgumentParser, name: str) -> None:
    add_server_cmd_argument(
        parser,
        'server command with {NAME} fields filled from --matrix, e.g. "vllm serve {model} '
        '--max-num-seqs {max_num_seqs} --max-num-batched-tokens {max_num_batched_tokens}"',
        metavar="TEMPLATE",
        required=True,
    )
    parser.add_argument(
        "--matrix",
        action="append",
        default=[],
        metavar="NAME=V1,V2",
        help="values of one template field (repeatable; every combination is tested)",
    )
    add_ready_timeout_argument(parser, "seconds to wait for each started server to be ready")
    parser.add_argument(
        "--rank-by",
        choices=RANK_BY,
        default="throughput",
        help="the best configuration has the highest peak total tok/s (throughput) or the "
        "highest peak goodput, requests/s meeting the --slo (goodput; needs --slo)",
    )
    add_name_argument(
        parser, "tune", "tune name; the same name resumes (skips completed configurations)"
    )
    add_managed_run_options(
        parser,
        "base URL the started server answers on",
        "tunes",
        "base directory: the tune lives in OUT/NAME",
    )


def _load_state(directory: str) -> dict:
    path = os.path.join(directory, STATE_FILE)
    if os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    return {"format": 1, "results": []}


def _save_state(directory: str, state: dict) -> None:
    text = json.dumps(state, indent=2, default=lambda v: None)
    write_atomic(os.path.join(directory, STATE_FILE), text)


def _run_config(args: argparse.Namespace, directory: str, config: dict, model: str) -> ConfigResult:
    server = ServerProcess(
        args.server_cmd.format(**config, model=model), os.path.join(directory, "server.log")
    )
    try:
        process = server.start()
        wait_ready(
            args.host,
            args.ready_timeout,
            args.api_key or os.environ.get("OPENAI_API_KEY") or None,
            process,
        )
        run_dir, outcome = run_headless(
            args,
            os.path.join(directory, "runs"),
            [*(f"config.{k}={v}" for k, v in config.items()), f"tune={args.name}"],
        )
    finally:
        server.stop()
    result = ConfigResult(config=config, run_dir=run_dir, outcome=outcome)
    if outcome == "completed":
        measure(result, args.slo)
    return result


def main(args: argparse.Namespace) -> int:
    # every option is checked before any server starts
    matrix = parse_matrix(args.matrix)
    Settings.from_options(args)
    fields = template_fields(args.server_cmd)
    missing = fields - set(matrix) - {"model"}
    if missing:
        raise SettingsError(
            f"--server-cmd has fields with no --matrix values: {', '.join(sorted(missing))}"
        )
    unused = set(matrix) - fields
    if unused:
        raise SettingsError(
            f"--matrix {', '.join(sorted(unused))} not used in --server-cmd (add {{NAME}} to it)"
        )
    if "model" in fields and not args.model:
        raise SettingsError("--server-cmd uses {model}: pass --model")
    if args.rank_by == "goodput" and not args.slo:
        raise SettingsError("--rank-by goodput ranks by requests/s meeting the SLOs: pass --slo")
    directory = os.path.join(args.out, safe_name(args.name, "tune"))
    os.makedirs(directory, exist_ok=True)
    state = _load_state(directory)
    known = {
        json.dumps(r["config"], sort_keys=True): r
        for r in state["results"]
        if r["outcome"] == "completed"
    }
    results: list[ConfigResult] = []
    configs = combinations(matrix)
    try:
        for i, config in enumerate(configs, 1):
            key = json.dumps(config, sort_keys=True)
            label = ", ".join(f"{k}={v}" for k, v in config.items())
            if key in known:
                print(
                    f"tune {args.name}: [{i}/{len(configs)}] {label}: already completed", flush=True
                )
                result = ConfigResult(**known[key])
                if args.slo:  # judged against this command's SLOs, as the new ones are
                    measure(result, args.slo)
                results.append(result)
                continue
            print(
                f"tune {args.name}: [{i}/{len(configs)}] {label}: starting the server", flush=True
            )
            result = _run_config(args, directory, config, args.model)
            results.append(result)
            state["results"] = [
                r for r in state["results"] if json.dumps(r["config"], sort_keys=True) != key
            ]
            state["results"].append(asdict(result))
            _save_state(directory, state)
            if result.outcome == "interrupted":
                raise Interrupted(RESUME)
    except (ServerError, SettingsError) as e:  # during the work: a failure, not a usage error
        # (each configuration's server is stopped by _run_config's finally; tune.json is current)
        raise CommandFailed(f"{e}{server_log(directory)}; {RESUME}") from None
    except Interrupted:
        raise
    # Ctrl-C outside a run (a server starting or stopping): still Ctrl-C, with how to resume
    except KeyboardInterrupt:
        raise Interrupted(RESUME) from None
    table = format_table(results, args.rank_by, bool(args.slo))
    print("\n" + table + "\n")
    best_t, best_l = rank(results, args.rank_by)
    best_for = (
        f"best for goodput: highest peak of requests/s meeting the SLOs ({', '.join(args.slo)})"
        if args.rank_by == "goodput"
        else "best for throughput: highest peak total tok/s"
    )
    rule = f"{best_for}; best for latency: lowest p99 E2E latency averaged over the tested levels"
    with open(os.path.join(directory, "configurations.md"), "w", encoding="utf-8") as fh:
        fh.write(f"# Tune {args.name}\n\n```\n{table}\n```\n\n{rule}.\n")
    state["best"] = {
        args.rank_by: best_t.config if best_t else None,
        "latency": best_l.config if best_l else None,
        "rule": rule,
    }
    _save_state(directory, state)
    completed = [r.run_dir for r in results if r.outcome == "completed"]
    if completed:
        # at call time: keeps pandas and matplotlib out of every command's start (cli.main)
        from ..report.render import build_report

        paths = build_report(
            completed,
            os.path.join(directory, "report.html"),
            progress=True,
            slo=parse_slo(args.slo),
        )
        print(f"Report: {paths.html}")
    print(f"Configuration table: {os.path.join(directory, 'configurations.md')}")
    if best_t is None:
        raise CommandFailed("no configuration could be ranked (see the table above)")
    return 0
