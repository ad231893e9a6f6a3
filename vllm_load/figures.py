"""Every figure a run reports per level, declared once.

A figure is either one number per level (`LevelFigure`: throughput, achieved concurrency, the
success rate) or a statistic of a per-request quantity over the level's successful measured
requests (`PerRequest`: a requests.csv column such as `ttft`, summarised as `ttft_p99`). The
declarations say what each is called, its unit, which way is better, and where it is shown:
the printed table (`TABLE`), the report's per-level table (`REPORT`), `compare` and `tune`'s A/B
tests (`COMPARE`), the web UI's live per-level table (`LIVE`), the SLO grammar (`slo`), and only
where a run had something (`only_with`: a reasoning model's figures appear where some level
measured reasoning tokens).

Everything reads them through `level_figures()` and the functions beside it, at call time:
`analysis.levels.measure` computes every declared statistic, the tables and `compare` loop over
them, and run.json-based outputs (JSON, CSV) carry every level column; the web UI's live view
(`run.live_figures`) keeps a running histogram or sum for each per-request figure it shows.
Adding a per-request figure is its declaration here, the column that records it
(`run_format.records`), and docs. The GPUs' own figures (`GPU`: utilisation, memory, power, energy
and joules per token, from --gpu-metrics or --gpu-nvml) are computed apart, from
gpu_metrics.csv (`analysis.levels.gpu`). The module is long because every figure is declared
here, in one place, on purpose.
"""

from __future__ import annotations

from dataclasses import dataclass

#: the percentiles computed for every per-request figure that has percentiles
PERCENTILES: tuple[int, ...] = (50, 90, 95, 99)
#: where a figure is shown
TABLE, REPORT, COMPARE, LIVE = "table", "report", "compare", "live"


@dataclass(frozen=True)
class PerRequest:
    """A per-request quantity (the requests.csv column `key`) and its per-level statistics:
    `p50`, `p90`, `p95`, `p99` (percentiles, linear interpolation) or `mean`, named
    `<key>_<stat>`. `from_histogram`: the quantity is per token, and its percentiles come from
    the requests' merged histograms (`itl_hist`), never from per-request summaries.
    `table`/`report`/`compare`/`live` list the statistics shown there (`live`: percentiles and
    means of seconds, means of counts: what the live view keeps running); `slo`: a per-request
    threshold (`ttft<=2s`) and per-level percentile objectives (`ttft_p99<=2s`) may name it;
    `absent_misses`: a successful request without a value of it missed its threshold (a reasoning
    reply whose answer never came), where otherwise it is exempt (the TPOT of a one-token reply)."""

    key: str
    label: str
    unit: str  # "s" or "tokens"
    meaning: str
    stats: tuple[str, ...] = tuple(f"p{p}" for p in PERCENTILES)
    from_histogram: bool = False
    table: tuple[str, ...] = ()
    report: tuple[str, ...] = ()
    compare: tuple[str, ...] = ()
    live: tuple[str, ...] = ()
    slo: bool = False
    in_ms: bool = True  # seconds printed as ms (else s)
    only_with: str = ""  # a level figure that must be > 0 at some level for it to be shown
    spec: str = ",.1f"  # how the printed table formats it (in ms where `in_ms`)
    read_timed: bool = False  # dated by the client's reads: untrustworthy where it was late
    absent_misses: bool = False


@dataclass(frozen=True)
class LevelFigure:
    """One number per level, computed by `analysis.levels.measure`."""

    key: str
    label: str
    unit: str  # "tok/s", "req/s", "users", "share", "requests"
    meaning: str
    higher_is_better: bool | None = None
    shown: frozenset[str] = frozenset()
    spec: str = ",.0f"  # how the printed table formats it (a share: in %)
    short: str = ""  # the printed table's header, where narrower than the label
    only_with: str = ""  # a level figure that must be > 0 at some level for it to be shown


@dataclass(frozen=True)
class Figure:
    """One per-level column as every consumer sees it: a `LevelFigure`, or one statistic of a
    `PerRequest` (`source`, `stat`)."""

    key: str
    label: str
    unit: str
    higher_is_better: bool | None
    shown: frozenset[str]
    spec: str
    source: PerRequest | None = None
    stat: str = ""
    only_with: str = ""
    short: str = ""

    @property
    def header(self) -> str:
        """Its name in the printed table."""
        return self.short or self.label

    @property
    def percentile(self) -> int | None:
        return int(self.stat[1:]) if self.stat.startswith("p") else None

    @property
    def latency(self) -> str | None:
        """The per-request column its request-level tests read (None: one number per run)."""
        src = self.source
        if src is None or src.from_histogram or self.percentile is None or src.unit != "s":
            return None
        return src.key

    @property
    def in_ms(self) -> bool:
        return self.source is not None and self.source.in_ms

    @property
    def read_timed(self) -> bool:
        """Whether a level where the client was late marks it (TTFT, ITL, TPOT: dated by reads)."""
        return self.source is not None and self.source.read_timed


