"""Levels from hand-made Locust stats histories: plateaus of the user count, ramp rows and short
plateaus skipped, warm-up left out of every level alike (the last included), throughput from
the cumulative counts, failures, approximate percentiles, and the one-line refusals."""

from __future__ import annotations

import io
import math

import numpy as np
import pandas as pd
import pytest

from vllm_load.analysis.levels.locust_csv import (
    PlateauRule,
    increase,
    measure_levels,
    parse_warmup,
    row_dates,
)
from vllm_load.run_format.locust_files import LocustCsvError, locust_prefix, read_history

HEADER = (
    "Timestamp,User Count,Type,Name,Requests/s,Failures/s,50%,66%,75%,80%,90%,95%,98%,99%,"
    "99.9%,99.99%,100%,Total Request Count,Total Failure Count,Total Median Response Time,"
    "Total Average Response Time,Total Min Response Time,Total Max Response Time,"
    "Total Average Content Size"
)


class History:
    """A Locust stats history written one second at a time, as --csv-full-history writes it:
    a per-name row, then the Aggregated row, with cumulative counts and means."""

    def __init__(self, t0: int = 1_800_000_000):
        self.t, self.rows = t0, [HEADER]
        self.count = self.fails = 0
        self.rt_total = self.size_total = 0.0

    def second(
        self,
        users: int,
        ok: int = 0,
        failed: int = 0,
        rt_ms: float = 200.0,
        size: float = 24.0,
        p50: str = "200",
        p99: str = "300",
    ) -> None:
        n = ok + failed
        self.count += n
        self.fails += failed
        self.rt_total += n * rt_ms
        self.size_total += ok * size
        avg_rt = self.rt_total / self.count if self.count else 0.0
        avg_size = self.size_total / self.count if self.count else 0
        pct = [p50] * 5 + [p99] * 3 + [p99] * 3
        for kind, name in (("POST", "/v1/completions"), ("", "Aggregated")):
            self.rows.append(
                ",".join(
                    map(
                        str,
                        [self.t, users, kind, name, 0.0, 0.0, *pct, self.count, self.fails, 0]
                        + [avg_rt, 0, 0, avg_size],
                    )
                )
            )
        self.t += 1

    def hold(self, users: int, seconds: int, **kw) -> None:
        for _ in range(seconds):
            self.second(users, **kw)

    def frame(self) -> pd.DataFrame:
        return pd.read_csv(io.StringIO("\n".join(self.rows)), keep_default_na=False)

    def write(self, prefix: str) -> str:
        with open(prefix + "_stats_history.csv", "w", encoding="utf-8") as fh:
            fh.write("\n".join(self.rows) + "\n")
        return prefix


def stepped() -> History:
    """0 users, a ramp 1-2-3 (one row each) to 4 users held 12 s (its first 3 s slow: warm-up),
    8 users held 12 s with one failure a second, a 3 s blip at 16, and 12 users held 12 s
    (the last level) with its warm-up slow too."""
    h = History()
    h.hold(0, 2)
    for u in (1, 2, 3):
        h.second(u, ok=u)
    h.hold(4, 3, ok=2, p99="900")
    h.hold(4, 9, ok=10)
    h.hold(8, 3, ok=5, p99="900")
    h.hold(8, 9, ok=19, failed=1, rt_ms=400.0, p50="400", p99="600")
    h.hold(16, 3, ok=30)
    h.hold(12, 3, ok=1, p99="900")
    h.hold(12, 9, ok=20, rt_ms=500.0, p50="500", p99="700")
    return h


def test_levels_are_the_held_user_counts_ramps_and_blips_skipped():
    levels = measure_levels(stepped().frame(), PlateauRule(min_level_s=5), "tokens")
    m = levels.metrics
    assert list(m["users"]) == [4, 8, 12]
    skipped = {p.users: p.reason for p in levels.plateaus if not p.used}
    assert set(skipped) == {1, 2, 3, 16}
    assert "under 5 s" in skipped[16] and "under 5 s" in skipped[1]


