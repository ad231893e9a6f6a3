"""The simulated vLLM OpenAI server (`vllm-load sim`): the built-in target for demos, tests and
client-overhead checks. See docs/simulator.md."""