_ALL = frozenset({TABLE, REPORT, COMPARE, LIVE})

#: level figures shown before the per-request ones, in this order
HEAD: list[LevelFigure] = [
    LevelFigure("users", "users", "users", "the level's concurrency", shown=frozenset({TABLE})),
    LevelFigure(
        "achieved_concurrency",
        "achieved",
        "users",
        "requests in flight, averaged over the measured window",
        shown=frozenset({TABLE, REPORT}),
        spec=",.1f",
    ),
    LevelFigure("started", "started", "requests", "requests started", shown=frozenset({TABLE})),
    LevelFigure("measured", "measured", "requests", "requests measured", shown=frozenset({TABLE})),
    LevelFigure(
        "req_per_s",
        "req/s",
        "req/s",
        "requests done per second of the window",
        True,
        frozenset({TABLE, REPORT, LIVE}),
        ",.2f",
    ),
    LevelFigure(
        "total_tok_per_s",
        "total tok/s",
        "tok/s",
        "input + output tokens per second",
        True,
        _ALL,
        short="tok/s",
    ),
    LevelFigure(
        "output_tok_per_s",
        "output tok/s",
        "tok/s",
        "output tokens per second",
        True,
        _ALL,
        short="out tok/s",
    ),
]

#: per-request figures, in the order they are shown
PER_REQUEST: list[PerRequest] = [
    PerRequest(
        "ttft",
        "TTFT",
        "s",
        "time to the first generated token (reasoning included)",
        table=("p50", "p99"),
        report=("p50", "p99"),
        compare=("p50", "p99"),
        live=("p50", "p99"),
        slo=True,
        read_timed=True,
    ),
    PerRequest(
        "ttfat",
        "TTFAT",
        "s",
        "time to the first answer token, after any reasoning",
        table=("p50", "p99"),
        report=("p50", "p99"),
        compare=("p50", "p99"),
        live=("p50", "p99"),
        slo=True,
        only_with="reasoning_tokens_mean",
        read_timed=True,
        absent_misses=True,
    ),
    PerRequest(
        "itl",
        "ITL",
        "s",
        "the gap between consecutive tokens",
        from_histogram=True,
        spec=",.2f",
        table=("p99",),
        report=("p50", "p99"),
        compare=("p99",),
        live=("p99",),
        slo=True,
        read_timed=True,
    ),
    PerRequest(
        "tpot",
        "TPOT",
        "s",
        "time per output token after the first",
        report=("p50",),
        slo=True,
        read_timed=True,
    ),
    PerRequest(
        "e2e",
        "E2E",
        "s",
        "the request from start to its last byte",
        table=("p50", "p99"),
        report=("p50", "p90", "p95", "p99"),
        compare=("p50", "p99"),
        live=("p50", "p99"),
        slo=True,
        in_ms=False,
        spec=",.3f",
    ),
    PerRequest(
        "reasoning_tokens",
        "reasoning tok",
        "tokens",
        "completion tokens the model reasoned in",
        stats=("mean",),
        table=("mean",),
        report=("mean",),
        live=("mean",),
        only_with="reasoning_tokens_mean",
        spec=",.0f",
    ),
    PerRequest(
        "answer_tokens",
        "answer tok",
        "tokens",
        "completion tokens of the answer",
        stats=("mean",),
        table=("mean",),
        report=("mean",),
        only_with="reasoning_tokens_mean",
        spec=",.0f",
    ),
]

#: level figures shown after the per-request ones
TAIL: list[LevelFigure] = [
    LevelFigure(
        "success_rate",
        "success rate",
        "share",
        "successful measured requests",
        True,
        _ALL,
        ".1f",
        short="success",
    ),
    LevelFigure(
        "cancelled",
        "cancelled",
        "requests",
        "measured requests the client closed on purpose (--cancel-share): in no latency, no failure",
        shown=frozenset({TABLE, REPORT}),
        spec=",.0f",
        only_with="cancelled",
    ),
]


