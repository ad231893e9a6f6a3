"""The sample traces shipped with the package: each reads in its format, lasts 60 s with bursts,
has lengths a tiny model takes, the Mooncake one shares a good part of its blocks, and all are
exactly what scripts/make_sample_traces.py writes. (tests/workload/test_samples.py checks that a
built wheel holds them.)"""

from __future__ import annotations

import collections
import filecmp
import math
import os
import re
import subprocess
import sys

import pytest
from support import ROOT

from vllm_load.workload.traces import (
    SAMPLE_TRACES,
    read_trace,
    resolve_trace,
    reuse_summary,
    sample_path,
)

FORMATS = {"mooncake_60s": "mooncake", "burstgpt_sample": "burstgpt", "azure_sample": "azure"}
SIZE_LIMIT = 100_000


@pytest.mark.parametrize("name", sorted(SAMPLE_TRACES))
def test_each_sample_is_60_s_of_bursty_traffic(name):
    trace = read_trace(resolve_trace(f"sample:{name}"))
    assert trace.format == FORMATS[name]
    count = len(trace.requests)
    assert 300 <= count <= 600 and 55 <= trace.duration < 60
    mean = count / trace.duration
    per_two_seconds = collections.Counter(int(r.at // 2) for r in trace.requests)
    assert max(per_two_seconds.values()) / 2 > 2 * mean  # bursts: windows at over twice the mean
    assert all(1 <= r.input_tokens <= 3000 and 1 <= r.output_tokens <= 256 for r in trace.requests)
    assert os.path.getsize(sample_path(name)) < SIZE_LIMIT


def test_the_mooncake_sample_shares_prompt_blocks():
    trace = read_trace(sample_path("mooncake_60s"))
    assert all(len(r.hash_ids) == math.ceil(r.input_tokens / 512) for r in trace.requests)
    assert all(128 <= r.input_tokens and 8 <= r.output_tokens for r in trace.requests)
    assert 0.3 <= reuse_summary(trace)["reused_share"] <= 0.5


def test_the_burstgpt_sample_has_failed_requests_to_skip():
    trace = read_trace(sample_path("burstgpt_sample"))
    assert trace.skipped > 0


def test_the_azure_sample_writes_datetimes_as_the_published_trace():
    with open(sample_path("azure_sample"), encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    assert lines[0] == "TIMESTAMP,ContextTokens,GeneratedTokens"
    stamp = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{7},\d+,\d+")
    assert all(stamp.fullmatch(line) for line in lines[1:])


def test_the_script_writes_the_shipped_files(tmp_path):
    script = os.path.join(ROOT, "scripts", "make_sample_traces.py")
    proc = subprocess.run(
        [sys.executable, script, "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    for name in SAMPLE_TRACES:
        shipped = sample_path(name)
        generated = tmp_path / os.path.basename(shipped)
        assert filecmp.cmp(generated, shipped, shallow=False), (
            f"{shipped} is not what scripts/make_sample_traces.py writes: re-run it and commit both"
        )
        assert f"{generated}: " in proc.stdout  # it says what it wrote
    assert "blocks reused" in proc.stdout
