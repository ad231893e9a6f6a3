"""Analysis of run directories: pure functions from run data (pandas frames) to figures.

Reading a run directory is `vllm_load.run_format.load`'s; nothing here does I/O beyond small readers
named as such.

- `levels`: one run's figures per level, over each level's measured window.
- `series`: across the runs of a configuration: statistics, saturation, findings.
- `decisions`: SLOs, goodput, and A/B comparison of two sets of runs.
"""