#: the GPUs' own figures over the measured window (`analysis.levels.gpu`), where a run recorded
#: them (--gpu-metrics, --gpu-nvml): utilisation and SM activity averaged over GPUs, memory the
#: fullest GPU's, power and energy summed over GPUs
_WITH_GPU = "gpu_power_mean"
GPU: list[LevelFigure] = [
    LevelFigure(
        "gpu_util_mean",
        "GPU util",
        "share",
        "time a kernel ran (DCGM_FI_DEV_GPU_UTIL), mean over the window and the GPUs",
        shown=frozenset({TABLE, REPORT}),
        spec=".0f",
        only_with=_WITH_GPU,
    ),
    LevelFigure(
        "gpu_sm_active_mean",
        "SM active",
        "share",
        "cycles an SM had a warp (DCGM_FI_PROF_SM_ACTIVE), mean over the window and the GPUs",
        shown=frozenset({REPORT}),
        spec=".0f",
        only_with="gpu_sm_active_mean",
    ),
    LevelFigure(
        "gpu_memory_used_max",
        "GPU memory MiB",
        "MiB",
        "framebuffer memory used (DCGM_FI_DEV_FB_USED), the fullest GPU's highest in the window",
        shown=frozenset({REPORT}),
        only_with=_WITH_GPU,
    ),
    LevelFigure(
        "gpu_power_mean",
        "GPU power W",
        "W",
        "power draw (DCGM_FI_DEV_POWER_USAGE) summed over the GPUs, mean over the window",
        shown=frozenset({TABLE, REPORT}),
        only_with=_WITH_GPU,
        short="GPU W",
    ),
    LevelFigure(
        "gpu_energy_j",
        "GPU energy J",
        "J",
        "energy used in the window (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION's growth), summed over the GPUs",
        shown=frozenset({REPORT}),
        only_with=_WITH_GPU,
    ),
    LevelFigure(
        "gpu_j_per_output_token",
        "J/output tok",
        "J/token",
        "GPU energy in the window / output tokens generated in it",
        False,
        frozenset({TABLE, REPORT, COMPARE}),
        ",.3f",
        short="J/out tok",
        only_with=_WITH_GPU,
    ),
    LevelFigure(
        "gpu_j_per_request",
        "J/request",
        "J/request",
        "GPU energy in the window / requests done in it",
        False,
        frozenset({REPORT, COMPARE}),
        ",.1f",
        only_with=_WITH_GPU,
    ),
]


#: speculative decoding per level (`analysis.levels.speculation`), from the server's
#: vllm:spec_decode_* counters over the level's measured window, where the server speculates
#: (a server without speculation has none: no column, no chart). The draft acceptance rate falls
#: as K rises whatever the drafts are worth, so it is shown but never ranks (no better side:
#: `compare` says only whether B's is higher or lower): acceptance length and throughput do.
_WITH_SPEC = "spec_drafts"
SPECULATION: list[LevelFigure] = [
    LevelFigure(
        "spec_acceptance_length",
        "acceptance length",
        "tokens",
        "tokens a decoding step yields per sequence: 1 + accepted draft tokens per draft",
        True,
        frozenset({TABLE, REPORT, COMPARE}),
        ".2f",
        short="accept len",
        only_with=_WITH_SPEC,
    ),
    LevelFigure(
        "spec_draft_acceptance_rate",
        "draft acceptance",
        "share",
        "draft tokens the target accepted, of those it verified",
        None,
        frozenset({TABLE, REPORT, COMPARE}),
        ".1f",
        short="draft acc",
        only_with=_WITH_SPEC,
    ),
    LevelFigure(
        "spec_drafts",
        "drafts",
        "drafts",
        "drafts verified in the window (one per decoding sequence per step)",
        shown=frozenset({REPORT}),
        only_with=_WITH_SPEC,
    ),
]
#: ... and per draft position (0 .. K-1, a column each: `spec_position_key`): the share of drafts
#: whose token at that position was accepted (what vLLM logs as its per-position acceptance rate)
SPEC_POSITION = LevelFigure(
    "spec_pos_acceptance",
    "accepted at position",
    "share",
    "drafts whose token at the position was accepted, of all drafts",
    None,
    frozenset({REPORT}),
    ".1f",
    only_with=_WITH_SPEC,
)


