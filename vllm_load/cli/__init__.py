"""The `vllm-load` command: `main` dispatches to one module per subcommand."""
