"""The parts of `vllm-load tune` (cli/tune.py) that both of its modes use or that only
`--advice` needs: the configurations' runs and their resume (`runs`), the advice a report gives
and the configurations it makes (`advice`), and the verdict on whether it paid off (`verdict`)."""
