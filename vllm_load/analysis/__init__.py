"""Analysis of run directories: pure functions over pandas frames.

- `rundir`: the only I/O — load a run directory (docs/run-format.md) into frames.
- `levels`: per-level figures of one run over each level's measured window.
- `stats`: mean, standard deviation, 95 % t-interval and CoV across independent runs.
- `saturation`: peak, saturation point, scaling, recommendations and findings per series.
- `compare`: the cross-model table.
- `synthetic`: run directories made up from a model of a server, for tests and benchmarks.
"""
