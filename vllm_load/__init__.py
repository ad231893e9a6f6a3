"""vllm-load: distributed load testing for OpenAI-compatible LLM inference servers."""

__version__ = "0.1.0"