def test_throughput_over_the_steady_part_only_every_level_alike():
    m = measure_levels(stepped().frame(), PlateauRule(min_level_s=5), "tokens").metrics
    # 12 rows held 11 s: warm-up 25% = 2.75 s, so rows 4..12 of each plateau (8 s) are measured:
    # the slow warm-up seconds count for none of the three levels, the last one included
    assert m["window_s"].tolist() == pytest.approx([8.0, 8.0, 8.0])
    assert m["req_per_s"].tolist() == pytest.approx([10.0, 19.0, 20.0])
    assert m["output_tok_per_s"].tolist() == pytest.approx([240.0, 19 * 24.0, 480.0])
    assert m["mean_length"].tolist() == pytest.approx([24.0, 19 * 24 / 20, 24.0])
    # rows are named by their line in the file (header = 1): the last level ends on the last row
    assert m["last_row"].iloc[-1] == len(stepped().rows)
    steady_offsets = (m["steady_row"] - m["first_row"]).tolist()
    assert steady_offsets == [6, 6, 6]  # 3 rows of warm-up, 2 lines a second (name + Aggregated)


def test_a_level_with_failures_counts_only_successes_as_throughput():
    m = measure_levels(stepped().frame(), PlateauRule(min_level_s=5)).metrics.set_index("users")
    assert m.loc[8, "requests"] == 160 and m.loc[8, "failed"] == 8 and m.loc[8, "ok"] == 152
    assert m.loc[8, "success_rate"] == pytest.approx(0.95)
    assert m.loc[4, "failed"] == 0 and m.loc[4, "success_rate"] == 1.0
    assert m.loc[8, "e2e_mean"] == pytest.approx(0.4)  # exact, from the cumulative means
    # bytes (the default): no token figure at all
    assert m["output_tok_per_s"].isna().all() and m.loc[4, "length_per_s"] == pytest.approx(240)


def test_percentiles_from_rows_whose_window_lies_in_the_steady_part():
    h = History()
    h.hold(2, 6, ok=4, p50="800", p99="900")
    h.hold(2, 24, ok=4, p50="250", p99="350")
    m = measure_levels(h.frame(), PlateauRule(min_level_s=5)).metrics
    # 30 rows: warm-up 7.25 s; a row's ~10 s window must start after that
    assert (
        m["pct_source"].iloc[0] == "steady" and m["pct_rows"].iloc[0] == 12
    )  # rows 19..30: dated 10 s after row 9 or later
    assert m["e2e_p50"].iloc[0] == pytest.approx(0.25)
    assert m["e2e_p99"].iloc[0] == pytest.approx(0.35)
    # a level shorter than the window: the plateau's rows, else its last row, and said so
    short = measure_levels(stepped().frame(), PlateauRule(min_level_s=5)).metrics
    assert set(short["pct_source"]) == {"plateau"}
    assert short["e2e_p99"].tolist() == pytest.approx([0.3, 0.6, 0.7])


def test_zero_and_na_percentiles_mean_no_response_in_the_window():
    h = History()
    h.hold(1, 12, ok=1, p50="0", p99="0")
    m = measure_levels(h.frame(), PlateauRule(min_level_s=5)).metrics
    assert math.isnan(m["e2e_p99"].iloc[0]) and m["req_per_s"].iloc[0] == pytest.approx(1.0)


def test_a_user_count_seen_again_later_is_not_a_second_level():
    h = History()
    h.hold(2, 10, ok=2)
    h.hold(4, 10, ok=4)
    h.hold(2, 10, ok=2)
    levels = measure_levels(h.frame(), PlateauRule(min_level_s=5))
    assert list(levels.metrics["users"]) == [2, 4]
    assert "already measured" in levels.plateaus[-1].reason


def test_a_stats_reset_is_not_a_negative_count():
    assert increase(np.array([10, 20, 30, 4, 14])) == pytest.approx(10 + 10 + 4 + 10)
    assert increase(np.array([5.0])) != increase(np.array([5.0]))  # NaN: nothing to difference


def test_rows_dated_within_their_second_and_short_spans_measured_right():
    # Locust writes a row after each 1 s sleep plus the write: a little over a second apart,
    # stamped with the truncated second, so now and then a stamp skips a second
    for start, pace, rows in ((1000.9, 1.004, 60), (1000.99, 1.002, 300), (1000.1, 1.1, 30)):
        true = start + pace * np.arange(rows)
        stamps = np.floor(true)
        dates = row_dates(stamps)
        assert np.all(dates >= stamps) and np.all(dates < stamps + 1)
        span = lambda t: t[5:] - t[:-5]  # noqa: E731 (every 5-row span)
        assert np.max(np.abs(span(stamps) - span(true))) >= 0.5  # a skipped second: 10-20 % off
        assert np.max(np.abs(span(dates) - span(true))) < 0.05, (pace, rows)


