"""The trend of stored runs (`vllm-load history --html`): per configuration, over time, each
point's peak total tok/s, highest level meeting the SLOs (where the runs recorded SLOs) and p99
TTFT at one level, with its 95 % t-interval across the point's runs, and where the vLLM version
changed. Pure: rows and levels in (`history.stored_runs`), typed series out.

A configuration is what a trend must hold fixed to mean anything: the model, the GPU kind and
count, the server flags (`--server-args`, and the `config.NAME=value` tags a tune gives its runs,
as the report's series), the kind of load and the workload sent (a campaign's fine sweep, with
other output lengths, is a configuration of its own). A point is the runs repeated together: a
tune's runs of one configuration or a campaign's runs of one phase (n = their count), or a run
alone (n = 1: the point without an interval); the runs of a point share their vLLM version and
commit and their SLOs. Only completed runs are drawn: the others are counted, not plotted.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace

from ..analysis.series.stats import CONFIG_META_PREFIX, Summary, summarize
from .db import Membership
from .record import StoredLevel

PEAK_FIGURE = "total_tok_per_s"
TTFT_FIGURE = "ttft_p99"
COMPLETED = "completed"


@dataclass(frozen=True)
class Configuration:
    """What a series holds fixed."""

    model: str
    gpu_kind: str
    gpu_count: int | None
    server_args: str
    #: the server configuration the run was tagged with (`config.NAME=value`: a tune's
    #: configuration, whose flags are in its server command, not in --server-args)
    tags: str
    load_kind: str
    workload: str  # the workload sent, as sorted JSON

    @property
    def gpus(self) -> str:
        count = f"{self.gpu_count}x " if self.gpu_count else ""
        return f"{count}{self.gpu_kind}" if self.gpu_kind else (f"{count}GPU(s)" if count else "")

    @property
    def label(self) -> str:
        flags = " ".join(p for p in (self.server_args, self.tags) if p) or "no flags"
        return " · ".join([self.model, self.gpus or "GPUs not recorded", flags, self.load_kind])

    @property
    def workload_text(self) -> str:
        items = json.loads(self.workload)
        return ", ".join(f"{k}={v}" for k, v in items.items()) or "not recorded"


@dataclass(frozen=True)
class SloMax:
    """A run's highest level meeting the SLOs it was started with: `value` NaN when no level met
    them, None when whether one did is unknown or no SLOs were recorded (`slo` empty)."""

    slo: str
    value: float | None


@dataclass(frozen=True)
class TrendPoint:
    when: str  # the first start of its runs
    run_ids: tuple[str, ...]
    vllm_version: str
    vllm_commit: str
    source: str  # "tune NAME: label", "campaign NAME: phase", or "run"
    peak: Summary  # peak total tok/s, per run
    slo: str  # the runs' SLOs ("" none recorded)
    slo_max: Summary  # per run, over the runs where it is known and some level met them
    slo_none: int  # runs where no level met the SLOs
    slo_unknown: int  # runs where whether a level met them is unknown
    ttft: Summary  # p99 TTFT at the series' level, per run that measured it
    version_changed: bool  # the vLLM version or commit differs from the previous point's

    @property
    def version(self) -> str:
        commit = f" ({self.vllm_commit[:12]})" if self.vllm_commit else ""
        return f"{self.vllm_version or 'unknown'}{commit}"


@dataclass(frozen=True)
class TrendSeries:
    configuration: Configuration
    level: float | None  # the level of p99 TTFT: given, else one every run measured
    level_note: str  # how it was chosen, or why there is none
    points: list[TrendPoint]
    left_out: int  # runs of this configuration that did not complete: not drawn


def configuration_of(row: dict) -> Configuration:
    meta = row["meta"] or {}
    tags = [f"{k}={v}" for k, v in sorted(meta.items()) if k.startswith(CONFIG_META_PREFIX)]
    return Configuration(
        model=row["model"],
        gpu_kind=row["gpu_kind"] or "",
        gpu_count=row["gpu_count"],
        server_args=row["server_args"] or "",
        tags=", ".join(tags),
        load_kind=row["load_kind"],
        workload=json.dumps(row["workload"] or {}, sort_keys=True, default=str),
    )


def peak(levels: list[StoredLevel]) -> float:
    values = [lv.figures[PEAK_FIGURE] for lv in levels if PEAK_FIGURE in lv.figures]
    return max(values) if values else math.nan


def slo_max(row: dict, levels: list[StoredLevel]) -> SloMax:
    """As the report's SLO headline judges one run: unknown where any level's judgement is."""
    items = (row["settings"] or {}).get("slo") or []
    text = ", ".join(str(i) for i in items)
    if not text:
        return SloMax("", None)
    if not levels or any(lv.slo_met is None for lv in levels):
        return SloMax(text, None)
    met = [lv.value for lv in levels if lv.slo_met == 1]
    return SloMax(text, max(met) if met else math.nan)


def ttft_at(levels: list[StoredLevel], level: float | None) -> float:
    if level is None:
        return math.nan
    for lv in levels:
        if math.isclose(lv.value, level) and TTFT_FIGURE in lv.figures:
            return lv.figures[TTFT_FIGURE]
    return math.nan


def common_level(runs: list[list[StoredLevel]]) -> float | None:
    """The highest level every run measured p99 TTFT at, None when they share none."""
    shared: set[float] | None = None
    for levels in runs:
        have = {lv.value for lv in levels if TTFT_FIGURE in lv.figures}
        shared = have if shared is None else shared & have
    return max(shared) if shared else None


def _source(member: Membership | None) -> str:
    if member is None:
        return "run"
    return f"{member.kind} {member.name}" + (f": {member.label}" if member.label else "")


Run = tuple[dict, list[StoredLevel]]


def _point_key(row: dict, member: Membership | None, slo: str) -> tuple:
    alone = ("run", row["id"]) if member is None else ("group", member.group_id, member.label)
    return (*alone, row["vllm_version"], row["vllm_commit"], slo)


def _point(runs: list[Run], member: Membership | None, level: float | None) -> TrendPoint:
    first = runs[0][0]
    slos = [slo_max(row, levels) for row, levels in runs]
    known = [s.value for s in slos if s.value is not None]
    return TrendPoint(
        when=min(row["started_at"] for row, _ in runs),
        run_ids=tuple(row["run_id"] for row, _ in runs),
        vllm_version=first["vllm_version"],
        vllm_commit=first["vllm_commit"],
        source=_source(member),
        peak=summarize(peak(levels) for _, levels in runs),
        slo=slos[0].slo,
        slo_max=summarize(v for v in known if not math.isnan(v)),
        slo_none=sum(1 for v in known if math.isnan(v)),
        slo_unknown=sum(1 for s in slos if s.slo and s.value is None),
        ttft=summarize(ttft_at(levels, level) for _, levels in runs),
        version_changed=False,
    )


def _series(
    configuration: Configuration,
    runs: list[Run],
    members: dict[int, Membership],
    level: float | None,
    left_out: int,
) -> TrendSeries:
    if level is not None:
        note = f"at level {level:g} (--level)"
    else:
        level = common_level([levels for _, levels in runs])
        note = (
            f"at level {level:g}, the highest every run measured (--level to choose)"
            if level is not None
            else "no level was measured by every run: choose one with --level"
        )
    grouped: dict[tuple, list[Run]] = {}
    for row, levels in runs:
        member = members.get(row["id"])
        key = _point_key(row, member, slo_max(row, levels).slo)
        grouped.setdefault(key, []).append((row, levels))
    points = sorted(
        (_point(group, members.get(group[0][0]["id"]), level) for group in grouped.values()),
        key=lambda p: (p.when, p.run_ids),
    )
    marked = []
    for i, p in enumerate(points):
        before = points[i - 1] if i else None
        changed = before is not None and (
            (before.vllm_version, before.vllm_commit) != (p.vllm_version, p.vllm_commit)
        )
        marked.append(replace(p, version_changed=changed))
    return TrendSeries(configuration, level, note, marked, left_out)


def trend(
    runs: list[Run], members: dict[int, Membership], level: float | None
) -> list[TrendSeries]:
    """The series of `runs` (oldest first, `history.stored_runs`), one per configuration, in the
    order of their first runs (a configuration whose runs all failed has no points); `members`: each grouped run's tune or campaign (by run
    key); `level`: the level of p99 TTFT (None: per series, one every run measured)."""
    by_config: dict[Configuration, list[Run]] = {}
    left_out: dict[Configuration, int] = {}
    for row, levels in runs:
        config = configuration_of(row)
        by_config.setdefault(config, [])
        if row["outcome"] == COMPLETED:
            by_config[config].append((row, levels))
        else:
            left_out[config] = left_out.get(config, 0) + 1
    return [
        _series(config, kept, members, level, left_out.get(config, 0))
        for config, kept in by_config.items()
    ]
