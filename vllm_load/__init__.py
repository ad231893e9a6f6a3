"""vllm-load: distributed load testing for OpenAI-compatible LLM inference servers.

The top level holds the declarations every layer reads (`figures`, `load_kinds`, `endpoints`,
`slo`, `settings` with `option_spec` and `user_values`), the two entry points a process starts from
(`api` for a locustfile, `__main__`) and process set-up (`gc_policy`, `huge_pages`,
`parent_death`, `stop_signals`): one over the ~12 of a folder, since each is a concept of its own that every
floor of tests/code/test_import_graph.py's FLOORS may import, and a package of declarations would
only add a name to every import.
"""

__version__ = "0.1.0"
