"""The parts of `vllm-load tune` (cli/tune.py): the configurations' runs and their resume
(`runs`)."""
