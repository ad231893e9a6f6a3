"""Prompt exactness with images: the text is exact to its requested length, and the server
serves it with the images' charge on top, learned from the run (the most common charge per
image count); a request charged otherwise is inexact, and runs without images are judged as
before."""

from __future__ import annotations

import numpy as np
from support.level_frames import make_requests, make_steps, ok

from vllm_load.analysis.levels.measure import expected_prompt_tokens, image_charges, level_metrics

STEPS = make_steps([(0, 2, 100.0, 200.0, 0, 6, 600.0, "target_reached")])


def served(prompts: list[int | None], images: list[int], requested: list[int], **kw):
    return make_requests(
        [
            ok(0, 2, 100.0 + i, 101.0 + i, prompt=p, images=n, requested_prompt_tokens=r, **kw)
            for i, (p, n, r) in enumerate(zip(prompts, images, requested))
        ]
    )


def test_the_images_charge_is_learned_per_image_count():
    requests = served(
        [100 + 660, 150 + 660, 100 + 330, 100 + 662, 100 + 660, 100],
        [2, 2, 1, 2, 2, 0],
        [100, 150, 100, 100, 100, 100],
    )
    assert image_charges(requests) == {2: 660, 1: 330}
    expected = expected_prompt_tokens(requests)
    assert list(expected) == [760, 810, 430, 760, 760, 100]
    # the one charged 662 is the inexact one of six
    assert level_metrics(requests, STEPS)["prompt_exact_share"].iloc[0] == 5 / 6


def test_exact_text_with_images_is_exact():
    requests = served([100 + 660] * 6, [2] * 6, [100] * 6)
    assert level_metrics(requests, STEPS)["prompt_exact_share"].iloc[0] == 1.0


def test_failures_and_missing_usage_teach_nothing():
    requests = served([999, None, 100 + 660, 100 + 660, 100 + 660, 100 + 660], [2] * 6, [100] * 6)
    requests.loc[0, "ok"] = 0
    assert image_charges(requests) == {2: 660}


def test_without_images_exactness_is_as_before():
    # an older run has no images column; a dataset's requests asked for no length
    requests = served([100, 101, 100, 100, 100, 100], [0] * 6, [100] * 6)
    older = requests.drop(columns=["images", "image_bytes"])
    assert image_charges(older) == {} and image_charges(requests) == {}
    for frame in (requests, older):
        assert level_metrics(frame, STEPS)["prompt_exact_share"].iloc[0] == 5 / 6
    dataset = served([760] * 6, [2] * 6, [None] * 6)  # type: ignore[list-item]
    assert image_charges(dataset) == {} and np.isnan(expected_prompt_tokens(dataset)).all()
    assert np.isnan(level_metrics(dataset, STEPS)["prompt_exact_share"].iloc[0])
