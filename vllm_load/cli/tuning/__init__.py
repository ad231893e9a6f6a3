"""The parts of `vllm-load tune` (cli/tune.py), by mode: a matrix's configurations, commands and
ranking (`matrix`) and their runs and resume (`runs`); `--advice`'s reading of a report's advice
(`source`), its loop (`advice_loop`) and whether it paid off (`loop_verdict`); `--slo` alone's
SLO-max search (`slo_max`, its state `slo_max_state`, its table and files `slo_max_report`);
`--guided` (`guided`, its options `guided_options`, the verdict it follows `guided_verdict`, its
table and files `guided_report`); and the Pareto page every mode ends with (`pareto_points`).
Thirteen modules, over the ~12 of a folder: four modes and the page they share, each module one
part of one mode, named for it; a folder per mode would split modules that import one another."""
