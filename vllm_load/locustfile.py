"""The built-in stepped test as a locustfile: `ClosedLoopUser` through `SteppedShape`.

`vllm-load run` runs it; so does Locust directly:
    locust -f vllm_load/locustfile.py --host http://127.0.0.1:8000 --headless
"""

from vllm_load.api import SteppedShape
from vllm_load.client.users import ClosedLoopUser

__all__ = ["ClosedLoopUser", "SteppedShape"]