def test_warmup_spec():
    assert parse_warmup("25%") == (0.25, True)
    assert parse_warmup("30s") == (30.0, False) and parse_warmup("7") == (7.0, False)
    for bad in ("x", "100%", "-1"):
        with pytest.raises(LocustCsvError):
            parse_warmup(bad)
    h = History()
    h.hold(3, 21, ok=3)
    m = measure_levels(h.frame(), PlateauRule(min_level_s=5, warmup=5, warmup_is_share=False))
    assert m.metrics["window_s"].iloc[0] == pytest.approx(15.0)


def test_prefix_detection_and_the_refusals(tmp_path):
    prefix = stepped().write(str(tmp_path / "t1"))
    assert locust_prefix(prefix) == prefix
    assert locust_prefix(prefix + "_stats_history.csv") == prefix
    assert locust_prefix(str(tmp_path)) is None and locust_prefix(str(tmp_path / "nope")) is None
    assert read_history(prefix).names == ("POST /v1/completions",)

    plain = str(tmp_path / "plain")
    with open(plain + "_stats_history.csv", "w", encoding="utf-8") as fh:
        fh.write("\n".join([r for r in stepped().rows if ",POST," not in r]) + "\n")
    with pytest.raises(LocustCsvError, match="--csv-full-history"):
        read_history(plain)


def test_report_refuses_in_one_line(tmp_path, capsys):
    """`vllm-load report` on CSVs it cannot read: exit 2 with one line (the command in process,
    as a program of its own calls it: `cli.main.main(argv)`)."""
    from vllm_load.cli.main import main

    plain = str(tmp_path / "plain")
    with open(plain + "_stats_history.csv", "w", encoding="utf-8") as fh:
        fh.write("\n".join([r for r in stepped().rows if ",POST," not in r]) + "\n")
    flat = History()
    for u in range(1, 9):
        flat.second(u, ok=u)  # a ramp and nothing held
    flat_prefix = flat.write(str(tmp_path / "ramp"))
    for args, words in (
        ([plain], "--csv-full-history"),
        ([flat_prefix], "no user count was held long enough"),
        ([flat_prefix, str(tmp_path)], "not both"),
    ):
        code = main(["report", "--quiet", *args, "-o", str(tmp_path / "r.html")])
        err = capsys.readouterr().err
        assert code == 2, err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], err


def test_several_prefixes_are_runs_of_one_series_with_intervals(tmp_path):
    from vllm_load.report.locust_model import build_locust_data

    prefixes = []
    for k, extra in enumerate((0, 1, 2)):  # three repeats, a little apart
        h = History()
        h.hold(0, 1)
        for users, ok in ((1, 4), (2, 8), (4, 15), (8, 15)):
            h.hold(users, 12, ok=ok + extra * (users > 1))
        prefixes.append(h.write(str(tmp_path / f"rep{k}")))
    other = History()
    other.hold(1, 12, ok=3)
    other.rows = [r.replace("/v1/completions", "/v1/chat/completions") for r in other.rows]
    prefixes.append(other.write(str(tmp_path / "other")))

    data = build_locust_data(prefixes, plateau_rule=PlateauRule(min_level_s=5))
    assert [s.n_runs for s in data.series] == [3, 1]  # another request: another series
    s = data.series[0]
    assert data.rule.throughput.column == "req_per_s"  # bytes: judged on requests/s
    curve = s.curve.set_index("value")
    assert list(curve["req_per_s_n"]) == [3, 3, 3, 3]
    assert curve.loc[2, "req_per_s_mean"] == pytest.approx(9.0)
    assert curve.loc[2, "req_per_s_ci_low"] < 9.0 < curve.loc[2, "req_per_s_ci_high"]
    assert s.saturation.saturated and s.saturation.saturation is not None
    assert s.saturation.saturation.value == 4
    assert any("req/s" in f for f in s.findings) and not any("tok/s" in f for f in s.findings)


def test_a_level_with_too_many_failures_is_left_out_of_the_saturation(tmp_path):
    from vllm_load.report.locust_model import build_locust_data

    prefix = stepped().write(str(tmp_path / "t"))
    data = build_locust_data([prefix], plateau_rule=PlateauRule(min_level_s=5), length="tokens")
    sat = data.series[0].saturation
    assert [(f.value, f.excluded) for f in sat.failed] == [(8.0, True)]
    assert sat.peak is not None and sat.peak.value == 12  # 8 users' 5 % failures left out
