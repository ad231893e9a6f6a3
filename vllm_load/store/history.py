"""`vllm-load history`: the stored runs of a model (or of all), filtered by their metadata, one
line each with a figure at its peak or at a chosen level; the tunes and campaigns they belong to
(`--groups`); or the trend page of the same runs (`--html`: `trend`, `trend_page`)."""

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
        "GPUs, outcome, and a figure (--figure) at its best level or at --level; with --groups, "
        "the tunes and campaigns they belong to; with --html, write the trend page of the same "
        "runs. Exit 2 when --html has no completed run to draw (nothing is written)."
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
        "(highest where higher is better, else the run's highest level); with --html, the "
        "level of p99 TTFT (default: per configuration, the highest level every run measured)",
    )
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true", help="print the runs as JSON lines")
    shown.add_argument(
        "--html",
        default="",
        metavar="OUT.html",
        help="write the trend page: per configuration (model, GPUs, server flags, load, "
        "workload), over time, peak total tok/s, the highest level meeting the SLOs where "
        "recorded and p99 TTFT at --level, each point with its 95%% CI across its runs, vLLM "
        "version changes marked; a table under each chart",
    )
    parser.add_argument(
        "--groups",
        action="store_true",
        help="list the tunes and campaigns the runs belong to instead (with --json, as JSON)",
    )


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
    if args.html:
        if args.groups:
            store.close()
            raise SettingsError("--html draws runs: give --html or --groups, not both")
        return show_trend(args, store)
    if args.groups:
        return show_groups(args, store)
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


def _asked(args: argparse.Namespace) -> str:
    """The selection as the user gave it, for messages and the page."""
    return " ".join(
        [*([f"--model {args.model}"] if args.model else [])] + [f"--where {w}" for w in args.where]
    )


def _memberships(store: Store, runs: list[tuple[dict, list[StoredLevel]]]):
    from .db import read_memberships

    with store.engine.begin() as conn:
        return read_memberships(conn, [row["id"] for row, _ in runs])


def show_trend(args: argparse.Namespace, store: Store) -> int:
    """Write the trend page of the selected runs; one line and exit 2 (nothing written) when
    none matches or none completed."""
    from .trend import trend
    from .trend_page import write_trend_page

    conditions = parse_where(args.where)
    asked = _asked(args)
    try:
        runs = stored_runs(store, args.model, conditions)
        members = _memberships(store, runs)
    finally:
        store.close()
    where = store.location.shown
    if not runs:
        matching = f"matches {asked}" if asked else "is"
        raise SettingsError(
            f"no stored run {matching} in {where}: no trend page written (see vllm-load history; "
            "store runs with vllm-load run or vllm-load store import)"
        )
    series = trend(runs, members, args.level)
    points = sum(len(s.points) for s in series)
    if not points:
        raise SettingsError(
            f"none of the {len(runs)} stored run(s) matching in {where} completed: no trend page "
            "written"
        )
    try:
        write_trend_page(series, args.html, where, asked)
    except OSError as e:
        raise SettingsError(f"--html {args.html}: cannot be written ({e.strerror})") from None
    print(
        f"Trend page: {args.html} ({len(series)} configuration(s), {points} point(s) from "
        f"{len(runs)} run(s) in {where})"
    )
    return 0


def show_groups(args: argparse.Namespace, store: Store) -> int:
    """The tunes and campaigns of the selected runs, in the order they were stored."""
    from sqlalchemy import select

    from .schema import GROUPS

    try:
        runs = stored_runs(store, args.model, parse_where(args.where))
        members = _memberships(store, runs)
        with store.engine.begin() as conn:
            groups = [
                dict(r) for r in conn.execute(select(GROUPS).order_by(GROUPS.c.id)).mappings()
            ]
    finally:
        store.close()
    by_group: dict[int, list[tuple[dict, str]]] = {}
    for row, _ in runs:
        if row["id"] in members:
            m = members[row["id"]]
            by_group.setdefault(m.group_id, []).append((row, m.label))
    listed = [g for g in groups if g["id"] in by_group]
    for g in listed:
        kept = by_group[g["id"]]
        entry = {
            "kind": g["kind"],
            "name": g["name"],
            "directory": g["directory"],
            "stored_at": g["stored_at"],
            "first_started_at": min(r["started_at"] for r, _ in kept),
            "runs": len(kept),
            "models": sorted({r["model"] for r, _ in kept}),
            "vllm_versions": sorted({r["vllm_version"] for r, _ in kept}),
            "labels": sorted({label for _, label in kept}),
            "run_ids": [r["run_id"] for r, _ in kept],
            "detail": g["detail"],
        }
        if args.json:
            print(json.dumps(entry, sort_keys=True))
            continue
        labels = "; ".join(entry["labels"]) or "-"
        print(
            f"{entry['first_started_at']}  {g['kind']} {g['name']}: {len(kept)} run(s) of "
            f"{', '.join(entry['models'])}, vLLM {', '.join(entry['vllm_versions']) or '-'} "
            f"({labels}){_decided(g['detail'])}  {g['directory']}"
        )
    if not args.json:
        print(f"{len(listed)} tune(s)/campaign(s) in {store.location.shown}")
    return 0


def _decided(detail: dict) -> str:
    """What a tune decided, as its state file recorded it."""
    if detail.get("verdict"):
        return f"; verdict: {detail['verdict']}"
    if detail.get("mode") == "slo_max":
        return f"; SLO-max {detail.get('slo_max')} (bracket {detail.get('bracket')})"
    best = detail.get("best") or {}
    named = [f"{k}: {_config_text(v)}" for k, v in best.items() if k != "rule" and v]
    return f"; best for {', '.join(named)}" if named else ""


def _config_text(config) -> str:
    if isinstance(config, dict):
        return ", ".join(f"{k}={v}" for k, v in config.items())
    return str(config)