#: a disaggregated deployment's figures (--role-metrics; `analysis.levels.disagg`): its KV
#: transfers from the decode server's NIXL connector metrics (vllm:nixl_*), and TTFT split into
#: the prefill server's part, the transfer and the decode server's first step. A deployment
#: without them (no --role-metrics, a connector without these metrics) shows none, not zeros.
_WITH_KV = "kv_transfers"
_WITH_PD = "pd_prefill_ms"
DISAGG: list[LevelFigure] = [
    LevelFigure(
        "pd_prefill_ms",
        "TTFT: prefill",
        "ms",
        "the prefill server's mean TTFT (vllm:time_to_first_token_seconds): its queue and prefill",
        False,
        frozenset({TABLE, REPORT}),
        ",.1f",
        short="prefill ms",
        only_with=_WITH_PD,
    ),
    LevelFigure(
        "kv_xfer_ms",
        "TTFT: KV transfer",
        "ms",
        "mean KV transfer time, posted to done (vllm:nixl_xfer_time_seconds, decode server)",
        False,
        frozenset({TABLE, REPORT}),
        ",.1f",
        short="KV xfer ms",
        only_with=_WITH_KV,
    ),
    LevelFigure(
        "pd_first_decode_ms",
        "TTFT: first decode step",
        "ms",
        "the decode server's mean TTFT less the KV transfer: its queue and first step",
        False,
        frozenset({TABLE, REPORT}),
        ",.1f",
        short="1st decode ms",
        only_with=_WITH_KV,
    ),
    LevelFigure(
        "kv_xfer_gbps",
        "KV bandwidth",
        "GB/s",
        "KV bytes over transfer seconds (vllm:nixl_bytes_transferred / vllm:nixl_xfer_time_seconds)",
        True,
        frozenset({TABLE, REPORT}),
        ".3g",  # a link's GB/s, or a congested one's hundredths
        short="KV GB/s",
        only_with=_WITH_KV,
    ),
    LevelFigure(
        "kv_xfer_mib",
        "KV per transfer",
        "MiB",
        "mean bytes per KV transfer (vllm:nixl_bytes_transferred), in MiB",
        None,
        frozenset({REPORT}),
        ",.2f",
        only_with=_WITH_KV,
    ),
    LevelFigure(
        "kv_transfers",
        "KV transfers",
        "transfers",
        "KV transfers done in the window (vllm:nixl_xfer_time_seconds_count)",
        shown=frozenset({REPORT}),
        only_with=_WITH_KV,
    ),
]


def disagg_columns() -> tuple[str, ...]:
    """The per-level columns of a disaggregated deployment's figures (`DISAGG`)."""
    return tuple(f.key for f in DISAGG)


def spec_position_key(position: int) -> str:
    """The per-level column of draft position `position` (0-based)."""
    return f"{SPEC_POSITION.key}_{position}"


def spec_position_keys(columns) -> list[str]:
    """The per-position level columns among `columns`, by position."""
    head = SPEC_POSITION.key + "_"
    mine = [c for c in columns if c.startswith(head) and c[len(head) :].isdigit()]
    return sorted(mine, key=lambda c: int(c[len(head) :]))


def spec_columns() -> tuple[str, ...]:
    """The per-level columns of the speculation figures (`SPECULATION`; positions apart)."""
    return tuple(f.key for f in SPECULATION)


def gpu_columns() -> tuple[str, ...]:
    """The per-level columns of the GPU figures (`GPU`)."""
    return tuple(f.key for f in GPU)


def _per_request_figures(source: PerRequest) -> list[Figure]:
    shown = {
        TABLE: source.table,
        REPORT: source.report,
        COMPARE: source.compare,
        LIVE: source.live,
    }
    return [
        Figure(
            key=f"{source.key}_{stat}",
            label=f"{source.label} {stat}",
            unit=source.unit,
            higher_is_better=False if source.unit == "s" else None,
            shown=frozenset(where for where, stats in shown.items() if stat in stats),
            spec=source.spec,
            source=source,
            stat=stat,
            only_with=source.only_with,
        )
        for stat in source.stats
    ]


def _level_figure(f: LevelFigure) -> Figure:
    return Figure(
        f.key,
        f.label,
        f.unit,
        f.higher_is_better,
        f.shown,
        f.spec,
        short=f.short,
        only_with=f.only_with,
    )


def level_figures() -> list[Figure]:
    """Every declared per-level figure, in the order tables show them."""
    head = [_level_figure(f) for f in HEAD]
    tail = [_level_figure(f) for f in TAIL + GPU + SPECULATION + DISAGG]
    return head + [f for src in PER_REQUEST for f in _per_request_figures(src)] + tail


def shown_in(where: str, present=None) -> list[Figure]:
    """The figures shown in `where`; with `present(key) -> bool` (is that level figure > 0
    somewhere?), those whose `only_with` is not met are left out."""
    return [
        f
        for f in level_figures()
        if where in f.shown and (not f.only_with or present is None or present(f.only_with))
    ]


def per_request(key: str) -> PerRequest | None:
    return next((p for p in PER_REQUEST if p.key == key), None)


def slo_quantities() -> list[PerRequest]:
    """The per-request quantities the SLO grammar may name."""
    return [p for p in PER_REQUEST if p.slo]


def statistic_columns() -> list[str]:
    """The level columns of every per-request statistic (`ttft_p99`, `reasoning_tokens_mean`)."""
    return [f"{p.key}_{stat}" for p in PER_REQUEST for stat in p.stats]
