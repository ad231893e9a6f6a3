"""What a workload sends, decided offline: conversations from dataset files and lengths from
distributions. Pure (no gevent, Locust or network), so a load process imports it cheaply and a
test runs it without a server; the Locust users in `client/` call it. Formats in
docs/workload.md.

- `lengths`: `parse_length(spec)` -> `LengthDistribution` (`sample(rng)`, `mean`)
- `datasets`: `load_dataset(path)` -> `Dataset` of `Conversation`s of `Turn`s
- `sampling`: `filter_by_length(dataset, count_tokens, ...)`, `DatasetSampler(dataset, seed)`
- `images`: a request's images as content parts, a dataset's image files as `data:` URLs;
  `synthetic_images`: --images' generated images (imports Pillow: not imported here)
- `SAMPLE_SHAREGPT`, `SAMPLE_PROMPTS`: small generated datasets shipped with the package
  (scripts/make_sample_dataset.py makes them)
- `traces`: trace files of real traffic (Mooncake, BurstGPT, Azure) read into timed requests,
  and their generated samples (imported on its own: `from vllm_load.workload.traces import ...`)
"""

from __future__ import annotations

import os

from .datasets import SAMPLE_NAME, Conversation, Dataset, Turn, dataset_path, load_dataset
from .lengths import LengthDistribution, parse_length
from .sampling import DatasetSampler, filter_by_length

_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
#: a ShareGPT JSON array: 150 conversations of 1 to 5 turns, made of plain English words
#: (`--dataset sample`)
SAMPLE_SHAREGPT = dataset_path(SAMPLE_NAME)
#: JSONL prompts, each with its output_tokens
SAMPLE_PROMPTS = os.path.join(_DATA, "sample_prompts.jsonl")

__all__ = [
    "SAMPLE_PROMPTS",
    "SAMPLE_SHAREGPT",
    "Conversation",
    "Dataset",
    "DatasetSampler",
    "LengthDistribution",
    "Turn",
    "filter_by_length",
    "load_dataset",
    "parse_length",
]
