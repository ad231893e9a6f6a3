"""The `vllm-load` command: `main` dispatches to one module per subcommand.

Over the ~12 of a folder on purpose: each subcommand is a module of its own (and `run` keeps how a
headless run ended in `run_end`), so a new subcommand is one file here; what subcommands share
sits in `common`, `errors`, `preflight` and `target_check`, and `tune`'s machinery in `tuning/`.
"""
