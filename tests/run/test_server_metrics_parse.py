"""`parse_exposition` reads only the samples it needs (a whole exposition's parse held a load
process's event loop for 12 ms): what it reads is what a parse of everything gives."""

import math
import os

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support import ROOT

from vllm_load.run.server_metrics import COLUMNS, WANTED, parse_exposition

DATA = os.path.join(ROOT, "tests", "data")


def parse_everything(text: str) -> dict[str, float]:
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            sums[sample.name] = sums.get(sample.name, 0.0) + float(sample.value)
            if "reason" in sample.labels:
                key = f'{sample.name}{{reason="{sample.labels["reason"]}"}}'
                sums[key] = sums.get(key, 0.0) + float(sample.value)
    return sums


@pytest.mark.parametrize(
    "name", ["vllm_0.32.0_cpu_metrics.txt", "vllm_0.32.0_cpu_metrics_full.txt"]
)
def test_the_figures_read_from_the_wanted_lines_are_those_of_the_whole_exposition(name):
    with open(os.path.join(DATA, name), encoding="utf-8") as fh:
        text = fh.read()
    figures, cache_config = parse_exposition(text)
    everything = parse_everything(text)
    read = 0
    for column, names in COLUMNS.items():
        expected = next((everything[n] for n in names if n in everything), math.nan)
        assert figures[column] == expected or (math.isnan(expected) and math.isnan(figures[column]))
        read += expected == expected
    assert read >= 10  # (the fixtures hold most of them)
    assert "cache_config_info" not in text or cache_config.get("block_size")
    assert all(":" in n for n in WANTED)
