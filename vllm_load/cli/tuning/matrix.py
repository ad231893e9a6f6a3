"""A tune's matrix (`--matrix NAME=V1,V2`): its configurations, each one's server command, and
their ranking and table once measured."""

from __future__ import annotations

import itertools
import math
import re
import string

from ...server.command_settings import with_setting
from ...user_values import SettingsError
from .runs import ConfigResult


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
        raise SettingsError(
            "give at least one --matrix NAME=V1,V2,... (or --slo alone for the SLO-max search)"
        )
    return matrix


def combinations(matrix: dict[str, list[str]]) -> list[dict[str, str]]:
    names = list(matrix)
    return [dict(zip(names, values)) for values in itertools.product(*(matrix[n] for n in names))]


def template_fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def server_command(template: str, config: dict[str, str], fields: set[str], model: str) -> str:
    """One configuration's server command: the template's `{NAME}` fields filled, then each
    matrix setting the template has no field for set by name (`server.command_settings`:
    `num_speculative_tokens` is `--speculative-config`'s JSON on vLLM, `--speculative-tokens` on
    the simulator). SettingsError where a value cannot be set."""
    command = template.format(**config, model=model)
    for name, value in config.items():
        if name not in fields:
            try:
                command = with_setting(command, name, value)
            except ValueError as e:
                raise SettingsError(f"--matrix {name}={value}: {e}") from None
    return command


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
                -math.inf if r.slo_value != r.slo_value else r.slo_value,
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
    # a tune of speculative decoding: acceptance length beside the throughput that ranks
    speculates = any(r.acceptance_length == r.acceptance_length for r in results)
    header = (
        "configuration",
        "peak tok/s",
        "at level",
        *(("accept len at peak",) if speculates else ()),
        "saturation",
        "p99 E2E at peak",
        "mean p99 E2E",
        *(("peak goodput req/s", "at level", "meets SLOs up to") if slo else ()),
        "best for",
    )
    rows = [header]
    for r in results:
        tags = [t for t, best in ((by, best_t), ("latency", best_l)) if best is r]
        goodput = (
            (
                _or_dash(r.goodput_peak, ",.2f"),
                _or_dash(r.goodput_peak_value, ",.4g"),
                _or_dash(r.slo_value, ",.4g") if r.goodput_peak == r.goodput_peak else "-",
            )
            if slo
            else ()
        )
        rows.append(
            (
                r.label,
                f"{r.peak_tok_per_s:,.0f}" if r.peak_tok_per_s == r.peak_tok_per_s else r.outcome,
                f"{r.peak_value:,.0f}" if r.peak_value == r.peak_value else "-",
                *((_or_dash(r.acceptance_length, ".2f"),) if speculates else ()),
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
