"""A plain Locust locustfile (no vllm-load inside) for checking `vllm-load report PREFIX
--locust-length tokens` against a real vLLM's /metrics.

POST /v1/completions with a fixed prompt that starts with a per-request number (so vLLM's prefix
cache finds nothing), `max_tokens` = PLAIN_MAX_TOKENS with `ignore_eos`, non-streaming; each
response's `usage.completion_tokens` is reported as Locust's response length. A LoadTestShape
holds each of PLAIN_LEVELS (users) for PLAIN_LEVEL_S seconds.

    PLAIN_LEVELS=1,2,4,8 PLAIN_LEVEL_S=60 locust -f bench/realvllm/plain_locust.py \
        --host URL --headless --csv OUT/p --csv-full-history
"""

import itertools
import os
import time

from locust import FastHttpUser, LoadTestShape, constant, task

LEVELS = [int(x) for x in os.environ.get("PLAIN_LEVELS", "1,2,4,8").split(",")]
LEVEL_S = float(os.environ.get("PLAIN_LEVEL_S", "60"))
MAX_TOKENS = int(os.environ.get("PLAIN_MAX_TOKENS", "64"))
MODEL = os.environ.get("PLAIN_MODEL", "tiny-llama")
BODY_WORDS = " ".join(["alpha beta gamma delta epsilon zeta eta theta"] * 12)
_counter = itertools.count()


class Completions(FastHttpUser):
    wait_time = constant(0)

    @task
    def complete(self):
        n = next(_counter)
        body = {
            "model": MODEL,
            "prompt": f"{n} {time.time_ns()} {BODY_WORDS}",
            "max_tokens": MAX_TOKENS,
            "ignore_eos": True,
        }
        with self.client.post(
            "/v1/completions", json=body, name="completions", catch_response=True
        ) as resp:
            try:
                tokens = resp.json()["usage"]["completion_tokens"]
            except Exception as exc:
                resp.failure(f"no usage: {exc}")
                return
            resp.request_meta["response_length"] = tokens
            resp.success()


class Steps(LoadTestShape):
    def tick(self):
        t = self.get_run_time()
        i = int(t // LEVEL_S)
        if i >= len(LEVELS):
            return None
        return LEVELS[i], 100
