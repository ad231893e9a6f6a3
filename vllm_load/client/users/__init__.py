"""Locust users: `llm_user.LLMUser`, the public API a locustfile subclasses (also exported by
`vllm_load.api`), and the built-in tests' users written on it: `closed_loop.ClosedLoopUser` and
`dataset.DatasetUser`."""
