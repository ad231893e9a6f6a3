"""vllm-load's parts of Locust's web UI: the LLM view and the login in front of it."""
