"""The datasets shipped with the package: they load, are worth sending (multi-turn conversations,
varied lengths), are what their script writes, and are in a built wheel (with the sample traces
of workload/traces/samples/)."""

from __future__ import annotations

import filecmp
import os
import shutil
import subprocess
import sys
import zipfile

from support import ROOT

from vllm_load.workload import (
    SAMPLE_PROMPTS,
    SAMPLE_SHAREGPT,
    filter_by_length,
    load_dataset,
)
from vllm_load.workload.traces import SAMPLE_TRACES, sample_path

SIZE_LIMIT = 300_000


def words(text: str) -> int:
    return len(text.split())


def test_the_sharegpt_sample_is_multi_turn_with_varied_lengths():
    dataset = load_dataset(SAMPLE_SHAREGPT)
    assert len(dataset.conversations) == 150 and dataset.skipped == 0
    turns = [len(c.turns) for c in dataset.conversations]
    assert min(turns) == 1 and max(turns) == 5 and sum(t > 1 for t in turns) > 50
    prompts = [words(t.user) for c in dataset.conversations for t in c.turns]
    assert min(prompts) < 10 and max(prompts) > 200
    assert all(t.reply for c in dataset.conversations for t in c.turns)
    assert len({c.id for c in dataset.conversations}) == 150
    # its output lengths come from the replies, as vLLM's ShareGPT sampling takes them
    counted = filter_by_length(dataset, words)
    assert all(t.output_tokens for c in counted.conversations for t in c.turns)


def test_the_prompts_sample_has_output_lengths():
    dataset = load_dataset(SAMPLE_PROMPTS)
    assert len(dataset.conversations) == 100 and dataset.skipped == 0
    assert all(len(c.turns) == 1 and c.turns[0].output_tokens for c in dataset.conversations)
    assert len({c.turns[0].output_tokens for c in dataset.conversations}) > 3


def test_the_samples_are_small():
    for path in (SAMPLE_SHAREGPT, SAMPLE_PROMPTS):
        assert os.path.getsize(path) < SIZE_LIMIT, path


def test_the_script_writes_the_shipped_files(tmp_path):
    script = os.path.join(ROOT, "scripts", "make_sample_dataset.py")
    subprocess.run([sys.executable, script, "--out", str(tmp_path)], check=True, timeout=60)
    for path in (SAMPLE_SHAREGPT, SAMPLE_PROMPTS):
        generated = tmp_path / os.path.basename(path)
        assert filecmp.cmp(generated, path, shallow=False), (
            f"{path} is not what scripts/make_sample_dataset.py writes: re-run it and commit both"
        )


def test_the_wheel_holds_the_samples(tmp_path):
    """Built from a copy of what the wheel is made of, so the worktree gets no build/ folder."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(os.path.join(ROOT, name), source)
    shutil.copytree(
        os.path.join(ROOT, "vllm_load"),
        source / "vllm_load",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "-q", "-w", str(tmp_path)],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = tmp_path.glob("vllm_load-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for path in (SAMPLE_SHAREGPT, SAMPLE_PROMPTS):
        assert f"vllm_load/workload/data/{os.path.basename(path)}" in names
    for name in SAMPLE_TRACES:  # the sample traces (tests/workload/test_trace_samples.py)
        file = os.path.basename(sample_path(name))
        assert f"vllm_load/workload/traces/samples/{file}" in names
