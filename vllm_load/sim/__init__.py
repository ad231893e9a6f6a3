"""The simulated vLLM OpenAI server (`vllm-load sim`): the built-in target for demos, tests and
client-overhead checks. See docs/simulator.md.

One module per concern, the pattern the rest of the package follows (16 of them, over the ~12
a folder should hold: each is one thing a reader of docs/simulator.md looks for):
`cli` its options and processes, `config` the typed settings, `server` the HTTP routes,
`protocol` the requests as vLLM validates them, `content` their text and images, `responses`
the bytes of its answers, `serving` the event loop it runs in, `engine` continuous batching,
`backends` what each step costs, `prefix_cache` vLLM's automatic prefix caching, `output` the
tokens it writes, `faults` injected failures, `stats` what it counts, `exposition` its
`/metrics` with vLLM's names, `trace` the per-token trace, `process` starting one from Python.
"""
