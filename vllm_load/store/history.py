"""`vllm-load history`: the stored runs of a model (or of all), filtered by their metadata, one
line each with a figure at its peak or at a chosen level."""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass

from ..figures import Figure, level_figures
from ..user_values import SettingsError
from .db import Store
from .record import StoredLevel
from .schema import FILTER_COLUMNS

#: `--where` keys that are not columns: `meta.KEY` (run.json meta, --meta) and `settings.KEY`
JSON_PREFIXES = ("meta.", "settings.")


def configure_history(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "List the runs in the results store, oldest first: when, which run, model, vLLM version, "
        "GPUs, outcome, and a figure (--figure) at its best level or at --level."
    )
    add_selection_arguments(parser)
    parser.add_argument(
        "--figure",
        default="total_tok_per_s",
        help="the per-level figure shown (a key of the report's JSON, e.g. ttft_p99)",
    )
    parser.add_argument(
        "--level",
        type=float,
        default=None,
        help="show the figure at this level (users, requests/s); default: its best level "
        "(highest where higher is better, else the run's highest level)",
    )
    parser.add_argument("--json", action="store_true", help="print the runs as JSON lines")


def add_selection_arguments(parser: argparse.ArgumentParser) -> None:
    """--model and --where: which stored runs a command reads."""
    parser.add_argument("--model", default="", help="only this model's runs")
    parser.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"only runs whose KEY is VALUE (repeatable, all must hold); KEY: "
        f"{', '.join(FILTER_COLUMNS)}, meta.NAME (--meta) or settings.NAME",
    )


@dataclass(frozen=True)
class Condition:
    key: str
    value: str


def parse_where(items: list[str]) -> list[Condition]:
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SettingsError(f"--where takes KEY=VALUE, got {item!r}")
        if key not in FILTER_COLUMNS and not key.startswith(JSON_PREFIXES):
            raise SettingsError(
                f"--where {key}: no such key; use one of {', '.join(FILTER_COLUMNS)}, "
                "meta.NAME or settings.NAME"
            )
        out.append(Condition(key, value.strip()))
    return out


def figure_named(key: str) -> Figure:
    found = {f.key: f for f in level_figures()}
    if key not in found:
        raise SettingsError(f"--figure {key}: no such figure; one of {', '.join(found)}")
    return found[key]


def matches(row: dict, conditions: list[Condition]) -> bool:
    for c in conditions:
        if c.key.startswith(JSON_PREFIXES):
            section, _, name = c.key.partition(".")
            value = (row[section] or {}).get(name)
            text = json.dumps(value) if isinstance(value, (list, dict, bool)) else value
        else:
            text = row[c.key]
        if ("" if text is None else str(text)) != c.value:
            return False
    return True


def pick(levels: list[StoredLevel], figure: Figure, at: float | None) -> StoredLevel | None:
    """The level whose `figure` a run is shown by: at `at`, else its best (highest where higher
    is better), else its highest level that has the figure."""
    having = [lv for lv in levels if figure.key in lv.figures]
    if at is not None:
        return next((lv for lv in having if math.isclose(lv.value, at)), None)
    if not having:
        return None
    if figure.higher_is_better:
        return max(having, key=lambda lv: lv.figures[figure.key])
    return max(having, key=lambda lv: lv.value)


def stored_runs(
    store: Store, model: str, conditions: list[Condition]
) -> list[tuple[dict, list[StoredLevel]]]:
    """The runs matching, oldest first, with their levels."""
    from sqlalchemy import select

    from .db import read_levels
    from .schema import RUNS

    query = select(RUNS).order_by(RUNS.c.started_at, RUNS.c.id)
    if model:
        query = query.where(RUNS.c.model == model)
    with store.engine.begin() as conn:
        rows = [dict(r) for r in conn.execute(query).mappings()]
        rows = [r for r in rows if matches(r, conditions)]
        levels = read_levels(conn, [r["id"] for r in rows])
    return [(r, levels.get(r["id"], [])) for r in rows]


def _cell(level: StoredLevel | None, figure: Figure) -> str:
    if level is None:
        return "-"
    value = level.figures[figure.key]
    shown = f"{value * 1000:{figure.spec}} ms" if figure.in_ms else f"{value:{figure.spec}}"
    return f"{shown} at {level.value:g}"


def show_history(args: argparse.Namespace, store: Store) -> int:
    conditions = parse_where(args.where)
    figure = figure_named(args.figure)
    try:
        runs = stored_runs(store, args.model, conditions)
    finally:
        store.close()
    if args.json:
        for row, levels in runs:
            picked = pick(levels, figure, args.level)
            out = {k: v for k, v in row.items() if k != "id"}
            out[figure.key] = picked.figures[figure.key] if picked else None
            out["at_level"] = picked.value if picked else None
            print(json.dumps(out, sort_keys=True))
        return 0
    header = ("started", "run", "model", "vLLM", "GPUs", "outcome", figure.label)
    lines = [header]
    for row, levels in runs:
        gpus = f"{row['gpu_count'] or ''}x {row['gpu_kind']}".strip("x ") or "-"
        lines.append(
            (
                row["started_at"],
                row["run_id"],
                row["model"],
                row["vllm_version"] or "-",
                gpus,
                row["outcome"],
                _cell(pick(levels, figure, args.level), figure),
            )
        )
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    for line in lines:
        print("  ".join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip())
    print(f"{len(runs)} run(s) in {store.location.shown}")
    return 0
