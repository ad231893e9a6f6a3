"""Counting tokens the way the target does, for exact prompts (`prompts.calibrate`) and dataset
lengths: the target's own `/tokenize`, or a local tokenizer with the chat template. A counter
also gives the prompt's token ids, which say where the template's head ends (the prompt tokens
before the content: `prompts.find_head_tokens`)."""

from __future__ import annotations

from typing import Protocol

from ..endpoints import APIS
from ..server.control import HttpError, request_json


class CalibrationError(Exception):
    """Exact prompts cannot be built; the message says what to do instead."""


class TokenCounter(Protocol):
    """Counts tokens the way the target does."""

    method: str

    def count_text(self, text: str) -> int:
        """Tokens of plain text, no special tokens added."""

    def count_input(self, content: str, endpoint: str) -> int:
        """Prompt tokens the server will count for `content` sent to `endpoint` ("chat": one user
        message with the chat template and generation prompt; "completions": the raw prompt
        with the tokenizer's special tokens)."""

    def input_ids(self, content: str, endpoint: str) -> list[int] | None:
        """The token ids of that prompt (None when the counter cannot tell them)."""


class ServerTokenCounter:
    """Counts with the target's own `/tokenize` endpoint (vLLM has it)."""

    method = "server_tokenize"

    def __init__(
        self, host: str, model: str, api_key: str | None = None, timeout: float = 60.0
    ) -> None:
        self.url = host.rstrip("/") + "/tokenize"
        self.model = model
        self.api_key = api_key
        self.timeout = timeout

    def _ask(self, body: dict) -> dict:
        answer = request_json(
            self.url, {"model": self.model, **body}, api_key=self.api_key, timeout=self.timeout
        )
        if not isinstance(answer, dict) or "count" not in answer:
            raise CalibrationError(
                f"{self.url} answered without a token count: {str(answer)[:200]}"
            )
        return answer

    @staticmethod
    def _input_body(content: str, endpoint: str) -> dict:
        if APIS[endpoint].chat:
            return {
                "messages": [{"role": "user", "content": content}],
                "add_generation_prompt": True,
                "add_special_tokens": False,
            }
        return {"prompt": content, "add_special_tokens": True}

    def count_text(self, text: str) -> int:
        return int(self._ask({"prompt": text, "add_special_tokens": False})["count"])

    def count_input(self, content: str, endpoint: str) -> int:
        return int(self._ask(self._input_body(content, endpoint))["count"])

    def input_ids(self, content: str, endpoint: str) -> list[int] | None:
        tokens = self._ask(self._input_body(content, endpoint)).get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            return None
        return tokens

    def available(self) -> bool:
        try:
            self.count_text(" the")
            return True
        except HttpError as e:
            if e.status in (404, 405, 501):
                return False
            raise


class LocalTokenCounter:
    """Counts with a local tokenizer (`vllm_load.tokenization`), chat template included."""

    method = "local_tokenizer"

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def count_text(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def count_input(self, content: str, endpoint: str) -> int:
        return len(self.input_ids(content, endpoint))

    def input_ids(self, content: str, endpoint: str) -> list[int]:
        if APIS[endpoint].chat:
            return list(
                self.tokenizer.encode_chat(
                    [{"role": "user", "content": content}], add_generation_prompt=True
                )
            )
        return list(self.tokenizer.encode(content, add_special_tokens=True))
