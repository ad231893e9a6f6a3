"""Images in requests, end to end against the simulator: --images on the built-in test and a
dataset's images, recorded per request (count and bytes), with prompt exactness judged on the
text and the server's prompt tokens recorded as served."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image
from support.runhelpers import load_run_files, only_run_dir, run_vllm_load
from support.shared_runs import shared_run

from vllm_load.analysis.levels.measure import image_charges, level_metrics
from vllm_load.sim.child import SimulatorProcess


def make_images_run(folder: Path) -> None:
    with SimulatorProcess("--time-scale", "0.05", "--max-num-seqs", "16") as sim:
        run_vllm_load(
            "run",
            "--host",
            sim.url,
            "--images",
            "2",
            "--image-size",
            "512x512",
            "--input-tokens",
            "256",
            "--output-tokens",
            "16",
            "--levels",
            "2,4",
            "--requests-per-level",
            "24",
            "--warmup-requests",
            "4",
            "--out",
            str(folder / "runs"),
        )


def images_run() -> tuple:
    """The built-in test with two 512 x 512 images a request: one run that every test asserting
    on it reads (made once per session, tests/support/shared_runs.py)."""
    return load_run_files(only_run_dir(shared_run("images-builtin", make_images_run) / "runs"))


def test_builtin_requests_carry_two_distinct_images_each():
    requests, steps, run, _ = images_run()
    settings = run["settings"]
    assert (settings["images"], settings["image_size"], settings["image_format"]) == (
        2,
        "512x512",
        "jpeg",
    )
    assert requests["ok"].all(), requests["error_message"].dropna().tolist()
    assert (requests["images"] == 2).all()
    # two JPEGs of 512 x 512, about 55 KB each, of as many distinct combinations of bands
    sizes = requests["image_bytes"].to_numpy(np.float64)
    assert sizes.min() > 2 * 40_000 and sizes.max() < 2 * 80_000 and len(set(sizes)) > 10
    # the text is exact; the server's prompt tokens are recorded as served, whatever the images
    # cost, one charge for every request (none on a simulator that reads only the text)
    assert (requests["requested_prompt_tokens"] == 256).all()
    assert (requests["prompt_tokens"] - requests["requested_prompt_tokens"]).nunique() == 1
    assert (level_metrics(requests, steps)["prompt_exact_share"] == 1.0).all()


def test_the_servers_prompt_tokens_include_the_images_charge_exactly():
    requests, steps, _, _ = images_run()
    # the simulator charges each 512 x 512 image what Qwen3-VL does: 16 x 16 tiles of 32 pixels
    # and the two tokens around them (docs/simulator.md)
    assert ((requests["prompt_tokens"] - requests["requested_prompt_tokens"]) == 2 * 258).all()
    assert image_charges(requests) == {2: 2 * 258}
    assert (level_metrics(requests, steps)["prompt_exact_share"] == 1.0).all()


def test_a_datasets_images_are_sent_and_counted_with_the_history(tmp_path):
    picture = tmp_path / "pixel.png"
    Image.new("RGB", (32, 32), "red").save(picture)
    dataset = tmp_path / "vision.jsonl"
    entry = {
        "messages": [
            {"role": "user", "content": "what is this?", "images": ["pixel.png"]},
            {"role": "assistant", "content": "a pixel"},
            {"role": "user", "content": "and now?"},
        ],
        "output_tokens": 8,
    }
    dataset.write_text(json.dumps(entry) + "\n")
    with SimulatorProcess("--time-scale", "0.05") as sim:
        run_vllm_load(
            "run",
            "--host",
            sim.url,
            "--dataset",
            str(dataset),
            "--levels",
            "2",
            "--requests-per-level",
            "8",
            "--warmup-requests",
            "2",
            "--out",
            str(tmp_path / "runs"),
        )
    requests, _, _, _ = load_run_files(only_run_dir(tmp_path / "runs"))
    assert requests["ok"].all(), requests["error_message"].dropna().tolist()
    # the second turn sends the first's image again, in its history
    assert set(requests["turn"]) == {0, 1}
    assert (requests["images"] == 1).all()
    assert (requests["image_bytes"] == picture.stat().st_size).all()
