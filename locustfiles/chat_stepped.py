"""Stepped closed-loop concurrency test (10 -> 1000 by default) against /v1/chat/completions.

    locust -f locustfiles/chat_stepped.py --host http://127.0.0.1:8000 --headless \
        --levels 10,50,100 --input-tokens 2048 --output-tokens 512

All vllm-load options are Locust custom arguments: see `locust -f locustfiles/chat_stepped.py --help`.
"""

from vllm_load.locustfile import ClosedLoopUser, SteppedShape  # noqa: F401
