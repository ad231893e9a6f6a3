"""The stepped chat-completion test as a locustfile: users, shape and vllm-load's event wiring.

Run it through `vllm-load run`, or with Locust directly:
    locust -f locustfiles/chat_stepped.py --host http://127.0.0.1:8000 --headless
"""

from vllm_load.client.users import LLMUser
from vllm_load.run.shape import SteppedShape
from vllm_load.run.wiring import install

install()

__all__ = ["LLMUser", "SteppedShape"]
